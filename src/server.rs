//! Server wiring: connect to NATS, open the bucket, serve the gRPC API with
//! health and reflection, follow the NATS connection in the health status,
//! and shut down gracefully.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use async_nats::{ConnectOptions, Event, ServerAddr};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::StreamExt;
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use std::sync::Arc;

use crate::auth::Auth;
use crate::config::Config;
use crate::embedded::Supervised;
use crate::error::{Error, Reason, Result};
use crate::guard::Guarded;
use crate::lease::Leases;
use crate::limits::{LimitLayer, WatchLimits};
use crate::metrics::METRICS;
use crate::proto::lease_service_server::LeaseServiceServer;
use crate::service::LeaseApi;
use crate::shutdown::Trigger;
use crate::store::Store;
use crate::watch::Hub;

/// The health service name of the lease API.
pub const SERVICE_NAME: &str = "tenure.v1.LeaseService";

/// A running server.
pub struct Running {
    /// The address the gRPC API listens on.
    addr: SocketAddr,
    /// The address of the `/metrics` listener, when on.
    metrics_addr: Option<SocketAddr>,
    /// Starts shutdown.
    trigger: Trigger,
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
        self.trigger.fire();
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
pub async fn start(config: &Config, nats_url: &str, listener: TcpListener) -> Result<Running> {
    let setup = |e: String| Error::new(Reason::Internal, e);
    let auth = Arc::new(Auth::load(config).map_err(setup)?);
    let tls = crate::auth::server_tls(config).map_err(setup)?;
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(crate::metrics::bind(addr).await.map_err(setup)?),
        None => None,
    };
    let (events_tx, events) = mpsc::unbounded_channel();
    let client = connect(config, nats_url, events_tx).await?;
    let store = open_store(client, config).await?;
    let addr = listener
        .local_addr()
        .map_err(|e| Error::new(Reason::Internal, format!("listener has no address: {e}")))?;
    let trigger = Trigger::new();
    let (health, health_service) = tonic_health::server::health_reporter();
    set_health(&health, ServingStatus::Serving).await;
    METRICS.nats_connected.set(1);
    tokio::spawn(follow_connection(
        events,
        store.clone(),
        health.clone(),
        trigger.subscribe(),
    ));

    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            // google.rpc.ErrorInfo, so grpcurl can print error details.
            .register_encoded_file_descriptor_set(tonic_types::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection()
        .build_v1()
        .map_err(|e| Error::new(Reason::Internal, format!("reflection: {e}")))?;
    let reflection_v1alpha = reflection()
        .build_v1alpha()
        .map_err(|e| Error::new(Reason::Internal, format!("reflection: {e}")))?;
    let hub = Hub::start(store.clone(), trigger.subscribe()).await?;
    let metrics_addr = match metrics_listener {
        Some(l) => {
            let addr = l.local_addr().ok();
            tokio::spawn(crate::metrics::serve(l, trigger.subscribe()));
            tokio::spawn(crate::metrics::observe_expiries(
                hub.clone(),
                trigger.subscribe(),
            ));
            addr
        }
        None => None,
    };
    warn_if_open(&auth, tls.is_some(), addr);
    let api = LeaseApi::new(
        Leases::new(store, hub, trigger.subscribe()),
        config.limits(),
        trigger.subscribe(),
    );
    let api = LeaseServiceServer::new(Guarded::new(api, auth, WatchLimits::new(config)))
        .max_decoding_message_size(config.max_request_bytes);
    let incoming = TcpListenerStream::new(listener).map(|conn| {
        conn.inspect(|stream| {
            let _ = stream.set_nodelay(true);
        })
    });
    let mut stop = trigger.subscribe();
    let mut builder = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        builder = builder
            .tls_config(tls)
            .map_err(|e| Error::new(Reason::Internal, format!("TLS settings: {e}")))?;
    }
    let server = builder
        // A backstop: headers beyond this are refused by HTTP/2 itself; the
        // limit layer answers the (smaller) configured limit with a status.
        .http2_max_header_list_size(
            u32::try_from(config.max_metadata_bytes.saturating_mul(4).max(16 * 1024))
                .unwrap_or(u32::MAX),
        )
        .layer(LimitLayer::new(config))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(api)
        .serve_with_incoming_shutdown(incoming, async move { stop.recv().await });
    let task = tokio::spawn(server);
    tracing::info!(%addr, bucket = %config.bucket, "serving tenure.v1.LeaseService");
    Ok(Running {
        addr,
        metrics_addr,
        trigger,
        health,
        task,
        grace: config.shutdown_grace,
    })
}

