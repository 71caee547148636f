//! The error contract is written down where people read it: the error table
//! of docs/errors.md and the clients' table (`clients/README.md`) list
//! exactly the reasons of the proto's `ErrorReason` enum, each with the gRPC
//! code the server sends it with; docs/errors.md lists them in the enum's
//! order, as it says.

use std::collections::BTreeMap;

/// `(reason, code)` from the rows of the first table under `heading`, in
/// the table's order.
fn rows(path: &str, heading: &str) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR")))
        .unwrap_or_else(|e| panic!("read {path}: {e}"));
    let section = text
        .split_once(heading)
        .unwrap_or_else(|| panic!("{path} has a {heading:?} section"))
        .1;
    section
        .lines()
        .skip_while(|l| !l.starts_with("| `"))
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_string(), cells[2].to_string())
        })
        .collect()
}

/// `reason → code` from the rows of the first table under `heading`.
fn table(path: &str, heading: &str) -> BTreeMap<String, String> {
    rows(path, heading).into_iter().collect()
}

/// Every reason the server can send, in the enum's order (by number).
fn proto_reasons_in_order() -> Vec<tenure::Reason> {
    (1..=i32::from(u8::MAX))
        .filter_map(|n| tenure::Reason::try_from(n).ok())
        .collect()
}

/// Every reason the server can send, with its code in UPPER_SNAKE form.
fn proto_reasons() -> BTreeMap<String, String> {
    proto_reasons_in_order()
        .into_iter()
        .map(|r| {
            let code = format!("{:?}", r.code());
            let mut snake = String::new();
            for (i, c) in code.chars().enumerate() {
                if c.is_uppercase() && i > 0 {
                    snake.push('_');
                }
                snake.push(c.to_ascii_uppercase());
            }
            (r.as_str_name().to_string(), snake)
        })
        .collect()
}

#[test]
fn the_docs_error_table_matches_the_proto() {
    assert_eq!(table("docs/errors.md", "# Errors"), proto_reasons());
}

#[test]
fn the_docs_error_table_is_in_the_enum_order() {
    let listed: Vec<String> = rows("docs/errors.md", "# Errors")
        .into_iter()
        .map(|(reason, _)| reason)
        .collect();
    let enum_order: Vec<String> = proto_reasons_in_order()
        .into_iter()
        .map(|r| r.as_str_name().to_string())
        .collect();
    assert_eq!(
        listed, enum_order,
        "docs/errors.md says the table follows the enum's numbers"
    );
}

#[test]
fn the_clients_error_table_matches_the_proto() {
    assert_eq!(
        table("clients/README.md", "## Error reasons"),
        proto_reasons()
    );
}
