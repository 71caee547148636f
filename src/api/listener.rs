//! The accept loop: what a connection may hold before it has made a call.
//!
//! [`Incoming`] wraps the gRPC `TcpListener` for tonic. It caps the open
//! connections (`--max-connections`, lowered at start to fit the open-file
//! limit): past the cap a new connection is accepted and closed at once, so
//! clients fail fast and try another replica instead of hanging in the
//! backlog. When `accept` itself fails (out of file descriptors, say) it
//! logs the error (at most once per [`LOG_EVERY`], with a count of the
//! rest) and waits [`ACCEPT_BACKOFF`] before trying again, instead of
//! spinning on an error that cannot clear at once.
//!
//! Each accepted [`Conn`] closes itself when it has sent no bytes within
//! `--handshake-timeout`, and when no call has run on it for
//! `--idle-timeout`. Which calls are running is counted by
//! [`super::limits::LimitLayer`] through the [`ConnInfo`] that tonic puts
//! in every request's extensions. A plaintext HTTP/1.1 connection
//! (gRPC-Web and Connect callers) also closes when it sends more than a
//! request's worth of bytes (the HTTP/2 header backstop,
//! `--max-request-bytes` and a little) without a call starting: HTTP/1.1
//! has no header-list limit of its own short of hyper's buffer (about half
//! a megabyte), so without this each open connection could make the
//! server hold that much unparsed header.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tonic::transport::server::{Connected, TcpConnectInfo};

use crate::config::Config;
use crate::observe::METRICS;

/// How long the accept loop waits after `accept` failed.
pub const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// At most one log line per this interval for accept errors and refusals.
pub const LOG_EVERY: Duration = Duration::from_secs(5);
/// File descriptors left for NATS, the metrics listener, files and the
/// like when `--max-connections` is fitted to the open-file limit.
const FD_RESERVE: u64 = 64;

/// The gRPC listener as a stream of capped, timed connections.
pub struct Incoming {
    /// The socket.
    listener: TcpListener,
    /// One permit per open connection.
    slots: Arc<Semaphore>,
    /// The cap in force, for messages.
    max: usize,
    /// Set while backing off after an accept error.
    backoff: Option<Pin<Box<Sleep>>>,
    /// Rate limit of the warnings.
    log: RateLog,
    /// Timeouts of each connection.
    timeouts: Timeouts,
}

/// When connections are closed for doing nothing (or too much of it).
#[derive(Clone, Copy)]
struct Timeouts {
    /// Until the first bytes.
    handshake: Duration,
    /// Without any call running.
    idle: Duration,
    /// Most bytes an HTTP/1.1 connection may send before a call starts.
    http1_bytes: usize,
}

/// What an HTTP/2 connection sends first.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0";
/// Slack over one request (request line, HTTP/1.1 framing) for
/// [`Timeouts::http1_bytes`].
const HTTP1_SLACK: usize = 4096;

impl Incoming {
    /// Serves connections from `listener` with the limits of `config`.
    pub fn new(listener: TcpListener, config: &Config) -> Incoming {
        let max = fit_to_fd_limit(config.max_connections);
        Incoming {
            listener,
            slots: Arc::new(Semaphore::new(max)),
            max,
            backoff: None,
            log: RateLog::default(),
            timeouts: Timeouts {
                handshake: config.handshake_timeout,
                // The HTTP/2 header backstop of server.rs, and a request.
                // Under TLS the bytes here are encrypted (and TLS
                // negotiates HTTP/2): no bound.
                http1_bytes: if config.tls_cert.is_some() {
                    usize::MAX
                } else {
                    config
                        .max_metadata_bytes
                        .saturating_mul(4)
                        .max(16 * 1024)
                        .saturating_add(config.max_request_bytes)
                        .saturating_add(HTTP1_SLACK)
                },
                idle: config.idle_timeout,
            },
        }
    }
}

impl Stream for Incoming {
    type Item = io::Result<Conn>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(backoff) = this.backoff.as_mut() {
                std::task::ready!(backoff.as_mut().poll(cx));
                this.backoff = None;
            }
            match this.listener.poll_accept(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(err)) => {
                    METRICS.rejected("accept_errors");
                    if let Some(suppressed) = this.log.due() {
                        tracing::error!(
                            %err,
                            suppressed,
                            "cannot accept a gRPC connection; backing off {ACCEPT_BACKOFF:?} \
                             (out of file descriptors? raise `ulimit -n` or lower --max-connections)"
                        );
                    }
                    this.backoff = Some(Box::pin(tokio::time::sleep(ACCEPT_BACKOFF)));
                }
                Poll::Ready(Ok((stream, peer))) => {
                    let Ok(permit) = this.slots.clone().try_acquire_owned() else {
                        METRICS.rejected("connections");
                        if let Some(suppressed) = this.log.due() {
                            tracing::warn!(
                                %peer,
                                max = this.max,
                                suppressed,
                                "connection closed at once: --max-connections are open"
                            );
                        }
                        drop(stream);
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    return Poll::Ready(Some(Ok(Conn::new(stream, permit, this.timeouts))));
                }
            }
        }
    }
}

/// `max` lowered, with a warning, to what the open-file limit can hold.
fn fit_to_fd_limit(max: usize) -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return max;
    }
    let room = usize::try_from(limit.rlim_cur.saturating_sub(FD_RESERVE).max(1)).unwrap_or(max);
    if room < max {
        tracing::warn!(
            max_connections = max,
            open_file_limit = limit.rlim_cur,
            "--max-connections lowered to {room} to fit the open-file limit; raise `ulimit -n` to allow more"
        );
        room
    } else {
        max
    }
}

