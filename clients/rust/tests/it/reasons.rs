//! The error reasons: every value of the generated `ErrorReason` is
//! classified (retryable or permanent) as the "Error reasons" table of
//! `clients/README.md` says, read here at test time, and the table names no
//! reason the enum lacks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use tenure_client::{Reason, RETRYABLE_REASONS};

const HEADER: &str = "| reason | gRPC code | retryable | what to do |";

/// `clients/README.md`, from this crate's folder (`clients/rust`).
fn readme() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../README.md")
}

/// The README table as reason → (gRPC code, retryable).
fn table() -> BTreeMap<String, (String, bool)> {
    let path = readme();
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let start = lines
        .iter()
        .position(|l| *l == HEADER)
        .unwrap_or_else(|| panic!("{path:?} has no error reason table"));
    let mut rows = BTreeMap::new();
    for line in &lines[start + 1..] {
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.trim_matches('|').split('|').map(str::trim).collect();
        if cells[0].starts_with("---") {
            continue;
        }
        assert_eq!(cells.len(), 4, "{path:?}: table row {line}");
        let name = cells[0].trim_matches('`').to_string();
        let retryable = match cells[2] {
            "yes" => true,
            "no" => false,
            other => panic!("{path:?}: {name}: retryable is {other:?}, want yes or no"),
        };
        let code = cells[1].to_string();
        assert!(
            !rows.contains_key(&name),
            "{path:?}: {name} is in the table twice"
        );
        rows.insert(name, (code, retryable));
    }
    rows
}

#[test]
fn every_generated_reason_is_classified_as_the_table_says() {
    let table = table();
    let mut wrong = Vec::new();
    for reason in Reason::all() {
        match table.get(reason.as_str()) {
            None => wrong.push(format!(
                "{reason} is missing from the table in clients/README.md"
            )),
            Some((_, retryable)) if reason.is_retryable() != *retryable => wrong.push(format!(
                "{reason}: is_retryable() is {}, the table says {retryable}",
                reason.is_retryable()
            )),
            Some(_) => {}
        }
        assert_eq!(Reason::parse(reason.as_str()), reason);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(Reason::all().count() >= 22);
}

#[test]
fn the_table_names_no_reason_the_enum_lacks() {
    let table = table();
    let names: BTreeSet<&str> = Reason::all().map(Reason::as_str).collect();
    let extra: Vec<&String> = table
        .keys()
        .filter(|n| !names.contains(n.as_str()))
        .collect();
    assert!(
        extra.is_empty(),
        "in the table but not in ErrorReason: {extra:?}"
    );
    let yes: BTreeSet<&str> = table
        .iter()
        .filter(|(_, (_, retryable))| *retryable)
        .map(|(n, _)| n.as_str())
        .collect();
    let retryable: BTreeSet<&str> = RETRYABLE_REASONS.iter().map(|r| r.as_str()).collect();
    assert_eq!(retryable, yes);
    assert!(!Reason::Unspecified.is_retryable());
}
