//! NATS authentication with an nkey seed file: Tenure connects to a
//! nats-server that only admits that nkey, and is refused without it.

use crate::common::*;
use tenure::{Config, NatsProcess};

/// A nats-server that admits only `nkey_public`; stopped on drop.
struct LockedNats {
    process: NatsProcess,
    _dir: tempfile::TempDir,
}

impl LockedNats {
    async fn start(nkey_public: &str) -> LockedNats {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("nats.conf");
        std::fs::write(
            &conf,
            format!("authorization {{ users = [ {{ nkey: {nkey_public} }} ] }}\n"),
        )
        .unwrap();
        let bin = tenure::find_binary(None).expect("nats-server");
        let process =
            NatsProcess::spawn_with_config(&bin, &dir.path().join("js"), None, Some(&conf))
                .await
                .expect("start nats-server");
        LockedNats { process, _dir: dir }
    }

    fn url(&self) -> String {
        self.process.url()
    }
}

#[tokio::test]
async fn nkey_seed_file_authenticates_to_nats() {
    let user = nkeys::KeyPair::new_user();
    let nats = LockedNats::start(&user.public_key()).await;
    let dir = tempfile::tempdir().unwrap();
    let seed_file = dir.path().join("tenure.nk");
    std::fs::write(&seed_file, user.seed().unwrap()).unwrap();

    // Without the nkey: refused.
    let config = Config::for_nats(&nats.url());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let Err(err) = tenure::start(&config, &nats.url(), listener).await else {
        panic!("connected to a locked NATS without credentials");
    };
    assert!(
        err.to_string().contains("cannot connect to NATS"),
        "{}",
        err
    );

    // With it: serves.
    let config = Config {
        nats_nkey_file: Some(seed_file),
        ..config
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = tenure::start(&config, &nats.url(), listener)
        .await
        .expect("connects with the nkey");
    let mut c = tenure::proto::lease_service_client::LeaseServiceClient::connect(format!(
        "http://{}",
        running.addr()
    ))
    .await
    .unwrap();
    acquire(&mut c, acquire_req("nkey.ok", "w", 10)).await;
    running.shutdown().await;
}
