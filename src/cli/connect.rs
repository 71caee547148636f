//! Turning the connection flags into a gRPC client: the endpoint, TLS and
//! mutual TLS, and the bearer token attached to every call.
//!
//! One place so that every subcommand reaches the server the same way and
//! fails the same way (exit 69 with the URL and what to check) when it
//! cannot.

use std::io::Read;
use std::path::Path;
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

/// Largest --token-file read: no token comes near it.
pub const MAX_TOKEN_FILE: u64 = 64 << 10;
/// Largest PEM file read (--tls-ca, --tls-cert, --tls-key): room for a
/// long chain or CA bundle.
pub const MAX_PEM_FILE: u64 = 1 << 20;

/// Reads a file of at most `limit` bytes (`size` names the limit in the
/// message), refusing a larger one: a file that never ends (`/dev/zero`)
/// or is not the one meant is never read into memory whole.
fn read_bounded(flag: &str, path: &Path, limit: u64, size: &str) -> Result<Vec<u8>, CliError> {
    let cannot =
        |e: std::io::Error| CliError::usage(format!("cannot read {flag} {}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(cannot)?;
    let mut data = Vec::new();
    file.take(limit + 1)
        .read_to_end(&mut data)
        .map_err(cannot)?;
    if data.len() as u64 > limit {
        return Err(CliError::usage(format!(
            "{flag} {} is larger than {size}, the most it may hold: point it at the right file",
            path.display()
        )));
    }
    Ok(data)
}

/// Reads the token from --token or the first line of --token-file (at
/// most [`MAX_TOKEN_FILE`] bytes).
fn token(conn: &Connection) -> Result<Option<String>, CliError> {
    if let Some(t) = &conn.token {
        return Ok(Some(t.trim().to_string()));
    }
    let Some(path) = &conn.token_file else {
        return Ok(None);
    };
    let data = read_bounded("--token-file", path, MAX_TOKEN_FILE, "64 KiB")?;
    let text = String::from_utf8(data).map_err(|_| {
        CliError::usage(format!(
            "--token-file {} is not UTF-8 text: put the token on its first line",
            path.display()
        ))
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

/// The server URL and whether it uses TLS: `https://` does, `http://` does
/// not (and then a TLS flag is a contradiction, refused), a bare
/// `HOST:PORT` does when a TLS flag is given. Any other scheme is refused:
/// it would otherwise be spoken to as plaintext HTTP/2.
fn url(conn: &Connection) -> Result<(String, bool), CliError> {
    let server = conn.server.trim();
    let tls_flag = [
        ("--tls-ca", conn.tls_ca.is_some()),
        ("--tls-cert", conn.tls_cert.is_some()),
        ("--tls-domain", conn.tls_domain.is_some()),
    ]
    .into_iter()
    .find_map(|(flag, set)| set.then_some(flag));
    let Some((scheme, rest)) = server.split_once("://") else {
        let tls = tls_flag.is_some();
        let scheme = if tls { "https" } else { "http" };
        return Ok((format!("{scheme}://{server}"), tls));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "https" => Ok((format!("https://{rest}"), true)),
        "http" => match tls_flag {
            Some(flag) => Err(CliError::usage(format!(
                "{flag} is for TLS, but --server {server} is plaintext: use --server https://{rest}"
            ))),
            None => Ok((format!("http://{rest}"), false)),
        },
        _ => Err(CliError::usage(format!(
            "--server {server} has an unsupported scheme: use http://HOST:PORT, or https://HOST:PORT for TLS"
        ))),
    }
}

/// Builds the endpoint: URL, TLS and timeouts. No I/O but reading files
/// (each at most [`MAX_PEM_FILE`] bytes).
pub fn endpoint(conn: &Connection) -> Result<Endpoint, CliError> {
    let (url, tls) = url(conn)?;
    let mut ep = Endpoint::from_shared(url.clone())
        .map_err(|e| CliError::usage(format!("--server {url:?} is not a URL: {e}")))?
        .connect_timeout(conn.timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(5))
        .keep_alive_timeout(Duration::from_secs(5))
        .keep_alive_while_idle(true);
    if tls {
        let read = |flag: &str, p: &Path| read_bounded(flag, p, MAX_PEM_FILE, "1 MiB");
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
    Ok(LeaseServiceClient::new(channel(conn).await?))
}

/// [`connect`] for any service: the connected channel with the bearer
/// token added to every call (`tenure health` puts the gRPC health client
/// on it).
pub async fn channel(conn: &Connection) -> Result<InterceptedService<Channel, Bearer>, CliError> {
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
    Ok(InterceptedService::new(channel, Bearer { header }))
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

    /// Only http and https (in any case) are spoken; a bare HOST:PORT is
    /// TLS when a TLS flag asks for it; an explicit http:// with a TLS flag
    /// is a contradiction.
    #[test]
    fn schemes() {
        let url_of = |args: &[&str]| url(&conn(args));
        assert_eq!(
            url_of(&["--server", "HTTP://h:1"]).unwrap(),
            ("http://h:1".to_string(), false)
        );
        assert_eq!(
            url_of(&["--server", "h:1", "--tls-ca", "ca.pem"]).unwrap(),
            ("https://h:1".to_string(), true)
        );
        for server in ["ftp://h:1", "unix:///run/t.sock", "grpc://h:1", "://h"] {
            let err = url_of(&["--server", server]).unwrap_err();
            assert_eq!(err.code, super::super::error::EXIT_USAGE, "{server}");
            assert!(err.to_string().contains("https://"), "{err}");
        }
        for flag in ["--tls-ca", "--tls-domain"] {
            let err = url_of(&["--server", "http://h:1", flag, "x"]).unwrap_err();
            assert!(
                err.to_string().contains("use --server https://h:1"),
                "{err}"
            );
        }
    }

    /// Files are read up to their bound, and a larger one is refused
    /// without being read whole.
    #[test]
    fn bounded_reads() {
        let data = read_bounded("--tls-ca", Path::new("/dev/zero"), 1024, "1 KiB").unwrap_err();
        assert!(data.to_string().contains("larger than 1 KiB"), "{data}");
        let dir = std::env::temp_dir().join(format!("tenure-cli-bounded-{}", std::process::id()));
        std::fs::write(&dir, vec![b'a'; 1024]).unwrap();
        let read = read_bounded("--tls-ca", &dir, 1024, "1 KiB");
        std::fs::remove_file(&dir).ok();
        assert_eq!(read.unwrap().len(), 1024);
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
