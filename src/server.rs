//! Wiring: connect to NATS, open the bucket, start the shared watcher,
//! serve the gRPC API with health and reflection behind the limit layer
//! (and on the same port gRPC-Web and the Connect protocol, translated in
//! front of it), follow the NATS connection in the health status, and
//! shut down gracefully. Nothing here decides anything about leases.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_nats::Event;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::api::{
    Auth, CallLimits, ConnectLayer, ElectionApi, Fences, Incoming, LeaseApi, LimitLayer,
    WatchLimits,
};
use crate::config::Config;
use crate::error::StartError;
use crate::lease::{Hub, Leases, Shards, WatchBudget, WATCH_BUFFER_EVENTS};
use crate::nats::embedded::Supervised;
use crate::nats::{History, Store};
use crate::observe::{version, METRICS};
use crate::proto::election_service_server::ElectionServiceServer;
use crate::proto::lease_service_server::LeaseServiceServer;

/// The health service name of the lease API.
pub const SERVICE_NAME: &str = "tenure.v1.LeaseService";
/// The health service name of the election API (same status as the lease
/// API: it runs on the same leases).
pub const ELECTION_SERVICE_NAME: &str = "tenure.v1.ElectionService";
/// How often an HTTP/2 ping checks that a client is still there.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
/// The HTTP/2 flow-control window of each call, in bytes.
const STREAM_WINDOW: u32 = 64 * 1024;
/// How long a client has to answer the ping before its connection closes.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// A running server.
pub struct Running {
    /// The address the gRPC API listens on.
    addr: SocketAddr,
    /// The address of the `/metrics` listener, when on.
    metrics_addr: Option<SocketAddr>,
    /// Cancelled to start shutdown.
    shutdown: CancellationToken,
    /// Reports NOT_SERVING when shutdown starts.
    health: HealthReporter,
    /// The tonic server task.
    task: JoinHandle<std::result::Result<(), tonic::transport::Error>>,
    /// How long in-flight calls get to finish.
    grace: Duration,
}

impl Running {
    /// The address the gRPC API listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The address of the `/metrics` listener, when `--metrics-listen` is set.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// Shuts down: health NOT_SERVING, stop accepting, end watch streams,
    /// let in-flight calls finish within the grace period.
    pub async fn shutdown(self) {
        set_health(&self.health, ServingStatus::NotServing).await;
        self.shutdown.cancel();
        let mut task = self.task;
        match tokio::time::timeout(self.grace, &mut task).await {
            Ok(Ok(Ok(()))) => tracing::info!("stopped"),
            Ok(Ok(Err(err))) => tracing::error!(%err, "server ended with an error"),
            Ok(Err(err)) => tracing::error!(%err, "server task failed"),
            Err(_) => {
                tracing::warn!(grace = ?self.grace, "calls still running after the grace period; dropping them");
                task.abort();
            }
        }
    }
}

