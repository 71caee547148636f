//! Invalid input: every bad request gets INVALID_ARGUMENT with an ErrorInfo
//! reason and an actionable message, and nothing is written to the bucket.

use std::collections::HashMap;

use crate::common::*;
use tenure::proto::{
    AcquireRequest, GetLeaseRequest, ReleaseRequest, RenewRequest, WatchLeaseRequest,
};

fn dur(seconds: i64, nanos: i32) -> Option<prost_types::Duration> {
    Some(prost_types::Duration { seconds, nanos })
}

/// Each malformed Acquire is refused with its own reason; the bucket is untouched.
#[tokio::test]
async fn invalid_acquires_are_refused_and_write_nothing() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let good = acquire_req("valid.name", "worker", 10);
    let big_meta: HashMap<String, String> = [("blob".to_string(), "x".repeat(2048))].into();
    let many_meta: HashMap<String, String> =
        (0..20).map(|i| (format!("k{i}"), "v".into())).collect();
    let cases: Vec<(&str, AcquireRequest, &str)> = vec![
        (
            "empty name",
            AcquireRequest {
                name: "".into(),
                ..good.clone()
            },
            "INVALID_NAME",
        ),
        (
            "space in name",
            AcquireRequest {
                name: "a b".into(),
                ..good.clone()
            },
            "INVALID_NAME",
        ),
        (
            "wildcard name",
            AcquireRequest {
                name: "jobs.*".into(),
                ..good.clone()
            },
            "INVALID_NAME",
        ),
        (
            "leading dot",
            AcquireRequest {
                name: ".jobs".into(),
                ..good.clone()
            },
            "INVALID_NAME",
        ),
        (
            "too long name",
            AcquireRequest {
                name: "n".repeat(300),
                ..good.clone()
            },
            "INVALID_NAME",
        ),
        (
            "empty holder",
            AcquireRequest {
                holder: "".into(),
                ..good.clone()
            },
            "INVALID_HOLDER",
        ),
        (
            "control char holder",
            AcquireRequest {
                holder: "a\u{7}".into(),
                ..good.clone()
            },
            "INVALID_HOLDER",
        ),
        (
            "right-to-left override in holder",
            AcquireRequest {
                holder: "alice\u{202E}".into(),
                ..good.clone()
            },
            "INVALID_HOLDER",
        ),
        (
            "zero-width space in holder",
            AcquireRequest {
                holder: "al\u{200B}ice".into(),
                ..good.clone()
            },
            "INVALID_HOLDER",
        ),
        (
            "holder of only spaces",
            AcquireRequest {
                holder: "   ".into(),
                ..good.clone()
            },
            "INVALID_HOLDER",
        ),
        (
            "NUL in metadata value",
            AcquireRequest {
                metadata: [("k".to_string(), "a\0b".to_string())].into(),
                ..good.clone()
            },
            "INVALID_METADATA",
        ),
        (
            "ESC in metadata value",
            AcquireRequest {
                metadata: [("k".to_string(), "\x1b[2J".to_string())].into(),
                ..good.clone()
            },
            "INVALID_METADATA",
        ),
        (
            "newline in metadata value",
            AcquireRequest {
                metadata: [("k".to_string(), "a\nb".to_string())].into(),
                ..good.clone()
            },
            "INVALID_METADATA",
        ),
        (
            "blank metadata key",
            AcquireRequest {
                metadata: [(" ".to_string(), "v".to_string())].into(),
                ..good.clone()
            },
            "INVALID_METADATA",
        ),
        (
            "zero ttl",
            AcquireRequest {
                ttl: dur(0, 0),
                ..good.clone()
            },
            "INVALID_TTL",
        ),
        (
            "negative ttl",
            AcquireRequest {
                ttl: dur(-5, 0),
                ..good.clone()
            },
            "INVALID_TTL",
        ),
        (
            "ttl above max",
            AcquireRequest {
                ttl: dur(100_000, 0),
                ..good.clone()
            },
            "INVALID_TTL",
        ),
        (
            "short key",
            AcquireRequest {
                lease_key: "short".into(),
                ..good.clone()
            },
            "INVALID_LEASE_KEY",
        ),
        (
            "oversized metadata",
            AcquireRequest {
                metadata: big_meta,
                ..good.clone()
            },
            "INVALID_METADATA",
        ),
        (
            "too many metadata entries",
            AcquireRequest {
                metadata: many_meta,
                ..good.clone()
            },
            "INVALID_METADATA",
        ),
        (
            "negative wait",
            AcquireRequest {
                wait: dur(-1, 0),
                ..good.clone()
            },
            "INVALID_WAIT",
        ),
        (
            "wait above max",
            AcquireRequest {
                wait: dur(100_000, 0),
                ..good.clone()
            },
            "INVALID_WAIT",
        ),
    ];
    let before = t.last_sequence().await;
    for (what, req, want) in cases {
        let err = c.acquire(req).await.expect_err(what);
        assert_eq!(err.code(), tonic::Code::InvalidArgument, "{what}");
        assert_eq!(reason(&err), want, "{what}");
        assert!(
            !err.message().is_empty() && !err.message().contains('\n'),
            "{what}: one-line message"
        );
    }
    assert_eq!(t.last_sequence().await, before, "nothing written");
    // The same request, made valid, works.
    c.acquire(good).await.expect("valid acquire");
}

