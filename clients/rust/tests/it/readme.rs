//! The README's example is `examples/quickstart.rs`, verbatim, and it runs.

#[allow(dead_code)]
#[path = "../../examples/quickstart.rs"]
mod quickstart;

use crate::common::{expect_event, Server};
use tenure_client::{EventType, Reason};

const BEGIN: &str = "<!-- begin examples/quickstart.rs -->\n```rust\n";
const END: &str = "```\n<!-- end examples/quickstart.rs -->";

#[test]
fn the_readme_shows_the_example_verbatim() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let example = std::fs::read_to_string(dir.join("examples/quickstart.rs")).unwrap();
    let start = readme.find(BEGIN).expect("README begin marker") + BEGIN.len();
    let len = readme[start..].find(END).expect("README end marker");
    assert_eq!(
        &readme[start..start + len],
        example,
        "README.md's example differs from examples/quickstart.rs"
    );
}

#[tokio::test]
async fn the_example_runs_against_tenure() {
    let server = Server::start().await;
    let client = server.client().await;
    let mut watch = client.watch("jobs.nightly").await.unwrap();
    expect_event(&mut watch, EventType::SnapshotComplete).await;

    quickstart::run(&server.addr()).await.unwrap();

    let acquired = expect_event(&mut watch, EventType::Acquired).await;
    assert_eq!(acquired.holder, "worker-1");
    let released = expect_event(&mut watch, EventType::Released).await;
    assert_eq!(released.fencing_token, acquired.fencing_token);
    let err = client.get("jobs.nightly").await.unwrap_err();
    assert_eq!(err.reason(), Reason::LeaseNotFound);
}