/// Connects to NATS at `nats_url`, opens the bucket and serves on `listener`.
pub async fn start(
    config: &Config,
    nats_url: &str,
    listener: TcpListener,
) -> Result<Running, StartError> {
    let auth = Arc::new(Auth::load(config).map_err(StartError::Config)?);
    let tls = crate::api::server_tls(config).map_err(StartError::Config)?;
    let metrics_listener =
        match config.metrics_listen {
            Some(addr) => Some(crate::observe::bind_metrics(addr).await.map_err(|source| {
                StartError::Listen {
                    flag: "--metrics-listen",
                    addr,
                    source,
                }
            })?),
            None => None,
        };
    let (events_tx, events) = mpsc::unbounded_channel();
    let client = crate::nats::connect(config, nats_url, events_tx).await?;
    let stores = Store::open_shards(client.clone(), &config.bucket_config())
        .await
        .map_err(StartError::Nats)?;
    let history = match config.history_retention.is_zero() {
        true => None,
        false => Some(
            History::open(
                client,
                &config.bucket,
                &stores.iter().map(Store::stream_name).collect::<Vec<_>>(),
                config.history_retention,
                config.replicas,
            )
            .await
            .map_err(StartError::Nats)?,
        ),
    };
    crate::nats::balance_leaders(&stores).await;
    let addr = listener
        .local_addr()
        .map_err(|e| StartError::Internal(format!("listener has no address: {e}")))?;
    let shutdown = CancellationToken::new();
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, ServingStatus::Serving).await;
    METRICS.nats_connected.set(1);

    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            // google.rpc.ErrorInfo, so grpcurl can print error details.
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_error = |e| StartError::Internal(format!("reflection: {e}"));
    let reflection_v1 = reflection().build_v1().map_err(reflection_error)?;
    let reflection_v1alpha = reflection().build_v1alpha().map_err(reflection_error)?;
    let budget = Arc::new(WatchBudget::new(
        WATCH_BUFFER_EVENTS,
        config.max_watch_buffer_bytes,
        config.max_watch_buffer_total_bytes,
    ));
    let idle = (!config.watcher_idle_timeout.is_zero()).then_some(config.watcher_idle_timeout);
    // One shared watcher per shard: each follows its own stream.
    let mut shards = Vec::with_capacity(stores.len());
    for store in &stores {
        let hold = config.watcher_hold.as_ref();
        let hub = Hub::start(store.clone(), budget.clone(), idle, shutdown.clone(), hold)
            .await
            .map_err(StartError::Nats)?;
        let leases = Leases::new(store.clone(), hub, shutdown.clone());
        shards.push(
            leases
                .with_max_waiters(config.max_waiters.into())
                .with_test_faults(config.test_faults()),
        );
    }
    let shards = Shards::new(shards).with_history(history);
    // Unused semaphores are removed by every replica, each shard apart.
    for leases in shards.all() {
        tokio::spawn(leases.clone().sweep_semaphores());
    }
    tokio::spawn(follow_connection(
        events,
        all_healthy(
            shards.all().iter().map(Leases::healthy).collect(),
            &shutdown,
        ),
        stores.clone(),
        health.clone(),
        shutdown.clone(),
    ));
    let metrics_addr = match metrics_listener {
        Some(l) => {
            let addr = l.local_addr().ok();
            tokio::spawn(crate::observe::serve_metrics(l, shutdown.clone()));
            addr
        }
        None => None,
    };
    warn_if_open(&auth, tls.is_some(), addr);
    let calls = CallLimits::new(config, auth.enabled());
    let fences = Arc::new(Fences::load(config).map_err(StartError::Config)?);
    tracing::info!("{}", fences.summary());
    tokio::spawn(reload_on_hangup(fences.clone(), shutdown.clone()));
    let api = Arc::new(
        LeaseApi::new(
            shards,
            config.limits(),
            auth,
            WatchLimits::new(config),
            calls,
            shutdown.clone(),
            config.keepalive(),
        )
        .with_fences(fences),
    );
    // Elections share the lease service's wrapper, limits and watch slots.
    let elections = ElectionServiceServer::new(ElectionApi::new(api.clone()))
        .max_decoding_message_size(config.max_request_bytes);
    let api = LeaseServiceServer::from_arc(api).max_decoding_message_size(config.max_request_bytes);
    // Caps connections, backs off on accept errors, closes silent and idle
    // connections.
    let incoming = Incoming::new(listener, config);
    let connect = ConnectLayer::new(config).map_err(StartError::Internal)?;
    let stop = shutdown.clone();
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder
            .tls_config(tls)
            .map_err(|e| StartError::Config(format!("TLS settings: {e}")))?;
    }
    let server = builder
        // A backstop: headers beyond this are refused by HTTP/2 itself; the
        // limit layer answers the (smaller) configured limit with a status.
        .http2_max_header_list_size(
            u32::try_from(config.max_metadata_bytes.saturating_mul(4).max(16 * 1024))
                .unwrap_or(u32::MAX),
        )
        // Calls one connection may have open at once.
        .max_concurrent_streams(config.max_streams_per_connection)
        // What one call may send before Tenure reads it: a few request
        // messages (--max-request-bytes), not HTTP/2's default megabyte,
        // so a stream Tenure stops reading (a KeepAlive whose client does
        // not read its replies) holds little of its memory.
        .initial_stream_window_size(STREAM_WINDOW)
        // Dead peers: a ping every 30 s must be answered within 10 s.
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        // HTTP/1.1 too, for gRPC-Web and Connect callers (browsers, curl).
        .accept_http1(true)
        // Outermost first: Connect calls become gRPC calls (over HTTP/1.1
        // too, which tonic-web would refuse), gRPC-Web calls become gRPC
        // calls, and every call then meets the same limits and services.
        .layer(connect)
        .layer(tonic_web::GrpcWebLayer::new())
        .layer(LimitLayer::new(config, shutdown.clone()))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(api)
        .add_service(elections)
        .serve_with_incoming_shutdown(incoming, async move { stop.cancelled().await });
    let task = tokio::spawn(server);
    tracing::info!(
        %addr,
        bucket = %config.bucket,
        shards = stores.len(),
        version = %version::VERSION,
        commit = %version::COMMIT,
        built = %version::BUILD_DATE,
        "serving tenure.v1.LeaseService and tenure.v1.ElectionService"
    );
    Ok(Running {
        addr,
        metrics_addr,
        shutdown,
        health,
        task,
        grace: config.shutdown_grace,
    })
}

