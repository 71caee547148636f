//! A bucket whose stream cannot take atomic batches: the features that need
//! them are refused with FAILED_PRECONDITION, reason
//! ATOMIC_BATCH_UNSUPPORTED, naming the nats-server version they need, and
//! everything else still works.
//!
//! The pinned nats-server has atomic batches, so the stream is made the
//! other way such a bucket arises: an operator created it without
//! `allow_atomic`, and Tenure's NATS user may not update streams (its
//! `$JS.API.STREAM.UPDATE.>` publishes are denied), so Tenure cannot turn
//! it on at start.

use crate::common::*;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{
    AcquireGroupRequest, AcquireRequest, GetLeaseRequest, GroupMember, ReleaseGroupRequest,
    RenewGroupRequest,
};
use tenure::{Config, NatsProcess, Running};
use tonic::transport::Channel;
use tonic::Code;
use tonic_types::StatusExt;

/// The bucket the operator made.
const BUCKET: &str = "locks";

/// A nats-server with two users: `admin` may do anything, `tenure` may do
/// anything but update a stream. Stopped on drop.
struct RestrictedNats {
    process: NatsProcess,
    _dir: tempfile::TempDir,
}

impl RestrictedNats {
    async fn start() -> RestrictedNats {
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join("nats.conf");
        std::fs::write(
            &conf,
            r#"authorization { users = [
  { user: admin, password: admin }
  { user: tenure, password: tenure,
    permissions: { publish: { deny: ["$JS.API.STREAM.UPDATE.>"] } } }
] }
"#,
        )
        .unwrap();
        let bin = tenure::find_binary(None).expect("nats-server (run scripts/tools.sh)");
        let process =
            NatsProcess::spawn_with_config(&bin, &dir.path().join("js"), None, Some(&conf))
                .await
                .expect("start nats-server");
        RestrictedNats { process, _dir: dir }
    }

    fn url(&self) -> String {
        self.process.url()
    }

    /// The operator's bucket: per-message TTL and delete markers (what
    /// Tenure needs to expire leases), atomic batch publish off.
    async fn create_bucket(&self) -> async_nats::jetstream::Context {
        let admin =
            async_nats::ConnectOptions::with_user_and_password("admin".into(), "admin".into())
                .connect(self.url())
                .await
                .expect("admin connects");
        let js = async_nats::jetstream::new(admin);
        js.create_key_value(async_nats::jetstream::kv::Config {
            bucket: BUCKET.into(),
            history: 1,
            limit_markers: Some(std::time::Duration::from_secs(60)),
            ..Default::default()
        })
        .await
        .expect("admin creates the bucket");
        js
    }

    /// Tenure over the bucket, connected as the user that may not update
    /// streams.
    async fn tenure(&self) -> (Running, LeaseServiceClient<Channel>) {
        let config = Config {
            bucket: BUCKET.into(),
            nats_user: Some("tenure".into()),
            nats_password: Some("tenure".into()),
            metrics_listen: None,
            ..Config::for_nats(&self.url())
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let running = tenure::start(&config, &self.url(), listener)
            .await
            .expect("tenure starts on a bucket without atomic batches");
        let client = LeaseServiceClient::connect(format!("http://{}", running.addr()))
            .await
            .expect("connect to tenure");
        (running, client)
    }
}

/// Asserts the refusal every atomic-batch feature gets on this bucket.
fn assert_unsupported(what: &str, status: &tonic::Status) {
    assert_eq!(
        status.code(),
        Code::FailedPrecondition,
        "{what}: {status:?}"
    );
    let info = status
        .get_details_error_info()
        .unwrap_or_else(|| panic!("{what}: no ErrorInfo in {status:?}"));
    assert_eq!(info.reason, "ATOMIC_BATCH_UNSUPPORTED", "{what}");
    assert_eq!(info.domain, "tenure.v1", "{what}");
    assert_eq!(info.metadata["required_nats_server"], "2.12", "{what}");
    assert_eq!(info.metadata["bucket"], BUCKET, "{what}");
    assert_eq!(info.metadata["stream"], format!("KV_{BUCKET}"), "{what}");
    let message = status.message();
    assert!(!message.contains('\n'), "{what}: one line: {message}");
    assert!(
        message.contains("nats-server 2.12 or newer") && message.contains("allow_atomic"),
        "{what}: the message says what to do: {message}"
    );
}

