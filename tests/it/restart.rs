//! NATS restarts: leases and tokens survive, Tenure reconnects by itself, and
//! health follows the connection.

use crate::common::*;
use tenure::proto::GetLeaseRequest;
use tonic_health::pb::health_check_response::ServingStatus;

/// nats-server is SIGKILLed mid-test and restarted with the same store:
/// health goes NOT_SERVING and back to SERVING, calls during the outage fail
/// with NATS_UNAVAILABLE, and afterwards the lease, its token and its
/// revision are intact and new tokens keep growing.
#[tokio::test]
async fn nats_restart_keeps_leases_and_health_follows() {
    let mut t = Tenure::start().await;
    let mut c = t.client().await;
    let (lease, key) = acquire(&mut c, acquire_req("survive.a", "alice", 120)).await;
    let mut statuses = HealthStatuses::watch(&t).await;
    assert_eq!(statuses.next().await, ServingStatus::Serving as i32);

    t.nats.kill().await;
    assert_eq!(statuses.next().await, ServingStatus::NotServing as i32);
    let err = c
        .get_lease(GetLeaseRequest {
            name: "survive.a".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::Unavailable);
    assert_eq!(reason(&err), "NATS_UNAVAILABLE");

    t.nats.restart().await;
    assert_eq!(statuses.next().await, ServingStatus::Serving as i32);

    let now = c
        .get_lease(GetLeaseRequest {
            name: "survive.a".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    assert_eq!(
        (now.holder.as_str(), now.fencing_token, now.revision),
        ("alice", lease.fencing_token, lease.revision)
    );
    let renewed = renew(&mut c, renew_req("survive.a", lease.revision, key)).await;
    assert_eq!(renewed.fencing_token, lease.fencing_token);
    let (other, _) = acquire(&mut c, acquire_req("survive.b", "bob", 10)).await;
    assert!(other.fencing_token > renewed.revision);
}