/// `tenure serve`: starts the local nats-server unless a URL is given, serves
/// until `signal` resolves, then shuts everything down.
pub async fn run(
    config: Config,
    signal: impl Future<Output = ()>,
) -> std::result::Result<(), String> {
    let embedded = match &config.nats_url {
        Some(_) => None,
        None => Some(Supervised::start(config.nats_server.as_deref(), &config.data_dir).await?),
    };
    let url = config
        .nats_url
        .clone()
        .or_else(|| embedded.as_ref().map(|e| e.url().to_string()))
        .unwrap_or_default();
    let result = async {
        let listener = TcpListener::bind(config.listen).await.map_err(|e| {
            format!(
                "cannot listen on {}: {e}; pick another --listen address",
                config.listen
            )
        })?;
        let running = start(&config, &url, listener)
            .await
            .map_err(|e| e.message)?;
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

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
}

/// How often the NATS connection is pinged. async-nats drops a connection
/// after three unanswered pings and reconnects to another server, so this
/// bounds how long Tenure stays attached to a partitioned or frozen node
/// (~6 s) while the rest of the cluster serves. The default (60 s) left
/// Tenure unavailable for up to three minutes (found by
/// `tenure-safety`'s r3-netns-partition scenario; see docs/safety.md).
const NATS_PING_INTERVAL: Duration = Duration::from_secs(2);

/// Connects to NATS with the configured credentials; connection events go to
/// `events`. The client reconnects forever, quickly.
async fn connect(
    config: &Config,
    url: &str,
    events: mpsc::UnboundedSender<Event>,
) -> Result<async_nats::Client> {
    let mut options = ConnectOptions::new()
        .name("tenure")
        .max_reconnects(None)
        .connection_timeout(Duration::from_secs(5))
        .ping_interval(NATS_PING_INTERVAL)
        .reconnect_delay_callback(|attempts| {
            Duration::from_millis((50 * 2u64.saturating_pow(attempts as u32)).min(1000))
        })
        .event_callback(move |event| {
            let events = events.clone();
            async move {
                let _ = events.send(event);
            }
        });
    if let (Some(user), Some(password)) = (&config.nats_user, &config.nats_password) {
        options = options.user_and_password(user.clone(), password.clone());
    }
    if let Some(token) = &config.nats_token {
        options = options.token(token.clone());
    }
    if let Some(creds) = &config.nats_creds {
        options = options.credentials_file(creds).await.map_err(|e| {
            Error::new(
                Reason::Internal,
                format!("cannot read NATS credentials {}: {e}", creds.display()),
            )
        })?;
    }
    if let Some(path) = &config.nats_nkey_file {
        let seed = std::fs::read_to_string(path).map_err(|e| {
            Error::new(
                Reason::Internal,
                format!("cannot read --nats-nkey-file {}: {e}", path.display()),
            )
        })?;
        options = options.nkey(seed.trim().to_string());
    }
    if let Some(ca) = &config.nats_tls_ca {
        options = options.add_root_certificates(ca.clone()).require_tls(true);
    }
    options.connect(server_addrs(url)?).await.map_err(|e| {
        Error::new(
            Reason::NatsUnavailable,
            format!("cannot connect to NATS at {url}: {e}"),
        )
    })
}

/// Parses `--nats-url`: one URL or a comma-separated list of cluster URLs
/// (async-nats parses a string as a single URL only).
fn server_addrs(url: &str) -> Result<Vec<ServerAddr>> {
    url.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| {
            u.parse::<ServerAddr>().map_err(|e| {
                Error::new(
                    Reason::InvalidArgument,
                    format!("invalid NATS URL {u:?} in --nats-url: {e}; use nats://host:port[,nats://host:port...]"),
                )
            })
        })
        .collect()
}

/// Opens the bucket, retrying for a few seconds while JetStream comes up.
async fn open_store(client: async_nats::Client, config: &Config) -> Result<Store> {
    let bucket = config.bucket_config();
    let mut attempts = 0;
    loop {
        match Store::open(client.clone(), &bucket).await {
            Err(err) if err.reason == Reason::NatsUnavailable && attempts < 20 => {
                attempts += 1;
                tracing::debug!(%err, "bucket not ready yet");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            other => return other,
        }
    }
}

/// Keeps health in step with the NATS connection: NOT_SERVING while it is
/// down, SERVING again once it is back and the bucket verifies.
async fn follow_connection(
    mut events: mpsc::UnboundedReceiver<Event>,
    store: Store,
    health: HealthReporter,
    mut shutdown: crate::shutdown::Shutdown,
) {
    // The first Connected event is the initial connection, not a reconnect.
    let mut lost = false;
    loop {
        // After shutdown, NATS going away (the local server stopping with
        // us) is expected: no warning, no health change.
        let event = tokio::select! {
            _ = shutdown.recv() => return,
            event = events.recv() => match event {
                Some(event) => event,
                None => return,
            },
        };
        match event {
            Event::Disconnected => {
                lost = true;
                METRICS.nats_connected.set(0);
                tracing::warn!("NATS connection lost; reconnecting");
                set_health(&health, ServingStatus::NotServing).await;
            }
            Event::Connected => {
                loop {
                    match store.verify().await {
                        Ok(()) => break,
                        Err(err) => {
                            tracing::warn!(%err, "bucket not verified after reconnect; retrying");
                            if !store.is_connected() {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(250)).await;
                        }
                    }
                }
                if store.is_connected() {
                    METRICS.nats_connected.set(1);
                    if std::mem::take(&mut lost) {
                        METRICS.nats_reconnects.inc();
                    }
                    tracing::info!("NATS connected and bucket verified; serving");
                    set_health(&health, ServingStatus::Serving).await;
                }
            }
            Event::LameDuckMode => tracing::warn!("NATS server entered lame duck mode"),
            other => tracing::debug!(event = %other, "NATS event"),
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

/// Sets the status of both the lease service and the whole server ("").
async fn set_health(health: &HealthReporter, status: ServingStatus) {
    health.set_service_status(SERVICE_NAME, status).await;
    health.set_service_status("", status).await;
}
