//! etcd through `etcd-client`: v3lock `Lock`/`Unlock` with a lease attached
//! for holdings, `LeaseGrant`/`LeaseKeepAlive` for sessions and renewals.
//! This is how an etcd user takes a lock (the `concurrency` package pattern):
//! a session lease kept alive, locks attached to it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use etcd_client::{Client, LockOptions, PutOptions};
use futures::StreamExt;

use crate::procs::R;
use crate::systems::{Held, Kind, Session};

/// An etcd client over a pool of connections.
pub struct Etcd {
    /// Which etcd this is (default or no-fsync).
    pub kind: Kind,
    /// One client per connection, used round-robin.
    clients: Vec<Client>,
    /// The next client to use.
    next: AtomicUsize,
}

impl Etcd {
    /// Opens `conns` connections to etcd at `addr` and waits until it
    /// answers.
    pub async fn connect(kind: Kind, addr: &str, conns: usize) -> R<Etcd> {
        let mut clients = Vec::new();
        for _ in 0..conns.max(1) {
            let c = Client::connect([format!("http://{addr}")], None)
                .await
                .map_err(|e| format!("connect to etcd at {addr}: {e}"))?;
            clients.push(c);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut probe = clients[0].clone();
        while let Err(e) = probe.status().await {
            if Instant::now() > deadline {
                return Err(format!("etcd at {addr} is not ready: {e}"));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Etcd {
            kind,
            clients,
            next: AtomicUsize::new(0),
        })
    }

    /// A client on the next connection.
    fn client(&self) -> Client {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.clients.len();
        self.clients[i].clone()
    }

    /// Grants a session lease.
    pub async fn session(&self, ttl_s: u64) -> R<Session> {
        let resp = self
            .client()
            .lease_grant(ttl_s as i64, None)
            .await
            .map_err(|e| format!("LeaseGrant: {e}"))?;
        Ok(Session {
            follower: Default::default(),
            lease: resp.id(),
            granted_at: Instant::now(),
            ttl_s: resp.ttl().max(0) as u64,
        })
    }

    /// Revokes a session lease (ignoring one that already expired).
    pub async fn end_session(&self, s: Session) -> R<()> {
        let _ = self.client().lease_revoke(s.lease).await;
        Ok(())
    }

    /// Lock `name` with the session's lease; blocks while someone holds it.
    pub async fn acquire(&self, name: &str, s: &Session) -> R<Held> {
        let resp = self
            .client()
            .lock(name, Some(LockOptions::new().with_lease(s.lease)))
            .await
            .map_err(|e| format!("Lock {name}: {e}"))?;
        let rev = resp.header().map_or(0, |h| h.revision()) as u64;
        Ok(Held {
            name: name.to_string(),
            rev,
            token: rev,
            key: String::new(),
            lock_key: resp.key().to_vec(),
            deadline: s.granted_at + Duration::from_secs(s.ttl_s),
            keeper: None,
            lease: s.lease,
            slot: 0,
        })
    }

    /// One keep-alive round trip on the holding's lease.
    pub async fn renew(&self, h: &mut Held) -> R<()> {
        if h.keeper.is_none() {
            h.keeper = Some(
                self.client()
                    .lease_keep_alive(h.lease)
                    .await
                    .map_err(|e| format!("LeaseKeepAlive: {e}"))?,
            );
        }
        let (keeper, stream) = h.keeper.as_mut().expect("set above");
        keeper
            .keep_alive()
            .await
            .map_err(|e| format!("LeaseKeepAlive: {e}"))?;
        match stream.message().await {
            Ok(Some(r)) if r.ttl() > 0 => Ok(()),
            Ok(Some(_)) => Err("LeaseKeepAlive: the lease has expired".into()),
            Ok(None) => Err("LeaseKeepAlive: stream ended".into()),
            Err(e) => Err(format!("LeaseKeepAlive: {e}")),
        }
    }

    /// Unlock.
    pub async fn release(&self, h: &Held) -> R<()> {
        self.client()
            .unlock(h.lock_key.clone())
            .await
            .map_err(|e| format!("Unlock {}: {e}", h.name))?;
        Ok(())
    }

    /// `n` leases with a key each, 128 in flight.
    pub async fn background(&self, prefix: &str, n: usize, ttl_s: u64) -> R<()> {
        let results: Vec<R<()>> = futures::stream::iter(0..n)
            .map(|i| async move {
                let mut c = self.client();
                let lease = c
                    .lease_grant(ttl_s as i64, None)
                    .await
                    .map_err(|e| e.to_string())?
                    .id();
                c.put(
                    format!("{prefix}.{i}"),
                    "bench",
                    Some(PutOptions::new().with_lease(lease)),
                )
                .await
                .map_err(|e| e.to_string())?;
                Ok(())
            })
            .buffer_unordered(128)
            .collect()
            .await;
        let failed: Vec<&String> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        if let Some(first) = failed.first() {
            return Err(format!(
                "{} of {n} background leases failed, first: {first}",
                failed.len()
            ));
        }
        Ok(())
    }

    /// How many leases etcd still has (expired ones wait for revocation,
    /// which etcd rate-limits).
    pub async fn lease_count(&self) -> usize {
        self.client().leases().await.map_or(0, |r| r.leases().len())
    }
}
