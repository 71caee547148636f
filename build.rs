//! The build script, two jobs:
//!
//! - compiles `proto/` with protox (pure Rust), so a fresh machine needs no
//!   system `protoc`, and writes the descriptor set that gRPC reflection
//!   serves;
//! - embeds what build this is, for `tenure --version`, the start log line
//!   and the `tenure_build_info` metric (`src/observe/version.rs`):
//!   `TENURE_BUILD_COMMIT`, the short commit hash with `-dirty` when tracked
//!   files differ from it, or `unknown` outside a git checkout of this
//!   repository (a source tarball); and `TENURE_BUILD_DATE`, the UTC date
//!   of `SOURCE_DATE_EPOCH` when it is set (reproducible builds; see
//!   `scripts/release.sh`), else of now.
//!   Setting `TENURE_BUILD_COMMIT` in the environment overrides the commit
//!   (a packager building from a tarball knows it).
//!
//! It runs again when `proto/`, the sources (`src/`, `build.rs`, the
//! manifest and lock file) or the git HEAD or branch change, so the commit
//! and `-dirty` stay true for what the binary is built from. Not when the
//! git index changes: any `git status` may rewrite it, and each rerun
//! recompiles the crate. (An edit only outside those sources, to the docs
//! say, shows as `-dirty` from the next rerun on.)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    compile_protos()?;
    build_info();
    Ok(())
}

/// The generated gRPC code and the descriptor set.
fn compile_protos() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "proto/tenure/v1/lease.proto",
        "proto/tenure/v1/error_reason.proto",
        "proto/tenure/v1/election.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(protos, ["proto"])?;
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("tenure_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    Ok(())
}

/// `TENURE_BUILD_COMMIT` and `TENURE_BUILD_DATE` for `env!`.
fn build_info() {
    let root = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default());
    for input in ["src", "build.rs", "Cargo.toml", "Cargo.lock"] {
        if root.join(input).exists() {
            println!("cargo:rerun-if-changed={input}");
        }
    }
    println!("cargo:rerun-if-env-changed=TENURE_BUILD_COMMIT");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");

    let commit = match std::env::var("TENURE_BUILD_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => git_commit(&root).unwrap_or_else(|| "unknown".to_string()),
    };
    println!("cargo:rustc-env=TENURE_BUILD_COMMIT={commit}");

    let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) => s
            .trim()
            .parse::<i64>()
            .unwrap_or_else(|_| panic!("SOURCE_DATE_EPOCH={s:?} is not a number of seconds")),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64),
    };
    println!("cargo:rustc-env=TENURE_BUILD_DATE={}", utc_date(epoch));
}

/// Runs git in `root`; its trimmed stdout when it succeeds.
fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        // Never write the index: a read-only look at the checkout.
        .arg("--no-optional-locks")
        .args(args)
        .current_dir(root)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The short hash of HEAD, `-dirty` when tracked files differ from it; None
/// when `root` is not the top of a git checkout (e.g. an unpacked tarball
/// that happens to sit inside some other repository).
fn git_commit(root: &Path) -> Option<String> {
    let top = PathBuf::from(git(root, &["rev-parse", "--show-toplevel"])?);
    if top.canonicalize().ok()? != root.canonicalize().ok()? {
        return None;
    }
    // Follow HEAD, the branch it names and the packed refs.
    let mut watched = vec!["HEAD".to_string(), "packed-refs".into()];
    watched.extend(git(root, &["symbolic-ref", "-q", "HEAD"]));
    for name in watched {
        if let Some(path) = git(root, &["rev-parse", "--git-path", &name]) {
            let path = root.join(path);
            if path.exists() {
                println!("cargo:rerun-if-changed={}", path.display());
            }
        }
    }
    let hash = git(root, &["rev-parse", "--short=7", "HEAD"])?;
    let dirty = !git(root, &["status", "--porcelain", "--untracked-files=no"])?.is_empty();
    Some(if dirty { format!("{hash}-dirty") } else { hash })
}

/// `YYYY-MM-DD` of a Unix time, in UTC (the civil-from-days algorithm of
/// Howard Hinnant's date library).
fn utc_date(epoch: i64) -> String {
    let z = epoch.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