#[tokio::test]
async fn features_needing_atomic_batches_are_refused_as_a_precondition() {
    let nats = RestrictedNats::start().await;
    let js = nats.create_bucket().await;
    let (running, mut c) = nats.tenure().await;

    // Tenure could not turn allow_atomic on: the stream is as the operator
    // made it.
    let mut stream = js.get_stream(format!("KV_{BUCKET}")).await.unwrap();
    let info = stream.info().await.unwrap();
    assert!(
        !info.config.allow_atomic_publish,
        "the deny kept the stream as made"
    );
    let before = info.state.last_sequence;

    // An Acquire with a lock-delay writes the lease and its fence in one
    // batch.
    let status = c
        .acquire(AcquireRequest {
            lock_delay: Some(secs(5)),
            ..acquire_req("delayed", "w", 10)
        })
        .await
        .expect_err("a lock-delay needs atomic batches");
    assert_unsupported("Acquire with lock_delay", &status);

    // A group is taken in one batch.
    let status = c
        .acquire_group(AcquireGroupRequest {
            names: vec!["g.a".into(), "g.b".into()],
            holder: "w".into(),
            ttl: Some(secs(10)),
            ..Default::default()
        })
        .await
        .expect_err("a group needs atomic batches");
    assert_unsupported("AcquireGroup", &status);

    // Renewing and releasing a group are batches too (refused before
    // anything is read, whatever the members).
    let members = || {
        ["g.a", "g.b"]
            .map(|name| GroupMember {
                name: name.into(),
                expected_revision: 1,
            })
            .to_vec()
    };
    let key = "k".repeat(16);
    let status = c
        .renew_group(RenewGroupRequest {
            members: members(),
            lease_key: key.clone(),
            ttl: Some(secs(10)),
        })
        .await
        .expect_err("a group renewal needs atomic batches");
    assert_unsupported("RenewGroup", &status);
    let status = c
        .release_group(ReleaseGroupRequest {
            members: members(),
            lease_key: key,
        })
        .await
        .expect_err("a group release needs atomic batches");
    assert_unsupported("ReleaseGroup", &status);

    // Defining a semaphore writes its definition and slots in one batch.
    let status = c
        .acquire(AcquireRequest {
            limit: 2,
            ..acquire_req("sem", "w", 10)
        })
        .await
        .expect_err("a semaphore needs atomic batches");
    assert_unsupported("Acquire with limit", &status);

    // Nothing was written by the refusals.
    let info = stream.info().await.unwrap();
    assert_eq!(
        info.state.last_sequence, before,
        "a refusal wrote to the bucket"
    );
    for name in ["delayed", "g.a", "g.b", "sem"] {
        let err = c
            .get_lease(GetLeaseRequest { name: name.into() })
            .await
            .expect_err("not held");
        assert_eq!(err.code(), Code::NotFound, "{name}: {err:?}");
    }

    // Plain leases still work, and so does an Acquire with a wait (it
    // polls instead of queueing: fair waiting needs batches too).
    let (held, _) = acquire(&mut c, acquire_req("plain", "a", 10)).await;
    assert!(held.revision > before);
    let (waited, _) = acquire(
        &mut c,
        AcquireRequest {
            wait: Some(secs(5)),
            ..acquire_req("waited", "a", 10)
        },
    )
    .await;
    assert_eq!(waited.holder, "a");
    let status = c
        .acquire(acquire_req("plain", "b", 10))
        .await
        .expect_err("held by a");
    assert_eq!(reason(&status), "LEASE_HELD");

    running.shutdown().await;
}
