//! OpenTelemetry traces reach an OTLP receiver started by the test: one
//! span per RPC named after the method, with lease name, holder, fencing
//! token, revision and outcome; the caller's W3C trace context is
//! continued; the NATS read and publish are child spans; and no span
//! carries the lease key. Tenure runs as `tenure serve --otlp-endpoint`: the
//! trace exporter is process-global, and this test binary runs every other
//! test beside it.

use crate::common::*;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use tenure::proto::AcquireRequest;
use tokio::sync::mpsc;

/// An OTLP/gRPC trace receiver that forwards every span it gets.
struct Receiver(mpsc::UnboundedSender<Span>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        for rs in request.into_inner().resource_spans {
            for ss in rs.scope_spans {
                for span in ss.spans {
                    let _ = self.0.send(span);
                }
            }
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// The string form of an attribute, if the span has it.
fn attr(span: &Span, key: &str) -> Option<String> {
    let v = span.attributes.iter().find(|kv| kv.key == key)?;
    Some(match v.value.as_ref()?.value.as_ref()? {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        Value::BoolValue(b) => b.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rpc_spans_reach_the_otlp_receiver() {
    let (tx, mut spans) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let otlp = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Receiver(tx)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let nats = Nats::start().await;
    let otlp_url = format!("http://{otlp}");
    let t = Serve::start(&nats, &["--otlp-endpoint", &otlp_url]).await;
    let mut c = t.client().await;
    let trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
    let parent_id = "00f067aa0ba902b7";
    let key = "trace-secret-lease-key-77";
    let mut req = tonic::Request::new(AcquireRequest {
        lease_key: key.into(),
        ..acquire_req("traced.job", "alice", 30)
    });
    req.metadata_mut().insert(
        "traceparent",
        format!("00-{trace_id}-{parent_id}-01").parse().unwrap(),
    );
    let lease = c.acquire(req).await.unwrap().into_inner().lease.unwrap();
    let err = c
        .renew(renew_req(
            "traced.job",
            lease.revision,
            "not-the-right-lease-key",
        ))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_HELD");

    // A clean shutdown flushes every span to the receiver.
    assert!(t.terminate().await.success(), "tenure exits cleanly");

    let mut seen: Vec<Span> = Vec::new();
    let (acquire, renew) = within("the RPC spans", async {
        loop {
            seen.push(spans.recv().await.expect("receiver open"));
            let acquire = seen.iter().find(|s| s.name == "Acquire").cloned();
            let renew = seen.iter().find(|s| s.name == "Renew").cloned();
            if let (Some(a), Some(r)) = (acquire, renew) {
                let nats_children = seen
                    .iter()
                    .filter(|s| s.parent_span_id == a.span_id && s.name.starts_with("nats."))
                    .count();
                if nats_children >= 2 {
                    return (a, r);
                }
            }
        }
    })
    .await;

    // The caller's trace is continued.
    assert_eq!(hex(&acquire.trace_id), trace_id);
    assert_eq!(hex(&acquire.parent_span_id), parent_id);
    assert_eq!(attr(&acquire, "lease.name").as_deref(), Some("traced.job"));
    assert_eq!(attr(&acquire, "lease.holder").as_deref(), Some("alice"));
    assert_eq!(
        attr(&acquire, "lease.fencing_token"),
        Some(lease.fencing_token.to_string())
    );
    assert_eq!(
        attr(&acquire, "lease.revision"),
        Some(lease.revision.to_string())
    );
    assert_eq!(attr(&acquire, "outcome").as_deref(), Some("OK"));
    assert_eq!(
        attr(&renew, "outcome").as_deref(),
        Some("FAILED_PRECONDITION")
    );
    // The NATS reads (the name, its queue: fair waiting) and the CAS
    // publish are children of the RPC span.
    let children: Vec<&str> = seen
        .iter()
        .filter(|s| s.parent_span_id == acquire.span_id)
        .map(|s| s.name.as_str())
        .collect();
    assert!(children.contains(&"nats.get_last"), "{children:?}");
    assert!(children.contains(&"nats.get_next"), "{children:?}");
    assert!(children.contains(&"nats.publish"), "{children:?}");
    // No span anywhere carries the lease key.
    assert!(
        !format!("{seen:?}").contains(key),
        "a span carries the lease key"
    );
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