/// Renew, Release, GetLease and WatchLease refuse missing or malformed fields.
#[tokio::test]
async fn invalid_renew_release_get_watch_are_refused() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (lease, key) = acquire(&mut c, acquire_req("v.held", "worker", 30)).await;
    let before = t.last_sequence().await;
    let renew = renew_req("v.held", lease.revision, key.clone());
    let bad_renews = [
        (
            RenewRequest {
                expected_revision: 0,
                ..renew.clone()
            },
            "INVALID_REVISION",
        ),
        (
            RenewRequest {
                lease_key: "".into(),
                ..renew.clone()
            },
            "INVALID_LEASE_KEY",
        ),
        (
            RenewRequest {
                name: "".into(),
                ..renew.clone()
            },
            "INVALID_NAME",
        ),
        (
            RenewRequest {
                ttl: dur(0, 0),
                ..renew.clone()
            },
            "INVALID_TTL",
        ),
        (
            RenewRequest {
                ttl: dur(0, 2_000_000_000),
                ..renew.clone()
            },
            "INVALID_TTL",
        ),
    ];
    for (req, want) in bad_renews {
        let err = c.renew(req).await.unwrap_err();
        assert_eq!(
            (err.code(), reason(&err).as_str()),
            (tonic::Code::InvalidArgument, want)
        );
    }
    let release = release_req("v.held", lease.revision, key);
    let bad_releases = [
        (
            ReleaseRequest {
                expected_revision: 0,
                ..release.clone()
            },
            "INVALID_REVISION",
        ),
        (
            ReleaseRequest {
                lease_key: "x".into(),
                ..release.clone()
            },
            "INVALID_LEASE_KEY",
        ),
        (
            ReleaseRequest {
                name: "a..b".into(),
                ..release.clone()
            },
            "INVALID_NAME",
        ),
    ];
    for (req, want) in bad_releases {
        let err = c.release(req).await.unwrap_err();
        assert_eq!(
            (err.code(), reason(&err).as_str()),
            (tonic::Code::InvalidArgument, want)
        );
    }
    let err = c
        .get_lease(GetLeaseRequest {
            name: "bad name".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "INVALID_NAME");
    for (req, want) in [
        (
            WatchLeaseRequest {
                name: "".into(),
                event_types: vec![],
                start_revision: 0,
                shard_revisions: Vec::new(),
            },
            "INVALID_NAME",
        ),
        (
            WatchLeaseRequest {
                name: "a.*".into(),
                event_types: vec![],
                start_revision: 0,
                shard_revisions: Vec::new(),
            },
            "INVALID_NAME",
        ),
        (
            WatchLeaseRequest {
                name: "a.>".into(),
                event_types: vec![42],
                start_revision: 0,
                shard_revisions: Vec::new(),
            },
            "INVALID_ARGUMENT",
        ),
        (
            WatchLeaseRequest {
                name: "a".into(),
                event_types: vec![0],
                start_revision: 0,
                shard_revisions: Vec::new(),
            },
            "INVALID_ARGUMENT",
        ),
    ] {
        let err = c.watch_lease(req).await.unwrap_err();
        assert_eq!(
            (err.code(), reason(&err).as_str()),
            (tonic::Code::InvalidArgument, want)
        );
    }
    assert_eq!(t.last_sequence().await, before, "nothing written");
    // The holding is intact.
    c.renew(renew)
        .await
        .expect("the lease is still held and renewable");
}

/// TTLs are granted in whole seconds, rounded up, never below the minimum.
#[tokio::test]
async fn ttl_is_granted_in_whole_seconds_rounded_up() {
    let t = Tenure::start_with(|c| c.min_ttl = std::time::Duration::from_secs(2)).await;
    let mut c = t.client().await;
    for (i, (asked, granted)) in [
        (dur(0, 300_000_000), 2),
        (dur(2, 500_000_000), 3),
        (dur(7, 0), 7),
        (None, 10),
    ]
    .into_iter()
    .enumerate()
    {
        let req = AcquireRequest {
            name: format!("ttl.{i}"),
            holder: "w".into(),
            ttl: asked,
            ..Default::default()
        };
        let (lease, _) = acquire(&mut c, req).await;
        assert_eq!(lease.ttl.unwrap().seconds, granted, "case {i}");
    }
}
