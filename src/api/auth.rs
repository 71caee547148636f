//! Who is calling, and what they may do.
//!
//! A caller's identity comes from a bearer token (`authorization: Bearer
//! <token>`, looked up in the static `--auth-tokens` file) or, failing
//! that, from the client certificate of an mTLS connection (its subject CN
//! and its DNS/URI SANs, each of which counts as a name of the caller).
//! Authorization is a list of grants from the `[[grant]]` tables of the
//! config file: per identity, the lease-name prefixes it may touch and the
//! actions it may take there. Anything not granted is PERMISSION_DENIED.
//!
//! With neither tokens nor client certificates configured there is no
//! identity to authorize, so every call is allowed (and the server warns
//! loudly at start). Tokens are kept only as SHA-256 digests and never
//! logged; lease keys never pass through here at all.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tonic::metadata::MetadataMap;
use tonic::transport::server::TlsConnectInfo;

use super::listener::ConnInfo;
use crate::config::{Action, Config, Grant};
use crate::error::{Error, Reason, Result};

/// The authenticated caller of one request, put in the request's
/// extensions for the handlers (e.g. to record who revoked a lease).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The main name: the token identity, or the certificate's CN (else its
    /// first SAN); `anonymous` without auth.
    pub identity: String,
    /// Every name the caller may be granted under (CN and SANs).
    pub names: Vec<String>,
}

impl Caller {
    /// The caller when no authentication is configured.
    pub fn anonymous() -> Caller {
        Caller {
            identity: "anonymous".into(),
            names: Vec::new(),
        }
    }
}

