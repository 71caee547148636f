//! Admin RPCs: ListLeases pages through live holdings by prefix, and
//! RevokeLease ends a holding so that watchers see REVOKED, the holder's
//! next Renew/Release gets LEASE_NOT_HELD, and the next holder gets a
//! greater fencing token.

use crate::common::*;
use tenure::proto::{EventType, ListLeasesRequest, RevokeLeaseRequest, WatchLeaseRequest};

/// Lists only live holdings under the prefix, sorted, page by page.
#[tokio::test]
async fn list_pages_through_live_holdings() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    for n in ["jobs.c", "jobs.a", "jobs.b", "other.x", "jobsx"] {
        acquire(&mut c, acquire_req(n, "w", 60)).await;
    }
    let (gone, key) = acquire(&mut c, acquire_req("jobs.gone", "w", 60)).await;
    c.release(release_req("jobs.gone", gone.revision, key))
        .await
        .unwrap();

    let mut names = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = c
            .list_leases(ListLeasesRequest {
                prefix: "jobs.".into(),
                page_size: 2,
                page_token: token.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        names.extend(page.leases.iter().map(|l| l.name.clone()));
        assert!(page
            .leases
            .iter()
            .all(|l| l.holder == "w" && l.fencing_token > 0));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
        assert!(pages < 5, "paging does not end");
    }
    assert_eq!(names, ["jobs.a", "jobs.b", "jobs.c"]);
    assert_eq!(pages, 2);

    let all = c
        .list_leases(ListLeasesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.leases.len(), 5);
    assert!(all.next_page_token.is_empty());

    let err = c
        .list_leases(ListLeasesRequest {
            prefix: "bad prefix".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "INVALID_NAME");
}

/// A revoke reaches the watcher as REVOKED and the holder as LEASE_NOT_HELD;
/// the name is free again with a greater token.
#[tokio::test]
async fn revoke_is_seen_by_watcher_and_holder() {
    let t = Tenure::start().await;
    let mut c = t.client().await;
    let (lease, key) = acquire(&mut c, acquire_req("jobs.stuck", "worker-1", 60)).await;
    let mut watch = c
        .watch_lease(WatchLeaseRequest {
            name: "jobs.stuck".into(),
            event_types: vec![],
            start_revision: 0,
            shard_revisions: Vec::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        next_event(&mut watch).await.r#type,
        EventType::Current as i32
    );
    assert_eq!(
        next_event(&mut watch).await.r#type,
        EventType::SnapshotComplete as i32
    );

    // Wrong token: nothing is revoked.
    let err = c
        .revoke_lease(RevokeLeaseRequest {
            name: "jobs.stuck".into(),
            reason: "stuck".into(),
            fencing_token: lease.fencing_token + 100,
            slot: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_FOUND");
    let err = c
        .revoke_lease(RevokeLeaseRequest {
            name: "jobs.stuck".into(),
            reason: "".into(),
            fencing_token: 0,
            slot: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "INVALID_ARGUMENT");

    let revoked = c
        .revoke_lease(RevokeLeaseRequest {
            name: "jobs.stuck".into(),
            reason: "worker-1 is stuck in GC".into(),
            fencing_token: lease.fencing_token,
            slot: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(revoked.revision > lease.revision);
    let gone = revoked.revoked.unwrap();
    assert_eq!(
        (gone.holder.as_str(), gone.fencing_token),
        ("worker-1", lease.fencing_token)
    );

    let e = next_event(&mut watch).await;
    assert_eq!(e.r#type, EventType::Revoked as i32);
    assert_eq!(
        (e.holder.as_str(), e.fencing_token),
        ("worker-1", lease.fencing_token)
    );
    assert_eq!(e.revision, revoked.revision);

    let err = c
        .renew(renew_req("jobs.stuck", lease.revision, key.clone()))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_HELD");
    let err = c
        .release(release_req("jobs.stuck", lease.revision, key))
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_HELD");

    // Revoking again: nothing is held.
    let err = c
        .revoke_lease(RevokeLeaseRequest {
            name: "jobs.stuck".into(),
            reason: "again".into(),
            fencing_token: 0,
            slot: 0,
        })
        .await
        .unwrap_err();
    assert_eq!(reason(&err), "LEASE_NOT_FOUND");

    let (next_lease, _) = acquire(&mut c, acquire_req("jobs.stuck", "worker-2", 60)).await;
    assert!(next_lease.fencing_token > revoked.revision);
    let e = next_event(&mut watch).await;
    assert_eq!(
        (e.r#type, e.holder.as_str()),
        (EventType::Acquired as i32, "worker-2")
    );
}
