//! The TOML configuration file and how it combines with flags and the
//! environment, plus `tenure check-config`.
//!
//! Precedence, highest first: a command-line flag, its `TENURE_*`
//! variable, the `--config` file, the built-in default. The file's
//! top-level keys are the flag names (`max_ttl = "1h"` or `max-ttl = "1h"`);
//! its `[[grant]]` tables are the authorization grants, which only the file
//! can give. An unknown key is an error that names it, so a typo never
//! silently leaves a default in force.
//!
//! Resolution lets clap do all parsing and validation: the command line is
//! parsed once to learn where each setting came from, then every file
//! setting that is still at its default is appended as a flag and the line
//! is parsed again. So a file value goes through the same parser (and the
//! same error messages) as the flag would.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::Path;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};

use crate::auth::Grant;
use crate::config::{Cli, Command, Config};

/// Settings that are secrets: never printed by `check-config`.
const SECRETS: &[&str] = &["nats_password", "nats_token"];

/// What the command line asks for, with the config file applied.
#[derive(Debug)]
pub enum Resolved {
    /// `tenure serve`, fully resolved.
    Serve(Box<Config>),
    /// `tenure check-config FILE`, resolved as `serve --config FILE` would
    /// be, and the report to print.
    CheckConfig(Box<Config>, String),
    /// A client subcommand, for `crate::cli::run`.
    Client(Box<crate::cli::ClientCommand>),
}

/// Parses `args` (the whole command line, program name first), applies the
/// config file if one is named, and loads its grants. Errors are clap's own
/// (help, version and usage errors included) or a message about the file.
pub fn resolve(args: Vec<OsString>) -> Result<Resolved, ResolveError> {
    let cli = Cli::try_parse_from_args(&args)?;
    match cli {
        Command::Serve(_) => {
            let (config, _) = resolve_serve(args)?;
            Ok(Resolved::Serve(Box::new(config)))
        }
        Command::CheckConfig { file } => {
            let program = args.first().cloned().unwrap_or_else(|| "tenure".into());
            let serve = vec![
                program,
                "serve".into(),
                "--config".into(),
                file.into_os_string(),
            ];
            let (config, report) = resolve_serve(serve)?;
            Ok(Resolved::CheckConfig(Box::new(config), report))
        }
        Command::Client(cmd) => Ok(Resolved::Client(Box::new(cmd))),
    }
}

/// Why the command line could not be resolved.
#[derive(Debug)]
pub enum ResolveError {
    /// A clap error (including `--help` and `--version`): print it with
    /// `exit()`.
    Clap(clap::Error),
    /// A config file problem, one line.
    File(String),
}

impl From<clap::Error> for ResolveError {
    fn from(e: clap::Error) -> Self {
        ResolveError::Clap(e)
    }
}

impl std::fmt::Display for ResolveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ResolveError::Clap(e) => write!(f, "{e}"),
            ResolveError::File(e) => f.write_str(e),
        }
    }
}

impl Cli {
    /// Parses a command line without exiting.
    fn try_parse_from_args(args: &[OsString]) -> Result<Command, clap::Error> {
        let matches = Cli::command().try_get_matches_from(args)?;
        Ok(Cli::from_arg_matches(&matches)?.command)
    }
}

/// Resolves a `serve` command line: returns the config and a report of
/// every setting with where it came from.
fn resolve_serve(mut args: Vec<OsString>) -> Result<(Config, String), ResolveError> {
    let command = Cli::command();
    let matches = command.clone().try_get_matches_from(&args)?;
    let Some(("serve", serve)) = matches.subcommand() else {
        return Err(ResolveError::File("expected `tenure serve`".into()));
    };
    let mut from_file = BTreeSet::new();
    let mut grants = Vec::new();
    if let Some(path) = serve.get_one::<std::path::PathBuf>("config").cloned() {
        let serve_cmd = command
            .find_subcommand("serve")
            .expect("serve subcommand exists");
        let table = read_file(&path)?;
        for (key, value) in table {
            if key == "grant" {
                grants = parse_grants(&path, value)?;
                continue;
            }
            let id = key.replace('-', "_");
            let Some(arg) = serve_cmd
                .get_arguments()
                .find(|a| a.get_id().as_str() == id && a.get_long().is_some())
            else {
                return Err(ResolveError::File(format!(
                    "{}: unknown setting {key:?}; settings are named like the `tenure serve` flags (see --help), grants go in [[grant]] tables",
                    path.display()
                )));
            };
            if id == "config" {
                return Err(ResolveError::File(format!(
                    "{}: a config file cannot name another config file",
                    path.display()
                )));
            }
            let long = arg.get_long().expect("checked above");
            // Only settings still at their default take the file's value.
            if !matches!(
                serve.value_source(&id),
                None | Some(ValueSource::DefaultValue)
            ) {
                continue;
            }
            let is_flag = matches!(arg.get_action(), clap::ArgAction::SetTrue);
            match (is_flag, &value) {
                (true, toml::Value::Boolean(true)) => args.push(format!("--{long}").into()),
                (true, toml::Value::Boolean(false)) => {}
                (true, _) => {
                    return Err(ResolveError::File(format!(
                        "{}: {key} must be true or false",
                        path.display()
                    )))
                }
                (false, v) => {
                    let text = match v {
                        toml::Value::String(s) => s.clone(),
                        toml::Value::Integer(i) => i.to_string(),
                        toml::Value::Float(f) => f.to_string(),
                        toml::Value::Boolean(b) => b.to_string(),
                        _ => {
                            return Err(ResolveError::File(format!(
                                "{}: {key} must be a string or a number",
                                path.display()
                            )))
                        }
                    };
                    args.push(format!("--{long}={text}").into());
                }
            }
            from_file.insert(id);
        }
    }
    let matches = command.try_get_matches_from(&args).map_err(|e| {
        // A file value clap refused: say which file it came from.
        if from_file.is_empty() {
            ResolveError::Clap(e)
        } else {
            ResolveError::File(format!(
                "{} (a setting may come from the config file): {}",
                e.kind(),
                e.render().to_string().lines().next().unwrap_or_default()
            ))
        }
    })?;
    let Some(("serve", serve)) = matches.subcommand() else {
        return Err(ResolveError::File("expected `tenure serve`".into()));
    };
    let mut config = Config::from_arg_matches(serve)?;
    config.grants = grants;
    let report = report(serve, &from_file, &config);
    Ok((config, report))
}

