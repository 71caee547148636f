//! The `tenure` subcommands that need a real terminal, driven in tmux: tmux
//! runs the binary at a fixed size, the test types with `send-keys` and
//! reads the screen with `capture-pane`. `tenure top` must show a lease
//! acquired by another process, its TTL draining, the EXPIRED event, and
//! sort, filter and revoke on keys; `tenure lock` must give an interactive
//! command the terminal and take it back.
//!
//! Reading the screen is the only way to learn what it shows, so the test
//! polls `capture-pane` (every 100 ms, bounded) until the expected text is
//! there: that is waiting for an event, not sleeping for time.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::*;
use tenure::proto::GetLeaseRequest;

/// A tmux server of our own (its own socket), killed on drop.
struct Tmux {
    /// The `-L` socket name.
    socket: String,
}

impl Tmux {
    /// A tmux server of our own for this test.
    fn new(test: &str) -> Tmux {
        Tmux {
            socket: format!("tenure-{test}-{}", std::process::id()),
        }
    }

    /// Runs tmux with our socket.
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux")
    }

    /// The screen as text.
    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.cmd(&["capture-pane", "-p", "-t", "top"]).stdout).into()
    }

    /// Types keys.
    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "top"];
        args.extend_from_slice(keys);
        assert!(self.cmd(&args).status.success());
    }

    /// Polls the screen until `pred` holds (30 s at most); returns it.
    async fn until(&self, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.screen();
            if pred(&s) {
                return s;
            }
            assert!(Instant::now() < end, "{what} did not show within 30s:\n{s}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

/// Whether tmux runs here; installs it with apt-get when it is missing and
/// we are root (as in CI).
fn have_tmux() -> bool {
    let ok = || {
        Command::new("tmux")
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if ok() {
        return true;
    }
    // SAFETY: getuid cannot fail.
    if unsafe { libc::getuid() } == 0 {
        let _ = Command::new("apt-get")
            .args(["install", "-y", "-qq", "tmux"])
            .status();
        if !ok() {
            let _ = Command::new("apt-get").args(["update", "-qq"]).status();
            let _ = Command::new("apt-get")
                .args(["install", "-y", "-qq", "tmux"])
                .status();
        }
    }
    ok()
}

/// The TTL left shown on the table row of `name` (feed lines have no
/// `LEFT/TTL` cell): e.g. `3.9s/4s` → 3.9.
fn ttl_left(screen: &str, name: &str) -> Option<f64> {
    screen
        .lines()
        .filter(|l| l.split_whitespace().any(|w| w == name))
        .find_map(|row| {
            let cell = row.split_whitespace().find(|w| w.contains("s/"))?;
            let left = cell.split('/').next()?.trim_end_matches('s');
            match left.split_once('m') {
                Some((m, s)) => Some(m.parse::<f64>().ok()? * 60.0 + s.parse::<f64>().ok()?),
                None => left.parse().ok(),
            }
        })
}

/// The whole tour: a lease from another process appears with a draining
/// TTL and expires into the feed; `s` sorts, `/` filters, `r` + `y`
/// revokes. The screen with the lease is kept for docs/cli.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_shows_leases_draining_and_expiring() {
    if !have_tmux() {
        skip_or_fail("tmux is not installed and could not be installed with apt-get");
        return;
    }
    let t = Tenure::start().await;
    let server = format!("http://{}", t.running.as_ref().unwrap().addr());
    let bin = env!("CARGO_BIN_EXE_tenure");
    let tmux = Tmux::new("top");
    let started = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "120",
        "-y",
        "30",
        &format!("env TENURE_SERVER={server} TERM=xterm-256color {bin} top jobs"),
    ]);
    assert!(started.status.success(), "{started:?}");
    tmux.until("the live view", |s| s.contains("[live]")).await;

    // Another process takes a lease with a short TTL.
    let out = tokio::process::Command::new(bin)
        .args([
            "acquire",
            "jobs.demo",
            "--holder",
            "worker-1",
            "--ttl",
            "4s",
        ])
        .env("TENURE_SERVER", &server)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let first = tmux
        .until("the lease row", |s| ttl_left(s, "jobs.demo").is_some())
        .await;
    assert!(first.contains("worker-1"), "{first}");
    assert!(first.contains("ACQUIRED"), "{first}");
    let left = ttl_left(&first, "jobs.demo").unwrap();
    let draining = tmux
        .until("the TTL draining", |s| {
            ttl_left(s, "jobs.demo").is_some_and(|l| l < left)
        })
        .await;
    if let Ok(dir) = std::env::var("TENURE_TOP_SCREEN") {
        std::fs::write(dir, &draining).unwrap();
    }
    let expired = tmux
        .until("the EXPIRED event", |s| {
            s.lines()
                .any(|l| l.contains("EXPIRED") && l.contains("jobs.demo"))
        })
        .await;
    assert!(
        ttl_left(&expired, "jobs.demo").is_none(),
        "an expired lease leaves the table:\n{expired}"
    );

    // Sort and filter.
    let mut c = t.client().await;
    acquire(&mut c, acquire_req("jobs.alpha", "worker-a", 60)).await;
    acquire(&mut c, acquire_req("jobs.beta", "worker-b", 20)).await;
    tmux.until("two rows", |s| s.contains("2 leases")).await;
    tmux.keys(&["s"]);
    let sorted = tmux
        .until("sort by TTL", |s| s.contains("sort: ttl left"))
        .await;
    let pos = |s: &str, n: &str| s.find(n).unwrap();
    assert!(
        pos(&sorted, "jobs.beta") < pos(&sorted, "jobs.alpha"),
        "{sorted}"
    );
    tmux.keys(&["/", "alpha", "Enter"]);
    let filtered = tmux
        .until("the filter", |s| s.contains("filter: alpha"))
        .await;
    assert!(ttl_left(&filtered, "jobs.beta").is_none(), "{filtered}");
    assert!(ttl_left(&filtered, "jobs.alpha").is_some(), "{filtered}");

    // Revoke the selected lease, after confirming.
    tmux.keys(&["Down", "r"]);
    tmux.until("the confirmation", |s| {
        s.contains("Revoke jobs.alpha held by worker-a")
    })
    .await;
    tmux.keys(&["y"]);
    tmux.until("the REVOKED event", |s| {
        s.lines()
            .any(|l| l.contains("REVOKED") && l.contains("jobs.alpha"))
    })
    .await;
    let err = c
        .get_lease(GetLeaseRequest {
            name: "jobs.alpha".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_FOUND");

    tmux.keys(&["q"]);
    tmux.until("top to exit", |s| !s.contains("tenure top"))
        .await;
}

/// `tenure lock` in a terminal: the command can read from it (it is in
/// the foreground, not stopped by SIGTTIN), Ctrl-C reaches it, and the
/// shell gets the terminal back afterwards (its `read` works).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_gives_an_interactive_command_the_terminal() {
    if !have_tmux() {
        skip_or_fail("tmux is not installed and could not be installed with apt-get");
        return;
    }
    let t = Tenure::start().await;
    let server = format!("http://{}", t.running.as_ref().unwrap().addr());
    let bin = env!("CARGO_BIN_EXE_tenure");
    let tmux = Tmux::new("lock-tty");
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("session.sh");
    std::fs::write(
        &script,
        format!(
            r#"export TENURE_SERVER={server}
{bin} lock jobs.tty -- bash -c 'read -r n; echo "hello $n"; sleep 60'
echo "exit $?"
read -r x
echo "shell read $x"
sleep 60
"#
        ),
    )
    .unwrap();
    let started = tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "100",
        "-y",
        "20",
        &format!("sh {}", script.display()),
    ]);
    assert!(started.status.success(), "{started:?}");
    tmux.until("the lease", |s| s.contains("acquired jobs.tty"))
        .await;
    tmux.keys(&["bob", "Enter"]);
    tmux.until("the command reading the terminal", |s| {
        s.contains("hello bob")
    })
    .await;
    tmux.keys(&["C-c"]);
    let s = tmux
        .until("tenure lock to exit", |s| s.contains("exit "))
        .await;
    assert!(
        s.contains("exit 130"),
        "Ctrl-C ends the command, 128+SIGINT:\n{s}"
    );
    assert!(s.contains("released jobs.tty"), "{s}");
    tmux.keys(&["ok", "Enter"]);
    tmux.until("the shell reading the terminal again", |s| {
        s.contains("shell read ok")
    })
    .await;
}

/// Without a terminal, `top` says to use `watch` instead of drawing junk.
#[tokio::test]
async fn top_needs_a_terminal() {
    let out = Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["top", "--server", "http://127.0.0.1:1"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tenure watch"), "{err}");
}