/// What a call touches: one name, a subtree (watch `jobs.>` is `jobs.`, and
/// `>` is `""`), or a listing prefix.
#[derive(Debug, Clone, Copy)]
pub enum Target<'a> {
    /// One lease name.
    Name(&'a str),
    /// Every name starting with this.
    Prefix(&'a str),
    /// The lease name of a KeepAlive entry: a refusal does not quote it
    /// (the entry's id says which it is), so that many entries refused
    /// alike answer alike and compactly.
    Entry(&'a str),
    /// No name: allowed to an identity with a grant of the action on any
    /// prefix (GetFenceKeys).
    Any,
}

/// Authentication and authorization settings, loaded once at start.
#[derive(Debug, Default)]
pub struct Auth {
    /// SHA-256 of each token → its identity.
    tokens: HashMap<[u8; 32], String>,
    /// Whether client certificates identify callers (mTLS configured).
    certs: bool,
    /// The grants.
    grants: Vec<Grant>,
}

impl Auth {
    /// Loads the token file and checks the grants. Errors name the file
    /// and line to fix.
    pub fn load(config: &Config) -> std::result::Result<Auth, String> {
        let tokens = match &config.auth_tokens {
            Some(path) => load_tokens(path)?,
            None => HashMap::new(),
        };
        for (i, g) in config.grants.iter().enumerate() {
            if g.identity.is_empty() {
                return Err(format!("[[grant]] #{}: identity is empty", i + 1));
            }
            if g.actions.is_empty() || g.prefixes.is_empty() {
                return Err(format!(
                    "[[grant]] #{} ({}): give at least one prefix and one action",
                    i + 1,
                    g.identity
                ));
            }
        }
        Ok(Auth {
            tokens,
            certs: config.tls_client_ca.is_some(),
            grants: config.grants.clone(),
        })
    }

    /// Whether any authentication is configured.
    pub fn enabled(&self) -> bool {
        self.certs || !self.tokens.is_empty()
    }

    /// How many tokens were loaded.
    pub fn token_count(&self) -> usize {
        self.tokens.len()
    }

    /// Identifies the caller of a request from its bearer token or client
    /// certificate; UNAUTHENTICATED when auth is on and neither identifies it.
    pub fn authenticate<T>(&self, request: &tonic::Request<T>) -> Result<Caller> {
        if !self.enabled() {
            return Ok(Caller::anonymous());
        }
        if let Some(token) = bearer(request.metadata())? {
            let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            return match self.tokens.get(&digest) {
                Some(identity) => Ok(Caller {
                    identity: identity.clone(),
                    names: vec![identity.clone()],
                }),
                None => Err(Error::new(
                    Reason::Unauthenticated,
                    "the bearer token is not known to this server; send a token from its --auth-tokens file",
                )),
            };
        }
        if self.certs {
            if let Some(caller) = cert_caller(request)? {
                return Ok(caller);
            }
        }
        Err(Error::new(
            Reason::Unauthenticated,
            "no credentials: send `authorization: Bearer <token>` metadata or connect with a client certificate",
        ))
    }

    /// Whether `caller` may take `action` on some name: a caller that may
    /// not is refused before it is given anything to hold.
    pub fn may_ever(&self, caller: &Caller, action: Action) -> bool {
        !self.enabled()
            || self.grants.iter().any(|g| {
                (g.identity == "*" || caller.names.contains(&g.identity))
                    && g.actions.iter().any(|a| *a == action || *a == Action::All)
                    && !g.prefixes.is_empty()
            })
    }

    /// Checks that `caller` may take `action` on `target`.
    pub fn authorize(&self, caller: &Caller, action: Action, target: Target<'_>) -> Result<()> {
        if !self.enabled() {
            return Ok(());
        }
        let path = match target {
            Target::Name(n) | Target::Entry(n) => n,
            Target::Prefix(p) => p,
            Target::Any if self.may_ever(caller, action) => return Ok(()),
            Target::Any => "",
        };
        let allowed = self.grants.iter().any(|g| {
            (g.identity == "*" || caller.names.contains(&g.identity))
                && g.actions.iter().any(|a| *a == action || *a == Action::All)
                && g.prefixes.iter().any(|p| path.starts_with(p.as_str()))
        });
        if allowed {
            return Ok(());
        }
        let what = match target {
            Target::Name(n) => format!("lease {:?}", clip(n)),
            Target::Prefix(p) => format!("prefix {:?}", clip(p)),
            Target::Entry(_) => "this entry's lease".to_string(),
            Target::Any => "any lease".to_string(),
        };
        Err(Error::new(
            Reason::PermissionDenied,
            format!(
                "identity {:?} may not {} {what}; add a [[grant]] for it to the server's config",
                clip(&caller.identity),
                action.as_str(),
            ),
        )
        .with("identity", clip(&caller.identity))
        .with("action", action.as_str()))
    }
}

/// Longest piece of caller input quoted in messages, spans and logs.
pub const QUOTE_MAX: usize = 64;

/// The first [`QUOTE_MAX`] bytes of `s` (at a character boundary): what
/// errors, spans and logs quote of caller input.
pub fn clip(s: &str) -> &str {
    if s.len() <= QUOTE_MAX {
        return s;
    }
    let mut end = QUOTE_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Reads `IDENTITY TOKEN` lines (blank lines and `#` comments allowed).
fn load_tokens(path: &Path) -> std::result::Result<HashMap<[u8; 32], String>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read --auth-tokens {}: {e}", path.display()))?;
    let mut tokens = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut parts = line.split_whitespace();
        let (Some(identity), Some(token), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!(
                "{} line {}: expected `IDENTITY TOKEN`",
                path.display(),
                i + 1
            ));
        };
        if token.len() < 16 {
            return Err(format!(
                "{} line {}: the token of {identity:?} is shorter than 16 characters",
                path.display(),
                i + 1
            ));
        }
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        if tokens.insert(digest, identity.to_string()).is_some() {
            return Err(format!(
                "{} line {}: this token is already given to another identity",
                path.display(),
                i + 1
            ));
        }
    }
    Ok(tokens)
}

/// The bearer token of a request, if it sent one.
fn bearer(metadata: &MetadataMap) -> Result<Option<&str>> {
    let Some(value) = metadata.get("authorization") else {
        return Ok(None);
    };
    let malformed = || {
        Error::new(
            Reason::Unauthenticated,
            "the authorization metadata must be `Bearer <token>`",
        )
    };
    let text = value.to_str().map_err(|_| malformed())?;
    match text.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() => {
            Ok(Some(token.trim()))
        }
        _ => Err(malformed()),
    }
}

/// The caller named by the client certificate of a TLS connection.
fn cert_caller<T>(request: &tonic::Request<T>) -> Result<Option<Caller>> {
    let certs: Option<Arc<Vec<_>>> = request
        .extensions()
        .get::<TlsConnectInfo<ConnInfo>>()
        .and_then(|info| info.peer_certs());
    let Some(leaf) = certs.as_ref().and_then(|c| c.first()) else {
        return Ok(None);
    };
    let names = cert_names(leaf.as_ref()).map_err(|e| {
        Error::new(
            Reason::Unauthenticated,
            format!("the client certificate cannot be read: {e}"),
        )
    })?;
    match names.first() {
        Some(first) => Ok(Some(Caller {
            identity: first.clone(),
            names,
        })),
        None => Err(Error::new(
            Reason::Unauthenticated,
            "the client certificate has neither a subject CN nor a DNS/URI SAN to identify it",
        )),
    }
}

