//! `tenure history NAME [--since T] [--at T]`: who held a lease, when, with
//! which token, and how each holding ended (LeaseHistory), as a table or
//! JSON. Every text from the server is escaped before it is printed.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::args::{HistoryArgs, OutputFormat};
use super::connect::{connect, request};
use super::error::CliError;
use super::output::{self, rfc3339, Table};
use crate::proto::{HistoricHolding, HoldingEnding, LeaseHistoryRequest};

/// `tenure history`.
pub async fn history(a: HistoryArgs) -> Result<(), CliError> {
    let mut c = connect(&a.conn).await?;
    let resp = c
        .lease_history(request(
            LeaseHistoryRequest {
                name: a.name.clone(),
                since: a.since.map(timestamp),
                at: a.at.map(timestamp),
                page_size: a.limit,
            },
            &a.conn,
            Duration::ZERO,
        ))
        .await
        .map_err(|s| CliError::from_status(&s))?
        .into_inner();
    match a.output.output {
        OutputFormat::Json => {
            let holdings: Vec<_> = resp.holdings.iter().map(json).collect();
            let _ = output::write_json(
                &serde_json::json!({
                    "holdings": holdings,
                    "more_since": resp.more_since.map(rfc3339),
                    "oldest": resp.oldest.map(rfc3339),
                    "gaps": resp.gaps.iter().map(|g| serde_json::json!({
                        "name": g.name,
                        "slot": g.slot,
                        "after_revision": g.after_revision,
                        "after_time": g.after_time.map(rfc3339),
                        "before_revision": g.before_revision,
                        "before_time": g.before_time.map(rfc3339),
                    })).collect::<Vec<_>>(),
                }),
                false,
            );
        }
        OutputFormat::Table => {
            let mut table = Table::new(&["TOKEN", "SLOT", "HOLDER", "ACQUIRED", "ENDED", "HOW"]);
            for h in &resp.holdings {
                table.row(vec![
                    h.fencing_token.to_string(),
                    if h.slot == 0 {
                        "-".into()
                    } else {
                        h.slot.to_string()
                    },
                    h.holder.clone(),
                    h.acquire_time.map_or("(before)".into(), rfc3339),
                    h.end_time.map_or("-".into(), rfc3339),
                    how(h),
                ]);
            }
            let _ = output::write_out(&table.render());
            if !resp.gaps.is_empty() {
                let _ = output::write_line(&format!(
                    "{} gap(s): holdings may be missing where NATS did not copy the bucket's writes (-o json lists them)",
                    resp.gaps.len()
                ));
            }
            if let Some(more) = resp.more_since {
                let _ = output::write_line(&format!(
                    "more: tenure history {} --since {}",
                    a.name,
                    rfc3339(more)
                ));
            }
        }
    }
    Ok(())
}

/// How a holding ended, for the table.
fn how(h: &HistoricHolding) -> String {
    match HoldingEnding::try_from(h.ending) {
        Ok(HoldingEnding::Revoked) if !h.revoked_by.is_empty() => {
            format!("REVOKED by {}: {}", h.revoked_by, h.revoke_reason)
        }
        Ok(e) => e
            .as_str_name()
            .trim_start_matches("HOLDING_ENDING_")
            .to_string(),
        Err(_) => "UNKNOWN".into(),
    }
}

/// A holding as JSON.
fn json(h: &HistoricHolding) -> serde_json::Value {
    serde_json::json!({
        "name": h.name,
        "slot": h.slot,
        "holder": h.holder,
        "fencing_token": h.fencing_token,
        "acquire_time": h.acquire_time.map(rfc3339),
        "end_time": h.end_time.map(rfc3339),
        "ending": how(h),
        "revoked_by": h.revoked_by,
        "revoke_reason": h.revoke_reason,
    })
}

/// A system time as a protobuf timestamp.
fn timestamp(t: SystemTime) -> prost_types::Timestamp {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    prost_types::Timestamp {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}
