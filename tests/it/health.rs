//! `tenure health`, the gRPC health Check the container image uses as its
//! HEALTHCHECK: exit 0 and `SERVING` while the server serves, 1 and
//! `NOT_SERVING` once it has lost NATS, 1 for a service it does not know,
//! 69 when nothing answers; it finds the server through `--server` or
//! `TENURE_SERVER` like every client subcommand.

use crate::common::*;
use tonic_health::pb::health_check_response::ServingStatus;

/// `tenure health` against `t` with `args`.
async fn health(t: &Tenure, args: &[&str]) -> Out {
    let addr = t.running.as_ref().unwrap().addr();
    run_to_end(
        tenure_cli(&format!("http://{addr}"))
            .arg("health")
            .args(args),
    )
    .await
}

/// A serving server: exit 0 and SERVING, for the whole server and for each
/// of its services; JSON on request; a service it does not know is exit 1.
#[tokio::test]
async fn serving_exits_zero() {
    let t = Tenure::start().await;
    let out = health(&t, &[]).await;
    assert_eq!((out.code, out.stdout.as_str()), (0, "SERVING\n"), "{out:?}");
    for service in ["tenure.v1.LeaseService", "tenure.v1.ElectionService"] {
        let out = health(&t, &["--service", service]).await;
        assert_eq!(out.code, 0, "{service}: {out:?}");
    }
    let out = health(&t, &["--output", "json"]).await;
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(
        v,
        serde_json::json!({"service": "", "status": "SERVING"}),
        "{out:?}"
    );

    let out = health(&t, &["--service", "no.such.Service"]).await;
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.starts_with("tenure: NOT_FOUND: "), "{out:?}");
}

/// After NATS is gone the server answers NOT_SERVING: exit 1, the status
/// on stdout and one line saying why on stderr.
#[tokio::test]
async fn not_serving_exits_one() {
    let mut t = Tenure::start().await;
    let mut statuses = HealthStatuses::watch(&t).await;
    assert_eq!(statuses.next().await, ServingStatus::Serving as i32);
    t.nats.kill().await;
    assert_eq!(statuses.next().await, ServingStatus::NotServing as i32);

    let out = health(&t, &[]).await;
    assert_eq!(
        (out.code, out.stdout.as_str()),
        (1, "NOT_SERVING\n"),
        "{out:?}"
    );
    assert!(
        out.stderr.starts_with("tenure: NOT_SERVING: ") && out.stderr.contains("NATS"),
        "{out:?}"
    );
}

/// Nothing listening: exit 69 with the server named; the address comes
/// from TENURE_SERVER when no --server is given (as in the image).
#[tokio::test]
async fn unreachable_exits_69() {
    let port = free_port();
    let server = format!("http://127.0.0.1:{port}");
    let out = run_to_end(tenure_cli(&server).args(["health", "--timeout", "2s"])).await;
    assert_eq!(out.code, 69, "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(
        out.stderr.starts_with("tenure: UNAVAILABLE: ") && out.stderr.contains(&server),
        "{out:?}"
    );
}