/// The subject CN, then the DNS and URI SANs, of a DER certificate.
pub fn cert_names(der: &[u8]) -> std::result::Result<Vec<String>, String> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|cn| cn.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(n) | GeneralName::URI(n) => names.push(n.to_string()),
                _ => {}
            }
        }
    }
    Ok(names)
}

/// The gRPC server TLS settings from `--tls-*`, or `None` for plaintext.
pub fn server_tls(
    config: &Config,
) -> std::result::Result<Option<tonic::transport::ServerTlsConfig>, String> {
    let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) else {
        return Ok(None);
    };
    let read = |flag: &str, p: &Path| {
        std::fs::read(p).map_err(|e| format!("cannot read {flag} {}: {e}", p.display()))
    };
    let cert_pem = read("--tls-cert", cert)?;
    let key_pem = read("--tls-key", key)?;
    if !cert_pem
        .windows(b"BEGIN CERTIFICATE".len())
        .any(|w| w == b"BEGIN CERTIFICATE")
    {
        return Err(format!(
            "--tls-cert {} holds no PEM certificate",
            cert.display()
        ));
    }
    if !key_pem
        .windows(b"PRIVATE KEY".len())
        .any(|w| w == b"PRIVATE KEY")
    {
        return Err(format!(
            "--tls-key {} holds no PEM private key",
            key.display()
        ));
    }
    let mut tls = tonic::transport::ServerTlsConfig::new()
        .identity(tonic::transport::Identity::from_pem(cert_pem, key_pem))
        .timeout(config.handshake_timeout);
    if let Some(ca) = &config.tls_client_ca {
        let ca_pem = read("--tls-client-ca", ca)?;
        tls = tls
            .client_ca_root(tonic::transport::Certificate::from_pem(ca_pem))
            .client_auth_optional(config.tls_client_cert_optional);
    }
    Ok(Some(tls))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(grants: Vec<Grant>) -> Auth {
        Auth {
            tokens: HashMap::from([(Sha256::digest(b"x").into(), "t".to_string())]),
            certs: false,
            grants,
        }
    }

    fn caller(name: &str) -> Caller {
        Caller {
            identity: name.into(),
            names: vec![name.into()],
        }
    }

    /// A grant covers exactly its identity, actions and prefixes.
    #[test]
    fn grants_are_exact() {
        let a = auth(vec![
            Grant {
                identity: "billing".into(),
                prefixes: vec!["billing.".into()],
                actions: vec![Action::Acquire, Action::Watch],
            },
            Grant {
                identity: "*".into(),
                prefixes: vec!["public.".into()],
                actions: vec![Action::All],
            },
        ]);
        let b = caller("billing");
        assert!(a
            .authorize(&b, Action::Acquire, Target::Name("billing.x"))
            .is_ok());
        assert!(a
            .authorize(&b, Action::Renew, Target::Name("billing.x"))
            .is_err());
        assert!(a
            .authorize(&b, Action::Acquire, Target::Name("jobs.x"))
            .is_err());
        assert!(a
            .authorize(&b, Action::Watch, Target::Prefix("billing."))
            .is_ok());
        assert!(a.authorize(&b, Action::Watch, Target::Prefix("")).is_err());
        assert!(a
            .authorize(&caller("other"), Action::Admin, Target::Name("public.a"))
            .is_ok());
        let err = a
            .authorize(&b, Action::Admin, Target::Name("billing.x"))
            .unwrap_err();
        assert_eq!(err.reason, Reason::PermissionDenied);
    }

    /// Bearer metadata must use the Bearer scheme.
    #[test]
    fn bearer_parsing() {
        let mut m = MetadataMap::new();
        assert!(bearer(&m).unwrap().is_none());
        m.insert("authorization", "Bearer abc".parse().unwrap());
        assert_eq!(bearer(&m).unwrap(), Some("abc"));
        m.insert("authorization", "Basic abc".parse().unwrap());
        assert!(bearer(&m).is_err());
    }
}
