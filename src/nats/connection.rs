//! The NATS connection: credentials from the settings, a short ping
//! interval so a partitioned or frozen node is left within seconds, and
//! quick, endless reconnects. Connection events go to a channel that the
//! server follows to keep its health status true.

use std::time::Duration;

use async_nats::{ConnectOptions, Event, ServerAddr};
use tokio::sync::mpsc;

use crate::config::Config;
use crate::error::StartError;

/// How often the NATS connection is pinged. async-nats drops a connection
/// after three unanswered pings and reconnects to another server, so this
/// bounds how long Tenure stays attached to a partitioned or frozen node
/// (~6 s) while the rest of the cluster serves. The default (60 s) left
/// Tenure unavailable for up to three minutes (found by the safety
/// checker's r3-netns-partition scenario; see docs/safety.md).
const PING_INTERVAL: Duration = Duration::from_secs(2);

/// Connects to NATS at `url` with the configured credentials; connection
/// events go to `events`. The client reconnects forever, quickly.
pub async fn connect(
    config: &Config,
    url: &str,
    events: mpsc::UnboundedSender<Event>,
) -> Result<async_nats::Client, StartError> {
    let mut options = ConnectOptions::new()
        .name("tenure")
        .max_reconnects(None)
        .connection_timeout(Duration::from_secs(5))
        .ping_interval(PING_INTERVAL)
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
            StartError::Config(format!(
                "cannot read NATS credentials {}: {e}",
                creds.display()
            ))
        })?;
    }
    if let Some(path) = &config.nats_nkey_file {
        let seed = std::fs::read_to_string(path).map_err(|e| {
            StartError::Config(format!(
                "cannot read --nats-nkey-file {}: {e}",
                path.display()
            ))
        })?;
        options = options.nkey(seed.trim().to_string());
    }
    if let Some(ca) = &config.nats_tls_ca {
        options = options.add_root_certificates(ca.clone()).require_tls(true);
    }
    options.connect(server_addrs(url)?).await.map_err(|e| {
        StartError::Nats(crate::error::Error::new(
            crate::error::Reason::NatsUnavailable,
            format!("cannot connect to NATS at {url}: {e}"),
        ))
    })
}

/// Parses `--nats-url`: one URL or a comma-separated list of cluster URLs
/// (async-nats parses a string as a single URL only).
fn server_addrs(url: &str) -> Result<Vec<ServerAddr>, StartError> {
    url.split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(|u| {
            u.parse::<ServerAddr>().map_err(|e| {
                StartError::Config(format!(
                    "invalid NATS URL {u:?} in --nats-url: {e}; use nats://host:port[,nats://host:port...]"
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A comma-separated list is several servers; a bad one is named.
    #[test]
    fn parses_server_lists() {
        let addrs = server_addrs("nats://127.0.0.1:4222, nats://127.0.0.1:4223,").unwrap();
        assert_eq!(addrs.len(), 2);
        let err = server_addrs("nats://127.0.0.1:4222,nats://[bad").unwrap_err();
        assert!(err.to_string().contains("[bad"), "{err}");
    }
}
