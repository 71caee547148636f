//! What Tenure tells operators: Prometheus metrics and their HTTP listener
//! ([`metrics`]), logs and OTLP traces with W3C trace-context propagation
//! ([`traces`]), and which build is running ([`version`]: version, commit
//! and build date). A leaf: it depends only on the settings it is given.

mod metrics;
mod traces;
pub mod version;

pub use metrics::{bind as bind_metrics, code_name, serve as serve_metrics, METRICS};
pub use traces::{init, log_filter, set_parent, Telemetry};