/// `tenure serve`: starts the local nats-server unless a URL is given, serves
/// until `signal` resolves, then shuts everything down.
pub async fn run(config: Config, signal: impl Future<Output = ()>) -> Result<(), StartError> {
    let embedded = match &config.nats_url {
        Some(_) => None,
        None => Some(
            Supervised::start(config.nats_server.as_deref(), &config.data_dir)
                .await
                .map_err(StartError::LocalNats)?,
        ),
    };
    let url = config
        .nats_url
        .clone()
        .or_else(|| embedded.as_ref().map(|e| e.url().to_string()))
        .unwrap_or_default();
    let result = async {
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| StartError::Listen {
                    flag: "--listen",
                    addr: config.listen,
                    source,
                })?;
        let running = start(&config, &url, listener).await?;
        signal.await;
        tracing::info!("shutting down");
        running.shutdown().await;
        Ok(())
    }
    .await;
    if let Some(embedded) = embedded {
        embedded.stop().await;
    }
    result
}

/// Everything `tenure check-config` verifies beyond parsing: the settings
/// agree, the TLS files and the token file load. Returns a summary line.
pub fn check_config(config: &Config) -> Result<String, StartError> {
    config.validate().map_err(StartError::Config)?;
    let auth = Auth::load(config).map_err(StartError::Config)?;
    let tls = crate::api::server_tls(config).map_err(StartError::Config)?;
    let fences = Fences::load(config).map_err(StartError::Config)?;
    let mode = match (&tls, config.tls_client_ca.is_some()) {
        (None, _) => "plaintext gRPC",
        (Some(_), false) => "TLS",
        (Some(_), true) => "mutual TLS",
    };
    let auth_line = if auth.enabled() {
        format!(
            "auth on: {} token(s), client certificates {}, {} grant(s)",
            auth.token_count(),
            if config.tls_client_ca.is_some() {
                "identify callers"
            } else {
                "not used"
            },
            config.grants.len()
        )
    } else {
        "auth OFF: every caller may do everything".to_string()
    };
    Ok(format!("ok: {mode}; {auth_line}; {}", fences.summary()))
}

/// Re-reads the fence key files on each SIGHUP until shutdown (the
/// operator's key rotation: docs/fencing.md); a failed reload is logged
/// and the keys in force stay.
async fn reload_on_hangup(fences: Arc<Fences>, shutdown: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hangups) = signal(SignalKind::hangup()) else {
        tracing::warn!("SIGHUP cannot be caught: fence keys reload only on restart");
        return;
    };
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            got = hangups.recv() => if got.is_none() { return },
        }
        match fences.reload() {
            Ok(summary) => tracing::info!("SIGHUP: fence keys reloaded: {summary}"),
            Err(e) => {
                tracing::error!("SIGHUP: fence keys not reloaded, the keys in force stay: {e}")
            }
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
}