/// Lets one log line through per [`LOG_EVERY`], counting the rest.
#[derive(Default)]
struct RateLog {
    /// When the last line was let through.
    last: Option<Instant>,
    /// Lines held back since.
    suppressed: u64,
}

impl RateLog {
    /// `Some(lines held back)` when a line may be logged now.
    fn due(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self.last.is_some_and(|t| now.duration_since(t) < LOG_EVERY) {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

/// What the calls on one connection tell its idle timer.
#[derive(Debug)]
pub struct Activity {
    /// When the connection was accepted.
    epoch: Instant,
    /// Calls running.
    running: AtomicUsize,
    /// Calls started, ever.
    started: AtomicU64,
    /// When the last call started or ended, in ms after `epoch`.
    last_ms: AtomicU64,
}

impl Activity {
    /// Marks now as the last activity.
    fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::Relaxed);
    }

    /// When the connection became idle, or `None` while a call runs.
    fn idle_since(&self) -> Option<Instant> {
        if self.running.load(Ordering::Relaxed) > 0 {
            return None;
        }
        Some(self.epoch + Duration::from_millis(self.last_ms.load(Ordering::Relaxed)))
    }
}

/// Tonic's connection info for a [`Conn`]: the addresses, and the
/// connection's activity, so calls can mark it busy.
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// Local and remote address.
    pub tcp: TcpConnectInfo,
    /// Calls running on the connection.
    activity: Arc<Activity>,
}

impl ConnInfo {
    /// Marks a call running on the connection until the guard drops.
    pub fn call(&self) -> CallGuard {
        self.activity.running.fetch_add(1, Ordering::Relaxed);
        self.activity.started.fetch_add(1, Ordering::Relaxed);
        self.activity.touch();
        CallGuard(self.activity.clone())
    }
}

/// One call running on a connection.
pub struct CallGuard(Arc<Activity>);

impl Drop for CallGuard {
    fn drop(&mut self) {
        self.0.touch();
        self.0.running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One accepted connection: the socket, its slot under
/// `--max-connections`, and its handshake and idle timers.
pub struct Conn {
    /// The socket.
    stream: TcpStream,
    /// What requests see.
    info: ConnInfo,
    /// The slot, freed when the connection closes.
    _permit: OwnedSemaphorePermit,
    /// Fires at the next moment the connection may be due to close.
    timer: Pin<Box<Sleep>>,
    /// Whether no bytes have arrived yet.
    silent: bool,
    /// The timeouts.
    timeouts: Timeouts,
    /// Whether the connection speaks HTTP/1.1 (None until its first bytes
    /// tell).
    http1: Option<bool>,
    /// HTTP/1.1: bytes read while no call ran, since the last call started.
    idle_bytes: usize,
    /// [`Activity::started`] when `idle_bytes` was last reset.
    seen_started: u64,
}

impl Conn {
    fn new(stream: TcpStream, permit: OwnedSemaphorePermit, timeouts: Timeouts) -> Conn {
        let tcp = stream.connect_info();
        let now = Instant::now();
        Conn {
            stream,
            info: ConnInfo {
                tcp,
                activity: Arc::new(Activity {
                    epoch: now,
                    running: AtomicUsize::new(0),
                    started: AtomicU64::new(0),
                    last_ms: AtomicU64::new(0),
                }),
            },
            _permit: permit,
            timer: Box::pin(tokio::time::sleep_until(now + timeouts.handshake)),
            silent: true,
            timeouts,
            http1: None,
            idle_bytes: 0,
            seen_started: 0,
        }
    }

    /// Counts `read`, just read, against the HTTP/1.1 bound; Err when the
    /// connection is over it.
    fn count(&mut self, read: &[u8]) -> Result<(), &'static str> {
        if self.http1.is_none() {
            let n = read.len().min(H2_PREFACE.len());
            if read[..n] != H2_PREFACE[..n] {
                self.http1 = Some(true);
            } else if n == H2_PREFACE.len() {
                self.http1 = Some(false);
            }
        }
        if self.http1 != Some(true) {
            return Ok(());
        }
        let activity = &self.info.activity;
        let started = activity.started.load(Ordering::Relaxed);
        if started != self.seen_started {
            self.seen_started = started;
            self.idle_bytes = 0;
        }
        if activity.running.load(Ordering::Relaxed) > 0 {
            return Ok(());
        }
        self.idle_bytes = self.idle_bytes.saturating_add(read.len());
        if self.idle_bytes > self.timeouts.http1_bytes {
            return Err("sent more than a request's bytes over HTTP/1.1 before any call started");
        }
        Ok(())
    }

    /// Whether the connection is due to close: silent past the handshake
    /// timeout, or idle past the idle timeout. Keeps the timer armed.
    fn expired(&mut self, cx: &mut Context<'_>) -> Option<&'static str> {
        loop {
            if self.timer.as_mut().poll(cx).is_pending() {
                return None;
            }
            if self.silent {
                return Some("sent nothing within --handshake-timeout");
            }
            let now = Instant::now();
            let next = match self.info.activity.idle_since() {
                Some(since) if now.duration_since(since) >= self.timeouts.idle => {
                    return Some("no call within --idle-timeout");
                }
                Some(since) => since + self.timeouts.idle,
                None => now + self.timeouts.idle,
            };
            self.timer.as_mut().reset(next);
        }
    }
}

impl Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Some(why) = self.expired(cx) {
            tracing::debug!(peer = ?self.info.tcp.remote_addr, "closing connection: {why}");
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why)));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.silent = false;
            if let Err(why) = self.count(&buf.filled()[before..]) {
                METRICS.rejected("metadata_bytes");
                tracing::debug!(peer = ?self.info.tcp.remote_addr, "closing connection: {why}");
                return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, why)));
            }
        }
        polled
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}
