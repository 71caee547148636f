//! Workload 6: ghz, an independent gRPC load tool, against Tenure's
//! Acquire, Renew and Release, as a cross-check of the harness's own
//! figures for workloads 1 and 2.
//!
//! ghz cannot carry a reply into the next request, so:
//! - **Acquire** takes a fresh name per request (`{{.RequestNumber}}`).
//! - **Renew** cycles over 4c names acquired beforehand, always presenting
//!   the revision that acquired them: a *retried* renew, which Tenure
//!   accepts while the holding is its own, but which takes its verify path
//!   (a leader read before the CAS) instead of the cached one of workload 1.
//! - **Release** releases n names acquired beforehand, each once, with its
//!   exact revision.
//!
//! ghz uses server reflection, so no proto files are needed.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use tenure::proto::AcquireRequest;

use crate::procs::R;
use crate::systems::Tenure;

/// What ghz reported for one run.
pub struct GhzRun {
    /// Requests per second.
    pub rps: f64,
    /// Median latency, ms.
    pub p50: f64,
    /// 99th percentile latency, ms.
    pub p99: f64,
    /// Requests that did not return OK.
    pub errors: u64,
}

/// Acquires `names`, returning (name, revision, key) for each.
async fn acquire_all(t: &Tenure, names: Vec<String>) -> R<Vec<(String, u64, String)>> {
    futures::stream::iter(names)
        .map(|name| async move {
            let resp = t
                .client()
                .acquire(AcquireRequest {
                    name: name.clone(),
                    holder: "ghz".into(),
                    ttl: Some(prost_types::Duration {
                        seconds: 60,
                        nanos: 0,
                    }),
                    ..Default::default()
                })
                .await
                .map_err(|s| format!("Acquire {name}: {}", s.message()))?
                .into_inner();
            let rev = resp.lease.map_or(0, |l| l.revision);
            Ok((name, rev, resp.lease_key))
        })
        .buffer_unordered(64)
        .collect::<Vec<R<_>>>()
        .await
        .into_iter()
        .collect()
}

/// Runs ghz once on `rpc` (`Acquire`, `Renew` or `Release`).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    ghz: &Path,
    addr: &str,
    tenure: &Tenure,
    dir: &Path,
    rpc: &str,
    tag: &str,
    c: usize,
    n: usize,
    conns: usize,
) -> R<GhzRun> {
    let data = match rpc {
        "Acquire" => serde_json::json!({
            "name": format!("{tag}.{{{{.RequestNumber}}}}"),
            "holder": "ghz",
            "ttl": "60s",
        }),
        "Renew" => {
            let held =
                acquire_all(tenure, (0..4 * c).map(|i| format!("{tag}.{i}")).collect()).await?;
            serde_json::Value::Array(
                held.into_iter()
                    .map(|(name, rev, key)| {
                        serde_json::json!({"name": name, "expected_revision": rev, "lease_key": key})
                    })
                    .collect(),
            )
        }
        "Release" => {
            let held = acquire_all(tenure, (0..n).map(|i| format!("{tag}.{i}")).collect()).await?;
            serde_json::Value::Array(
                held.into_iter()
                    .map(|(name, rev, key)| {
                        serde_json::json!({"name": name, "expected_revision": rev, "lease_key": key})
                    })
                    .collect(),
            )
        }
        other => return Err(format!("no ghz workload for {other}")),
    };
    let data_file = dir.join(format!("ghz-{tag}.json"));
    std::fs::write(&data_file, data.to_string()).map_err(|e| e.to_string())?;
    let out = tokio::process::Command::new(ghz)
        .arg("--insecure")
        .arg("--call")
        .arg(format!("tenure.v1.LeaseService/{rpc}"))
        .arg("--data-file")
        .arg(&data_file)
        .arg("-c")
        .arg(c.to_string())
        .arg("-n")
        .arg(n.to_string())
        .arg("--connections")
        .arg(conns.to_string())
        .arg("--format")
        .arg("json")
        .arg(addr)
        .output()
        .await
        .map_err(|e| format!("cannot run {}: {e}", ghz.display()))?;
    parse(&String::from_utf8_lossy(&out.stdout)).map_err(|e| {
        format!(
            "ghz {rpc}: {e}; stderr: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )
    })
}

/// Reads ghz's JSON summary.
fn parse(json: &str) -> R<GhzRun> {
    let v: serde_json::Value =
        serde_json::from_str(json).map_err(|e| format!("unreadable ghz output ({e})"))?;
    let pct = |p: u64| {
        v["latencyDistribution"]
            .as_array()
            .and_then(|a| {
                a.iter()
                    .find(|x| x["percentage"].as_u64() == Some(p))
                    .and_then(|x| x["latency"].as_u64())
            })
            .map_or(f64::NAN, |ns| {
                Duration::from_nanos(ns).as_secs_f64() * 1000.0
            })
    };
    let ok = v["statusCodeDistribution"]["OK"].as_u64().unwrap_or(0);
    let count = v["count"].as_u64().unwrap_or(0);
    Ok(GhzRun {
        rps: v["rps"].as_f64().ok_or("no rps in ghz output")?,
        p50: pct(50),
        p99: pct(99),
        errors: count.saturating_sub(ok),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields of ghz's JSON summary that the table uses.
    #[test]
    fn parses_summary() {
        let r = parse(
            r#"{"count":100,"rps":2500.5,"latencyDistribution":[
                {"percentage":50,"latency":1500000},{"percentage":99,"latency":4000000}],
                "statusCodeDistribution":{"OK":98,"FailedPrecondition":2}}"#,
        )
        .unwrap();
        assert_eq!(r.rps, 2500.5);
        assert_eq!(r.p50, 1.5);
        assert_eq!(r.p99, 4.0);
        assert_eq!(r.errors, 2);
        assert!(parse("not json").is_err());
    }
}