/// What the health status follows: SERVING only while the NATS connection
/// is up (and the bucket verified after a reconnect) and the shared bucket
/// watcher is following the bucket.
async fn follow_connection(
    mut events: mpsc::UnboundedReceiver<Event>,
    mut watcher: tokio::sync::watch::Receiver<bool>,
    stores: Vec<Store>,
    health: HealthReporter,
    shutdown: CancellationToken,
) {
    // The first Connected event is the initial connection, not a reconnect.
    let mut lost = false;
    let mut connected = true;
    let mut serving = true;
    loop {
        // After shutdown, NATS going away (the local server stopping with
        // us) is expected: no warning, no health change.
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = watcher.changed() => {
                if changed.is_err() {
                    return;
                }
                if *watcher.borrow_and_update() {
                    tracing::info!("shared bucket watch is following the bucket again");
                } else {
                    tracing::warn!("shared bucket watch interrupted: watches are refused until it resumes");
                }
            }
            event = events.recv() => match event {
                None => return,
                Some(Event::Disconnected) => {
                    lost = true;
                    connected = false;
                    METRICS.nats_connected.set(0);
                    tracing::warn!("NATS connection lost; reconnecting");
                }
                Some(Event::Connected) => {
                    for store in &stores {
                        verify_after_reconnect(store).await;
                    }
                    if stores.iter().all(Store::is_connected) {
                        connected = true;
                        METRICS.nats_connected.set(1);
                        if std::mem::take(&mut lost) {
                            METRICS.nats_reconnects.inc();
                        }
                        tracing::info!("NATS connected and bucket verified");
                    }
                }
                Some(Event::LameDuckMode) => tracing::warn!("NATS server entered lame duck mode"),
                Some(other) => tracing::debug!(event = %other, "NATS event"),
            },
        }
        let now = connected && *watcher.borrow();
        if now != serving {
            serving = now;
            let status = if now {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            tracing::info!(?status, "health changed");
            set_health(&health, status).await;
        }
    }
}

/// Whether every shard's shared watcher is following its stream: one
/// receiver for the health status, changing when that answer does.
fn all_healthy(
    mut hubs: Vec<tokio::sync::watch::Receiver<bool>>,
    shutdown: &CancellationToken,
) -> tokio::sync::watch::Receiver<bool> {
    if hubs.len() == 1 {
        return hubs.remove(0);
    }
    let all = |hubs: &[tokio::sync::watch::Receiver<bool>]| hubs.iter().all(|h| *h.borrow());
    let (tx, rx) = tokio::sync::watch::channel(all(&hubs));
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        loop {
            let changed =
                futures::future::select_all(hubs.iter_mut().map(|h| Box::pin(h.changed())));
            tokio::select! {
                _ = shutdown.cancelled() => return,
                (result, _, _) = changed => if result.is_err() {
                    return;
                },
            }
            let now = all(&hubs);
            tx.send_if_modified(|v| std::mem::replace(v, now) != now);
        }
    });
    rx
}

/// Verifies the bucket again after a reconnect, retrying while connected.
async fn verify_after_reconnect(store: &Store) {
    loop {
        match store.verify().await {
            Ok(()) => return,
            Err(err) => {
                tracing::warn!(%err, "bucket not verified after reconnect; retrying");
                if !store.is_connected() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    }
}

/// Logs a loud warning when callers are not authenticated: anyone who can
/// reach the port can take, release and revoke every lease.
fn warn_if_open(auth: &Auth, tls: bool, addr: SocketAddr) {
    if auth.enabled() {
        if !tls {
            tracing::warn!(%addr, "bearer tokens travel in plaintext: set --tls-cert and --tls-key");
        }
        return;
    }
    if addr.ip().is_loopback() {
        tracing::warn!(
            %addr,
            "AUTHENTICATION IS OFF: any local process can take, release and revoke every lease; \
             set --auth-tokens or --tls-client-ca (and [[grant]]s) before exposing Tenure"
        );
    } else {
        tracing::error!(
            %addr,
            "AUTHENTICATION IS OFF ON A NETWORK ADDRESS: anyone who can reach this port can take, \
             release and revoke every lease; set --auth-tokens or --tls-client-ca with [[grant]]s, \
             or listen on 127.0.0.1"
        );
    }
}

/// Sets the status of the lease and election services and of the whole
/// server ("").
async fn set_health(health: &HealthReporter, status: ServingStatus) {
    health.set_service_status(SERVICE_NAME, status).await;
    health
        .set_service_status(ELECTION_SERVICE_NAME, status)
        .await;
    health.set_service_status("", status).await;
}
