//! Start-up checks: Tenure refuses what would make leases unsafe, with a
//! message that says what to do.

use crate::common::*;
use async_nats::jetstream::kv;
use tenure::Config;

/// A bucket that exists without per-message TTL (as older servers or a
/// hand-made bucket leave it) is refused: leases in it would never expire.
#[tokio::test]
async fn refuses_bucket_without_per_message_ttl() {
    let nats = Nats::start().await;
    let js = nats.jetstream().await;
    js.create_key_value(kv::Config {
        bucket: "plain".into(),
        history: 1,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut config = Config::for_nats(&nats.url());
    config.bucket = "plain".into();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = tenure::start(&config, &nats.url(), listener)
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("per-message TTL"), "{}", err);
    assert!(err.to_string().contains("\"plain\""), "{}", err);
}

/// A bucket an older version wrote (a lease record at the lease's own
/// name) is refused with what to do; an empty bucket made elsewhere is
/// marked as this version's key layout and used.
#[tokio::test]
async fn refuses_a_bucket_in_the_old_key_layout() {
    let nats = Nats::start().await;
    let js = nats.jetstream().await;
    for bucket in ["old", "empty"] {
        let kv = js
            .create_key_value(kv::Config {
                bucket: bucket.into(),
                history: 1,
                limit_markers: Some(std::time::Duration::from_secs(60)),
                ..Default::default()
            })
            .await
            .unwrap();
        if bucket == "old" {
            kv.put("jobs.a", r#"{"holder":"old"}"#.into())
                .await
                .unwrap();
        }
    }
    let start = |bucket: &str| {
        let mut config = Config::for_nats(&nats.url());
        config.bucket = bucket.into();
        let url = nats.url();
        async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tenure::start(&config, &url, listener).await
        }
    };
    let err = start("old").await.err().expect("refused").to_string();
    for words in [
        "\"old\"",
        "older Tenure",
        "_tenure.q.<name>.lease.holder",
        "--bucket",
    ] {
        assert!(err.contains(words), "{words} in: {err}");
    }
    start("empty").await.expect("starts").shutdown().await;
    let info = js
        .get_stream("KV_empty")
        .await
        .unwrap()
        .cached_info()
        .clone();
    assert!(
        info.config
            .description
            .unwrap_or_default()
            .ends_with("; key layout 2"),
        "marked"
    );
    // Marked, it is this version's from now on, messages or not.
    start("empty").await.expect("starts again").shutdown().await;
}

/// A bucket Tenure created is accepted again on the next start.
#[tokio::test]
async fn reopens_its_own_bucket() {
    let nats = Nats::start().await;
    let config = Config::for_nats(&nats.url());
    for _ in 0..2 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let running = tenure::start(&config, &nats.url(), listener)
            .await
            .expect("starts");
        running.shutdown().await;
    }
}

/// With no NATS URL and no nats-server binary, `tenure serve` exits with one
/// line naming the command that installs it.
#[test]
fn missing_nats_server_names_the_install_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["serve", "--listen", "127.0.0.1:0", "--nats-server"])
        .arg(dir.path().join("missing/nats-server"))
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stderr
        .lines()
        .find(|l| l.starts_with("tenure:"))
        .expect("an error line");
    assert!(line.contains("scripts/tools.sh"), "{line}");
}

/// Settings that cannot work are refused before anything starts.
#[test]
fn bad_settings_exit_with_usage_error() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args(["serve", "--min-ttl", "500ms"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("whole seconds"));
}

/// `--nats-url` takes a comma-separated list of cluster URLs (as docs/operations.md
/// documents): Tenure connects through whichever answers.
#[tokio::test]
async fn connects_with_a_comma_separated_url_list() {
    let nats = Nats::start().await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let urls = format!("nats://127.0.0.1:{dead}, {}", nats.url());
    let config = Config::for_nats(&urls);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = tenure::start(&config, &urls, listener)
        .await
        .unwrap_or_else(|e| panic!("starts with {urls}: {}", e));
    running.shutdown().await;
}

/// A malformed URL in the list is refused with a message naming it.
#[tokio::test]
async fn refuses_a_malformed_url_in_the_list() {
    let urls = "nats://127.0.0.1:4222,nats://127.0.0.1:notaport";
    let config = Config::for_nats(urls);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let err = tenure::start(&config, urls, listener)
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("notaport"), "{}", err);
}
