//! Holds a lease while doing some work. Run: `TENURE_ADDR=127.0.0.1:7419 cargo run --example quickstart`
use std::time::Duration;
use tenure_client::{AcquireOptions, Client, Error};

pub async fn run(addr: &str) -> Result<(), Error> {
    let client = Client::connect(addr).await?;
    let ttl = Duration::from_secs(5);
    let options = AcquireOptions::default();
    let session = client
        .acquire("jobs.nightly", "worker-1", ttl, options)
        .await?;
    for step in 0..3 {
        // The work, while the lease is renewed in the background.
        tokio::select! {
            _ = session.lost().cancelled() => break, // lost it: stop acting as holder
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
        let token = session.fencing_token(); // pass it with every downstream write
        println!("step {step} done with fencing token {token}");
    }
    session.release().await?; // the next holder can take it at once
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    run(&std::env::var("TENURE_ADDR").unwrap_or_else(|_| "127.0.0.1:7419".into())).await
}
