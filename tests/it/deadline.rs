//! gRPC deadlines reach the NATS calls: with NATS frozen (SIGSTOP: the
//! connection stays up but nothing answers), a call with a short deadline
//! is dropped at its deadline, NATS call included, and recorded as
//! CANCELLED, instead of running on until the NATS client's own request
//! timeout would fail it as NATS_UNAVAILABLE.

use std::time::Duration;

use crate::common::*;
use tenure::proto::GetLeaseRequest;

#[tokio::test]
async fn deadline_cancels_the_nats_call() {
    let t = Tenure::start_with(|c| c.metrics_listen = Some("127.0.0.1:0".parse().unwrap())).await;
    let addr = t.running.as_ref().unwrap().metrics_addr().unwrap();
    let mut c = t.client().await;
    acquire(&mut c, acquire_req("dl.a", "w", 60)).await;
    let pid = t.nats.process.as_ref().unwrap().pid().unwrap();
    freeze(pid).await;

    let mut req = tonic::Request::new(GetLeaseRequest {
        name: "dl.a".into(),
    });
    req.set_timeout(Duration::from_millis(300));
    let err = c.get_lease(req).await.unwrap_err();
    // The client's own timer says DEADLINE_EXCEEDED; tonic's server, when
    // its timer fires first, answers CANCELLED.
    assert!(
        matches!(
            err.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        ),
        "{err:?}"
    );

    // The server's side of the call ends one way or the other: CANCELLED
    // when the deadline dropped it, UNAVAILABLE had it waited for NATS.
    let cancelled = r#"tenure_rpc_requests_total{code="CANCELLED",method="GetLease"} 1"#;
    let unavailable = r#"tenure_rpc_requests_total{code="UNAVAILABLE",method="GetLease"}"#;
    let text = within("the call to be recorded", async {
        loop {
            let text = http_get(addr, "/metrics").await.1;
            if text.contains(cancelled) || text.contains(unavailable) {
                return text;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    thaw(pid);
    assert!(text.contains(cancelled), "{text}");
    assert!(!text.contains(unavailable), "{text}");
}
