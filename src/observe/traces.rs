//! Logs and traces. Logs are human-readable or JSON lines on stderr,
//! filtered by `RUST_LOG` (default `info`). Traces are off unless an OTLP
//! endpoint is configured; then every span (one per RPC, with the NATS
//! reads and writes as children) is exported over OTLP/gRPC in batches,
//! continuing the caller's W3C trace context (`traceparent` metadata).

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::config::LogFormat;

/// Keeps the trace exporter alive; dropping it flushes and stops it.
pub struct Telemetry {
    /// The tracer provider, when traces are on.
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports every finished span now.
    pub fn flush(&self) {
        if let Some(p) = &self.provider {
            let _ = p.force_flush();
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take() {
            let _ = p.shutdown();
        }
    }
}

/// The filter of log lines: `directives` (RUST_LOG syntax), except that the
/// NATS client never logs at TRACE. At that level async-nats writes every
/// protocol operation with its payload, and the payloads are lease records
/// (with the SHA-256 of the lease key) and the CONNECT line (with NATS
/// credentials): no log level may show those.
pub fn log_filter(
    directives: &str,
) -> Result<impl tracing_subscriber::layer::Filter<tracing_subscriber::Registry>, String> {
    let env =
        EnvFilter::try_new(directives).map_err(|e| format!("RUST_LOG {directives:?}: {e}"))?;
    // A static filter (by target and level), not a closure: its answer is
    // cached per callsite, so the NATS client's many disabled debug and
    // trace events (one per protocol operation) cost no filter call each
    // (a closure filter made every callsite "sometimes", ~1/6 of Tenure's
    // CPU per renewal in a profile).
    let no_nats_trace = tracing_subscriber::filter::Targets::new()
        .with_default(tracing::Level::TRACE)
        .with_target("async_nats", tracing::Level::DEBUG);
    Ok(tracing_subscriber::filter::FilterExt::and(
        env,
        no_nats_trace,
    ))
}

/// Installs the global subscriber: logs, and traces to `otlp_endpoint` when
/// given. Call once, from `main` (or once per test binary), inside the
/// tokio runtime.
pub fn init(format: LogFormat, otlp_endpoint: Option<&str>) -> Result<Telemetry, String> {
    let directives = std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into());
    let filter = log_filter(&directives)?;
    let logs = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let logs = match format {
        LogFormat::Human => logs.boxed(),
        LogFormat::Json => logs.json().boxed(),
    }
    .with_filter(filter);
    let (provider, traces) = match otlp_endpoint {
        None => (None, None),
        Some(endpoint) => {
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint)
                .build()
                .map_err(|e| format!("--otlp-endpoint {endpoint}: {e}"))?;
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(Resource::builder().with_service_name("tenure").build())
                .build();
            let tracer = provider.tracer("tenure");
            // Spans of this crate only, at debug and above (the NATS calls
            // are debug spans), whatever RUST_LOG says about log lines.
            let layer = tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(EnvFilter::new("tenure=debug"));
            (Some(provider), Some(layer))
        }
    };
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .try_init()
        .map_err(|e| format!("cannot install the log subscriber: {e}"))?;
    Ok(Telemetry { provider })
}

/// Makes `span` a child of the W3C trace context in `metadata`
/// (`traceparent`, `tracestate`), when the caller sent one.
pub fn set_parent(span: &tracing::Span, metadata: &tonic::metadata::MetadataMap) {
    if metadata.get("traceparent").is_none() {
        return;
    }
    let cx = TraceContextPropagator::new().extract(&MetadataExtractor(metadata));
    let _ = span.set_parent(cx);
}

/// Reads W3C trace headers from gRPC metadata.
struct MetadataExtractor<'a>(&'a tonic::metadata::MetadataMap);

impl Extractor for MetadataExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|k| match k {
                tonic::metadata::KeyRef::Ascii(k) => Some(k.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}
