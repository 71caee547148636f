//! gRPC deadlines reach the NATS calls: with NATS frozen (SIGSTOP: the
//! connection stays up but nothing answers), a call with a short deadline
//! is dropped at its deadline, NATS call included, and recorded as
//! CANCELLED, instead of running on until the NATS client's own request
//! timeout would fail it as NATS_UNAVAILABLE.

use std::time::Duration;

use crate::common::*;
use tenure::proto::GetLeaseRequest;

fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: signalling the test's own child nats-server by its pid.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

#[tokio::test]
async fn deadline_cancels_the_nats_call() {
    let t = Tenure::start_with(|c| c.metrics_listen = Some("127.0.0.1:0".parse().unwrap())).await;
    let addr = t.running.as_ref().unwrap().metrics_addr().unwrap();
    let mut c = t.client().await;
    acquire(&mut c, acquire_req("dl.a", "w", 60)).await;
    let pid = t.nats.process.as_ref().unwrap().pid().unwrap();
    signal(pid, libc::SIGSTOP);
    // Signals are delivered asynchronously: wait until the server really is
    // stopped (waitpid reports it), or a busy machine lets a request through.
    within(
        "nats-server to stop",
        tokio::task::spawn_blocking(move || {
            let mut status = 0;
            // SAFETY: waiting on the test's own child process.
            let r = unsafe { libc::waitpid(pid as libc::pid_t, &mut status, libc::WUNTRACED) };
            assert!(
                r == pid as libc::pid_t && libc::WIFSTOPPED(status),
                "waitpid: {r} {status}"
            );
        }),
    )
    .await
    .unwrap();

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
    signal(pid, libc::SIGCONT);
    assert!(text.contains(cancelled), "{text}");
    assert!(!text.contains(unavailable), "{text}");
}
