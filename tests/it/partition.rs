//! A NATS server that goes silent without closing the connection (a network
//! partition, a frozen VM): Tenure notices within seconds and reports
//! NOT_SERVING, instead of waiting out async-nats's default 60 s ping
//! interval (three missed pings: up to three minutes of timeouts).

use crate::common::*;
use tenure::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// A TCP proxy to 127.0.0.1:`target` that black-holes traffic once
/// `frozen` is set: bytes in either direction are dropped and every socket
/// stays open, as across a partition. Returns the proxy's port.
async fn black_hole(target: u16, frozen: watch::Receiver<bool>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let Ok(outbound) = TcpStream::connect(("127.0.0.1", target)).await else {
                continue;
            };
            let (ri, wi) = inbound.into_split();
            let (ro, wo) = outbound.into_split();
            tokio::spawn(pump(ri, wo, frozen.clone()));
            tokio::spawn(pump(ro, wi, frozen.clone()));
        }
    });
    port
}

/// Copies `from` to `to`, dropping what arrives while frozen.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if !*frozen.borrow() && to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test]
async fn a_silent_nats_connection_is_dropped_within_seconds() {
    let nats = Nats::start().await;
    let (freeze, frozen) = watch::channel(false);
    let port = black_hole(nats.port, frozen).await;
    let url = format!("nats://127.0.0.1:{port}");
    let config = Config::for_nats(&url);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = tenure::start(&config, &url, listener)
        .await
        .expect("tenure starts through the proxy");
    let channel = Channel::from_shared(format!("http://{}", running.addr()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut statuses = HealthClient::new(channel)
        .watch(HealthCheckRequest {
            service: "tenure.v1.LeaseService".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let first = within("health", statuses.message()).await.unwrap().unwrap();
    assert_eq!(first.status, ServingStatus::Serving as i32);

    freeze.send(true).unwrap();
    // `within` allows 30 s: the default ping interval needed up to 180 s.
    // (Repeated SERVING updates may come first.)
    within("NOT_SERVING after the partition", async {
        while let Some(update) = statuses.message().await.unwrap() {
            if update.status == ServingStatus::NotServing as i32 {
                return;
            }
        }
        panic!("health stream ended");
    })
    .await;
    drop(statuses);
    running.shutdown().await;
}
