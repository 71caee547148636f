//! `tenure health`: asks a server's gRPC health service
//! (`grpc.health.v1.Health/Check`) whether it serves, for probes and
//! container health checks that have no grpcurl.
//!
//! It prints the status the server answered (`SERVING`, `NOT_SERVING`) and
//! exits 0 only for `SERVING`: 1 when the server answered anything else
//! (it cannot reach NATS, or it is shutting down) or does not know
//! `--service`, 69 when it cannot be reached, 2 for usage errors. It
//! connects like every client subcommand (`--server`, TLS, token).

use std::time::Duration;

use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use super::args::{HealthArgs, OutputFormat};
use super::connect::{channel, request};
use super::error::{CliError, EXIT_FAILED};
use super::output;

/// `tenure health [--service NAME]`.
pub async fn health(a: HealthArgs) -> Result<(), CliError> {
    let mut client = HealthClient::new(channel(&a.conn).await?);
    let status = client
        .check(request(
            HealthCheckRequest {
                service: a.service.clone(),
            },
            &a.conn,
            Duration::ZERO,
        ))
        .await
        .map_err(|s| CliError::from_status(&s))?
        .into_inner()
        .status;
    let name = ServingStatus::try_from(status)
        .map(|s| s.as_str_name().to_string())
        .unwrap_or_else(|_| format!("STATUS_{status}"));
    match a.output.output {
        OutputFormat::Json => {
            let _ = output::write_json(
                &serde_json::json!({"service": a.service, "status": name}),
                false,
            );
        }
        OutputFormat::Table => {
            let _ = output::write_line(&name);
        }
    }
    if status == ServingStatus::Serving as i32 {
        return Ok(());
    }
    let what = if a.service.is_empty() {
        "the server".to_string()
    } else {
        format!("service {:?}", a.service)
    };
    Err(CliError {
        code: EXIT_FAILED,
        reason: name,
        message: format!("{} reports {what} as not serving", a.conn.server),
        hint: Some("it cannot reach NATS or is shutting down; its log says which".to_string()),
    })
}
