//! `tenure check-config FILE`: prints every setting with where it came from
//! (flag, env, file, default), hides secrets, and refuses bad files with
//! exit code 2 and a message naming the problem.

use std::process::Command;

fn check(file: &std::path::Path, env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tenure"));
    cmd.arg("check-config").arg(file);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("TENURE_")) {
        cmd.env_remove(k);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run tenure");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// File values beat defaults, env beats the file, secrets stay hidden.
#[test]
fn resolves_and_reports_sources() {
    let dir = tempfile::tempdir().unwrap();
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "# identity token\nops ops-token-0123456789\n").unwrap();
    let file = dir.path().join("tenure.toml");
    std::fs::write(
        &file,
        format!(
            r#"
listen = "127.0.0.1:9000"
max_ttl = "2h"
nats_token = "s3cret-nats-token"
auth_tokens = "{}"
[[grant]]
identity = "ops"
prefixes = [""]
actions = ["*"]
"#,
            tokens.display()
        ),
    )
    .unwrap();
    let (code, out, err) = check(&file, &[("TENURE_MAX_TTL", "3h")]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("listen = \"127.0.0.1:9000\"  # file"), "{out}");
    assert!(out.contains("max_ttl = \"3h\"  # env"), "{out}");
    assert!(out.contains("bucket = \"tenure\"  # default"), "{out}");
    assert!(out.contains("nats_token = \"(hidden)\"  # file"), "{out}");
    assert!(!out.contains("s3cret"), "{out}");
    assert!(out.contains("grant identity=\"ops\""), "{out}");
    assert!(
        out.contains("ok: plaintext gRPC; auth on: 1 token(s)"),
        "{out}"
    );
}

/// Typos, bad values and settings that disagree are refused.
#[test]
fn refuses_bad_files() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    for (text, needle) in [
        ("max_tll = \"1h\"\n", "unknown setting \"max_tll\""),
        ("min_ttl = \"10s\"\nmax_ttl = \"5s\"\n", "--max-ttl"),
        (
            "tls_cert = \"/nonexistent.pem\"\ntls_key = \"/nonexistent.key\"\n",
            "cannot read --tls-cert",
        ),
        (
            "auth_tokens = \"/nonexistent-tokens\"\n",
            "cannot read --auth-tokens",
        ),
        (
            "[[grant]]\nidentity = \"x\"\nprefixes = []\nactions = [\"watch\"]\n",
            "at least one prefix",
        ),
    ] {
        std::fs::write(&file, text).unwrap();
        let (code, _, err) = check(&file, &[]);
        assert_eq!(code, 2, "{text}: {err}");
        assert!(err.contains(needle), "{text}: {err}");
    }
}

/// A reader that stops early (`tenure check-config FILE | head -1`) closes
/// the pipe: the report stops there, without a panic. The pipe's read end
/// is closed before the process starts, so every write fails.
#[test]
fn a_closed_stdout_is_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tenure.toml");
    std::fs::write(&file, "listen = \"127.0.0.1:9000\"\n").unwrap();
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .arg("check-config")
        .arg(&file)
        .stdout(writer)
        .output()
        .expect("run tenure");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_ne!(out.status.code(), Some(101), "{stderr}");
}
