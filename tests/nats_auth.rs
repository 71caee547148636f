//! NATS authentication with an nkey seed file: Tenure connects to a
//! nats-server that only admits that nkey, and is refused without it.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use tenure::Config;

/// A nats-server that admits only `nkey_public`; killed on drop.
struct LockedNats {
    child: tokio::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl LockedNats {
    async fn start(nkey_public: &str) -> LockedNats {
        let dir = tempfile::tempdir().unwrap();
        let ports = dir.path().join("ports");
        std::fs::create_dir_all(&ports).unwrap();
        let conf = dir.path().join("nats.conf");
        std::fs::write(
            &conf,
            format!(
                "host: 127.0.0.1\nport: -1\njetstream {{ store_dir: {:?} }}\nauthorization {{ users = [ {{ nkey: {nkey_public} }} ] }}\n",
                dir.path().join("js")
            ),
        )
        .unwrap();
        let bin = tenure::find_binary(None).expect("nats-server");
        let child = tokio::process::Command::new(bin)
            .arg("-c")
            .arg(&conf)
            .arg("--ports_file_dir")
            .arg(&ports)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        // The server writes its client URL to a ports file once it is ready.
        let port = within("nats-server to be ready", async {
            loop {
                let found = std::fs::read_dir(&ports).unwrap().find_map(|e| {
                    let text = std::fs::read_to_string(e.ok()?.path()).ok()?;
                    let url = text.split("nats://").nth(1)?;
                    let port: String = url
                        .split(':')
                        .nth(1)?
                        .chars()
                        .take_while(char::is_ascii_digit)
                        .collect();
                    port.parse::<u16>().ok()
                });
                if let Some(port) = found {
                    return port;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        LockedNats {
            child,
            port,
            _dir: dir,
        }
    }

    fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }
}

impl Drop for LockedNats {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

#[tokio::test]
async fn nkey_seed_file_authenticates_to_nats() {
    let user = nkeys::KeyPair::new_user();
    let nats = LockedNats::start(&user.public_key()).await;
    let dir = tempfile::tempdir().unwrap();
    let seed_file = dir.path().join("tenure.nk");
    std::fs::write(&seed_file, user.seed().unwrap()).unwrap();

    // Without the nkey: refused.
    let config = Config::for_nats(&nats.url());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let Err(err) = tenure::start(&config, &nats.url(), listener).await else {
        panic!("connected to a locked NATS without credentials");
    };
    assert!(
        err.to_string().contains("cannot connect to NATS"),
        "{}",
        err
    );

    // With it: serves.
    let config = Config {
        nats_nkey_file: Some(seed_file),
        ..config
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let running = tenure::start(&config, &nats.url(), listener)
        .await
        .expect("connects with the nkey");
    let mut c = tenure::proto::lease_service_client::LeaseServiceClient::connect(format!(
        "http://{}",
        running.addr()
    ))
    .await
    .unwrap();
    acquire(&mut c, acquire_req("nkey.ok", "w", 10)).await;
    running.shutdown().await;
}
