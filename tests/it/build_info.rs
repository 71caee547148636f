//! Which build runs, and what the binary needs outside a checkout:
//! `tenure --version` prints the version, the commit and the build date;
//! `tenure serve` logs them in its start line and exports them as
//! `tenure_build_info`; `tenure man` writes the manual pages and stays out
//! of the help; and a copy of the binary outside this checkout says what is
//! missing when it finds no nats-server, without naming any path of the
//! machine it was built on.

use std::process::{Command, Stdio};

use crate::common::*;

/// `tenure ARGS` to completion, with nothing of the environment but PATH.
fn tenure(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(args)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .output()
        .expect("run tenure")
}

/// The version line's parts: version, commit, date.
fn version_parts() -> (String, String, String) {
    let out = tenure(&["--version"]);
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    let line = line.strip_suffix('\n').expect("one line");
    let rest = line
        .strip_prefix("tenure ")
        .unwrap_or_else(|| panic!("{line}"));
    let (version, rest) = rest
        .split_once(" (commit ")
        .unwrap_or_else(|| panic!("{line}"));
    let (commit, rest) = rest
        .split_once(", built ")
        .unwrap_or_else(|| panic!("{line}"));
    let date = rest.strip_suffix(')').unwrap_or_else(|| panic!("{line}"));
    (version.into(), commit.into(), date.into())
}

/// `tenure 0.1.0 (commit abc1234[-dirty], built 2026-12-02)`: the crate's
/// version, this checkout's HEAD when git can tell, a UTC date; `-V` says
/// the same.
#[test]
fn version_names_commit_and_date() {
    let (version, commit, date) = version_parts();
    assert_eq!(version, env!("CARGO_PKG_VERSION"));
    let hash = commit.strip_suffix("-dirty").unwrap_or(&commit);
    assert!(
        hash == "unknown" || (hash.len() == 7 && hash.bytes().all(|b| b.is_ascii_hexdigit())),
        "{commit}"
    );
    let head = Command::new("git")
        .args(["rev-parse", "--short=7", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    if let Some(head) = head.ok().filter(|h| h.status.success()) {
        assert_eq!(hash, String::from_utf8_lossy(&head.stdout).trim());
    }
    let d: Vec<u32> = date.split('-').map(|p| p.parse().unwrap()).collect();
    assert!(
        date.len() == 10 && d.len() == 3 && d[0] >= 2024 && (1..=12).contains(&d[1]),
        "{date}"
    );
    let short = tenure(&["-V"]);
    assert_eq!(
        String::from_utf8_lossy(&short.stdout),
        format!("tenure {version} (commit {commit}, built {date})\n")
    );
}

/// The start line carries version, commit and build date, and `/metrics`
/// has `tenure_build_info{version,commit,build_date} 1` with the same.
#[tokio::test]
async fn serve_logs_and_exports_the_build() {
    let (version, commit, date) = version_parts();
    let nats = Nats::start().await;
    let log = tempfile::NamedTempFile::new().unwrap();
    let stderr = Stdio::from(log.reopen().unwrap());
    let t = Serve::start_adjusted(&nats, &["--log-format", "json"], |cmd| {
        cmd.env("RUST_LOG", "info").stderr(stderr);
    })
    .await;
    let (_, body) = http_get(t.metrics, "/metrics").await;
    // The listener accepts connections just before the line is written.
    let start_line = |text: &str| {
        text.lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|v| {
                v["fields"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("serving tenure.v1.LeaseService"))
            })
    };
    let start = within("the start line", async {
        loop {
            let text = std::fs::read_to_string(log.path()).unwrap();
            if let Some(line) = start_line(&text) {
                break line;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    t.stop().await;
    let fields = &start["fields"];
    assert_eq!(
        (&fields["version"], &fields["commit"], &fields["built"]),
        (
            &serde_json::json!(version),
            &serde_json::json!(commit),
            &serde_json::json!(date)
        ),
        "{start}"
    );

    let series = format!(
        "tenure_build_info{{build_date=\"{date}\",commit=\"{commit}\",version=\"{version}\"}} 1"
    );
    assert!(body.lines().any(|l| l == series), "no {series} in:\n{body}");
}

/// `tenure man` writes tenure(1) to stdout, `--dir` a page per visible
/// subcommand; `man` itself is in neither the help nor the pages.
#[test]
fn man_pages_from_the_command_line() {
    let out = tenure(&["man"]);
    assert!(out.status.success());
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.contains(".TH tenure 1 "), "{page}");
    assert!(page.contains("tenure\\-health(1)"), "{page}");
    assert!(!page.contains("tenure\\-man"), "{page}");

    let dir = tempfile::tempdir().unwrap();
    let out = tenure(&["man", "--dir", dir.path().to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    let mut pages: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    pages.sort();
    for want in [
        "tenure.1",
        "tenure-serve.1",
        "tenure-health.1",
        "tenure-lock.1",
        "tenure-completions.1",
    ] {
        assert!(pages.iter().any(|p| p == want), "{want} not in {pages:?}");
    }
    assert!(!pages.iter().any(|p| p == "tenure-man.1"), "{pages:?}");
    let health = std::fs::read_to_string(dir.path().join("tenure-health.1")).unwrap();
    assert!(health.contains("\\-\\-server"), "{health}");

    let help = String::from_utf8(tenure(&["--help"]).stdout).unwrap();
    assert!(help.contains("health") && !help.contains(" man "), "{help}");
}

/// A copy of the binary in an empty folder, with no nats-server on the
/// PATH: `tenure serve` fails with one line saying what is missing and
/// how to get it, naming no path of this checkout; with `--nats-server`
/// pointing at nothing, it names that path.
#[test]
fn copied_binary_says_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("tenure");
    // A hard link opens no file for writing; a copy does, and a child that
    // another test thread forks while the copy is open keeps the write end
    // until it execs, so running the copy can fail with ETXTBSY ("text file
    // busy", seen once in CI): then it is run again once that child execs.
    if std::fs::hard_link(env!("CARGO_BIN_EXE_tenure"), &copy).is_err() {
        std::fs::copy(env!("CARGO_BIN_EXE_tenure"), &copy).unwrap();
    }
    let run = |extra: &[&str]| {
        let mut busy = 0;
        let out = loop {
            match Command::new(&copy)
                .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
                .arg(dir.path().join("data"))
                .args(extra)
                .current_dir(dir.path())
                .env_clear()
                .env("PATH", "/usr/bin:/bin")
                .output()
            {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && busy < 100 => {
                    busy += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                other => break other.unwrap(),
            }
        };
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let checkout = env!("CARGO_MANIFEST_DIR");

    let err = run(&[]);
    let line = err
        .lines()
        .find(|l| l.starts_with("tenure:"))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(
        line.contains("nats-server not found")
            && line.contains("PATH")
            && line.contains("--nats-server")
            && line.contains("--nats-url"),
        "{line}"
    );
    assert!(!err.contains(checkout), "names the build checkout: {err}");

    let err = run(&["--nats-server", "/nonexistent/nats-server"]);
    assert!(
        err.contains("nats-server not found at /nonexistent/nats-server"),
        "{err}"
    );
}
