//! Turning the connection flags into a gRPC client: the endpoint, TLS and
//! mutual TLS, and the bearer token attached to every call.
//!
//! One place so that every subcommand reaches the server the same way and
//! fails the same way (exit 69 with the URL and what to check) when it
//! cannot.

use std::time::Duration;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use super::args::Connection;
use super::error::CliError;
use crate::proto::lease_service_client::LeaseServiceClient;

/// The client every subcommand uses.
pub type Client = LeaseServiceClient<InterceptedService<Channel, Bearer>>;

/// Adds `authorization: Bearer TOKEN` to each call when a token is set.
#[derive(Clone)]
pub struct Bearer {
    /// The header value, ready to send.
    header: Option<MetadataValue<Ascii>>,
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(h) = &self.header {
            req.metadata_mut().insert("authorization", h.clone());
        }
        Ok(req)
    }
}

/// Reads the token from --token or the first line of --token-file.
fn token(conn: &Connection) -> Result<Option<String>, CliError> {
    if let Some(t) = &conn.token {
        return Ok(Some(t.trim().to_string()));
    }
    let Some(path) = &conn.token_file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path).map_err(|e| {
        CliError::usage(format!("cannot read --token-file {}: {e}", path.display()))
    })?;
    let line = text.lines().next().unwrap_or("").trim().to_string();
    if line.is_empty() {
        return Err(CliError::usage(format!(
            "--token-file {} is empty: put the token on its first line",
            path.display()
        )));
    }
    Ok(Some(line))
}

/// Builds the endpoint: URL, TLS and timeouts. No I/O but reading files.
pub fn endpoint(conn: &Connection) -> Result<Endpoint, CliError> {
    let url = if conn.server.contains("://") {
        conn.server.clone()
    } else {
        format!("http://{}", conn.server)
    };
    let tls = url.starts_with("https://") || conn.tls_ca.is_some();
    let url = if tls && url.starts_with("http://") {
        url.replacen("http://", "https://", 1)
    } else {
        url
    };
    let mut ep = Endpoint::from_shared(url.clone())
        .map_err(|e| CliError::usage(format!("--server {url:?} is not a URL: {e}")))?
        .connect_timeout(conn.timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(5))
        .keep_alive_timeout(Duration::from_secs(5))
        .keep_alive_while_idle(true);
    if tls {
        let read = |flag: &str, p: &std::path::Path| {
            std::fs::read(p)
                .map_err(|e| CliError::usage(format!("cannot read {flag} {}: {e}", p.display())))
        };
        let Some(ca) = &conn.tls_ca else {
            return Err(CliError::usage(format!(
                "--server {url} uses TLS: give the CA that signed its certificate with --tls-ca"
            )));
        };
        let mut cfg =
            ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read("--tls-ca", ca)?));
        if let (Some(cert), Some(key)) = (&conn.tls_cert, &conn.tls_key) {
            cfg = cfg.identity(Identity::from_pem(
                read("--tls-cert", cert)?,
                read("--tls-key", key)?,
            ));
        }
        if let Some(domain) = &conn.tls_domain {
            cfg = cfg.domain_name(domain.clone());
        }
        ep = ep
            .tls_config(cfg)
            .map_err(|e| CliError::usage(format!("TLS settings refused: {e}")))?;
    }
    Ok(ep)
}

/// Connects now, so that an unreachable server is reported before anything
/// else happens. The channel reconnects by itself afterwards.
pub async fn connect(conn: &Connection) -> Result<Client, CliError> {
    let ep = endpoint(conn)?;
    let header = match token(conn)? {
        Some(t) => Some(
            format!("Bearer {t}")
                .parse::<MetadataValue<Ascii>>()
                .map_err(|_| CliError::usage("the token has characters a header cannot carry"))?,
        ),
        None => None,
    };
    let channel = match tokio::time::timeout(conn.timeout, ep.connect()).await {
        Ok(Ok(ch)) => ch,
        Ok(Err(e)) => return Err(CliError::unreachable(&conn.server, &e)),
        Err(_) => {
            let mut e = CliError::unreachable(&conn.server, &std::fmt::Error);
            e.message = format!(
                "cannot reach {}: no connection within --timeout {:?}",
                conn.server, conn.timeout
            );
            return Err(e);
        }
    };
    Ok(LeaseServiceClient::with_interceptor(
        channel,
        Bearer { header },
    ))
}

/// A request with a deadline: `--timeout`, plus `extra` for calls that
/// wait on purpose (Acquire with a wait).
pub fn request<T>(msg: T, conn: &Connection, extra: Duration) -> tonic::Request<T> {
    let mut req = tonic::Request::new(msg);
    req.set_timeout(conn.timeout + extra);
    req
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// Parses just the connection flags, as a subcommand would.
    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        conn: Connection,
    }

    fn conn(args: &[&str]) -> Connection {
        T::parse_from(std::iter::once("t").chain(args.iter().copied())).conn
    }

    /// A bare HOST:PORT is taken as http; a URL that is not one is a usage
    /// error, not a panic.
    #[test]
    fn endpoints() {
        let ep = endpoint(&conn(&["--server", "127.0.0.1:7419"])).unwrap();
        assert_eq!(ep.uri().to_string(), "http://127.0.0.1:7419/");
        let err = endpoint(&conn(&["--server", "http://exa mple"])).unwrap_err();
        assert_eq!(err.code, super::super::error::EXIT_USAGE);
    }

    /// https without a CA says what to give; a missing CA file is named.
    #[test]
    fn tls_needs_a_ca() {
        let err = endpoint(&conn(&["--server", "https://tenure:7419"])).unwrap_err();
        assert!(err.to_string().contains("--tls-ca"), "{err}");
        let err = endpoint(&conn(&[
            "--server",
            "https://tenure:7419",
            "--tls-ca",
            "/nonexistent/ca.pem",
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/ca.pem"), "{err}");
    }

    /// The token comes from the first line of --token-file.
    #[test]
    fn token_file() {
        let dir = std::env::temp_dir().join(format!("tenure-cli-token-{}", std::process::id()));
        std::fs::write(&dir, "s3cret\nignored\n").unwrap();
        let t = token(&conn(&["--token-file", dir.to_str().unwrap()])).unwrap();
        std::fs::remove_file(&dir).ok();
        assert_eq!(t.as_deref(), Some("s3cret"));
    }
}