/// Reads and parses the file; errors name it.
fn read_file(path: &Path) -> Result<toml::Table, ResolveError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ResolveError::File(format!("cannot read config file {}: {e}", path.display()))
    })?;
    text.parse::<toml::Table>()
        .map_err(|e| ResolveError::File(format!("{}: {e}", path.display())))
}

/// Parses the `[[grant]]` array.
fn parse_grants(path: &Path, value: toml::Value) -> Result<Vec<Grant>, ResolveError> {
    value.try_into().map_err(|e: toml::de::Error| {
        ResolveError::File(format!(
            "{}: [[grant]] tables need identity = \"..\", prefixes = [..], actions = [..] (acquire, renew, release, watch, admin or \"*\"): {e}",
            path.display()
        ))
    })
}

/// One line per setting: `name = value  # source`, secrets hidden, then
/// the grants.
fn report(serve: &clap::ArgMatches, from_file: &BTreeSet<String>, config: &Config) -> String {
    let mut out = String::new();
    let command = Cli::command();
    let serve_cmd = command.find_subcommand("serve").expect("serve subcommand");
    for arg in serve_cmd.get_arguments() {
        let id = arg.get_id().as_str();
        if arg.get_long().is_none() || id == "help" {
            continue;
        }
        let source = if from_file.contains(id) {
            "file"
        } else {
            match serve.value_source(id) {
                Some(ValueSource::CommandLine) => "flag",
                Some(ValueSource::EnvVariable) => "env",
                Some(ValueSource::DefaultValue) => "default",
                _ => "unset",
            }
        };
        let value = match serve.get_raw(id) {
            Some(mut raw) if !SECRETS.contains(&id) => raw
                .next()
                .map(|v| v.to_string_lossy().into_owned())
                .unwrap_or_default(),
            Some(_) => "(hidden)".into(),
            None if matches!(arg.get_action(), clap::ArgAction::SetTrue) => "false".into(),
            None => continue,
        };
        out.push_str(&format!("{id} = {value:?}  # {source}\n"));
    }
    for g in &config.grants {
        let actions: Vec<&str> = g.actions.iter().map(|a| a.as_str()).collect();
        out.push_str(&format!(
            "grant identity={:?} prefixes={:?} actions={actions:?}\n",
            g.identity, g.prefixes
        ));
    }
    out
}

/// Everything `check-config` verifies beyond parsing: the settings agree,
/// the TLS files and token file load. Returns a summary line.
pub fn check(config: &Config) -> Result<String, String> {
    config.validate()?;
    let auth = crate::auth::Auth::load(config)?;
    let tls = crate::auth::server_tls(config)?;
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
    Ok(format!("ok: {mode}; {auth_line}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    fn serve(r: Resolved) -> Config {
        match r {
            Resolved::Serve(c) => *c,
            _ => panic!("expected serve"),
        }
    }

    /// A flag beats the file; the file beats the default; grants load.
    #[test]
    fn file_sits_between_flags_and_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tenure.toml");
        std::fs::write(
            &path,
            r#"
max-ttl = "2h"
bucket = "from-file"
replicas = 3
tls_client_cert_optional = false
[[grant]]
identity = "ops"
prefixes = [""]
actions = ["admin", "watch"]
"#,
        )
        .unwrap();
        let p = path.to_str().unwrap();
        let c = serve(
            resolve(args(&[
                "tenure",
                "serve",
                "--config",
                p,
                "--bucket",
                "from-flag",
            ]))
            .unwrap(),
        );
        assert_eq!(c.bucket, "from-flag");
        assert_eq!(c.max_ttl, std::time::Duration::from_secs(7200));
        assert_eq!(c.replicas, 3);
        assert_eq!(c.grants.len(), 1);
        assert_eq!(c.grants[0].identity, "ops");
    }

    /// Unknown keys and bad values are errors that name the file.
    #[test]
    fn bad_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        let p = path.to_str().unwrap().to_string();
        for (text, needle) in [
            ("max_tll = \"1h\"", "unknown setting"),
            ("max_ttl = \"soon\"", "config file"),
            (
                "[[grant]]\nidentity = \"x\"\nprefixes = [\"\"]\nactions = [\"fly\"]",
                "grant",
            ),
            ("listen = [1]", "string or a number"),
        ] {
            std::fs::write(&path, text).unwrap();
            let err = resolve(args(&["tenure", "serve", "--config", &p])).unwrap_err();
            assert!(err.to_string().contains(needle), "{text}: {err}");
        }
    }
}
