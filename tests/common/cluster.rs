//! A JetStream cluster of nats-server processes on loopback, for the tests
//! that need stream leaders on different nodes (sharded buckets) or a node
//! to die under a replicated bucket.
//!
//! Every node binds its client, route and monitoring ports to free ports on
//! 127.0.0.1, keeps its store in its own temporary folder, is named `n1`..
//! `nN` (the names stream cluster info reports as leaders) and tagged
//! `node:n1`.. (so a stream's `placement.tags` can pin it), and routes to
//! every other node. Start and restart wait for events, not for time: each
//! node's `/healthz` answering 200 (it is current with the JetStream meta
//! group) and `$JS.API.INFO` answering (a meta leader exists). Nodes are
//! stopped by PID on drop, and die with the test process (PDEATHSIG).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use async_nats::jetstream;
use tenure::find_binary;
use tokio::process::{Child, Command};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{free_port, within};

/// One nats-server node of a [`NatsCluster`].
struct ClusterNode {
    /// Server name (`n1`...).
    name: String,
    /// Client port on 127.0.0.1.
    port: u16,
    /// Monitoring (HTTP) port on 127.0.0.1, for `/healthz`.
    http_port: u16,
    /// Its configuration file.
    conf: PathBuf,
    /// Its log file.
    log: PathBuf,
    /// The running process (None while killed).
    child: Option<Child>,
}

/// `n` nats-server processes forming one JetStream cluster on 127.0.0.1.
pub struct NatsCluster {
    /// The nats-server binary.
    bin: PathBuf,
    /// The nodes, `n1` first.
    nodes: Vec<ClusterNode>,
    /// Stores, configs and logs (deleted on drop, after the nodes stop).
    dir: tempfile::TempDir,
}

/// How many times a cluster is started on fresh ports when a node finds
/// one of its ports taken.
const PORT_ATTEMPTS: usize = 5;

/// Why a node did not become healthy.
struct Unhealthy {
    /// It exited because a port it was given was taken meanwhile.
    port_taken: bool,
    /// What happened, with the end of its log.
    report: String,
}

/// Whether the monitoring listener at `addr` answers `GET /healthz` with 200
/// (HTTP/1.0, so the server closes the connection after its answer).
async fn healthz_ok(addr: SocketAddr) -> bool {
    let Ok(mut conn) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    if conn
        .write_all(b"GET /healthz HTTP/1.0\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut text = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(2), conn.read_to_string(&mut text)).await;
    text.lines().next().is_some_and(|l| l.contains(" 200 "))
}

impl NatsCluster {
    /// Starts an `n`-node cluster with default JetStream settings and waits
    /// until every node is current with the meta group.
    pub async fn start(n: usize) -> NatsCluster {
        NatsCluster::start_with(n, "").await
    }

    /// [`NatsCluster::start`] with `jetstream_extra` added inside every
    /// node's `jetstream { }` block (e.g. `max_file_store: 1G`).
    pub async fn start_with(n: usize, jetstream_extra: &str) -> NatsCluster {
        NatsCluster::start_some(n, n, jetstream_extra).await
    }

    /// An `n`-node cluster of which only the first `up` nodes are started
    /// (a quorum at least, so a meta leader is elected); the others know
    /// their routes and join when [`NatsCluster::restart`] starts them.
    pub async fn start_partly(n: usize, up: usize) -> NatsCluster {
        assert!(up > n / 2, "{up} of {n} nodes cannot elect a meta leader");
        NatsCluster::start_some(n, up, "").await
    }

    /// Configures `n` nodes and starts the first `up`. Ports come from
    /// below the kernel's ephemeral range ([`free_port`]), which no test
    /// beside this one is handed; should a node still find one taken (a
    /// process that picked it by number), it exits and the whole cluster
    /// is started again on fresh ports (up to [`PORT_ATTEMPTS`] times).
    async fn start_some(n: usize, up: usize, jetstream_extra: &str) -> NatsCluster {
        assert!(n >= 1, "a cluster has at least one node");
        'attempt: for attempt in 1..=PORT_ATTEMPTS {
            let mut cluster = NatsCluster::configure(n, jetstream_extra);
            for i in 0..up {
                cluster.spawn(i);
            }
            for i in 0..up {
                match cluster.healthy(i).await {
                    Ok(()) => {}
                    // Dropping the cluster stops the nodes it started.
                    Err(e) if e.port_taken && attempt < PORT_ATTEMPTS => continue 'attempt,
                    Err(e) => panic!("{}", e.report),
                }
            }
            cluster.wait_meta_leader().await;
            return cluster;
        }
        unreachable!("the last attempt returns or panics")
    }

    /// `n` nodes configured on fresh ports, none started.
    fn configure(n: usize, jetstream_extra: &str) -> NatsCluster {
        let bin = find_binary(None).expect("nats-server (run scripts/tools.sh)");
        let dir = tempfile::tempdir().expect("temp dir");
        let ports: Vec<(u16, u16, u16)> = (0..n)
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        let mut nodes = Vec::new();
        for (i, (port, cport, http_port)) in ports.iter().enumerate() {
            let name = format!("n{}", i + 1);
            let store = dir.path().join(&name);
            std::fs::create_dir_all(&store).unwrap();
            let routes: Vec<String> = ports
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, (_, c, _))| format!("nats-route://127.0.0.1:{c}"))
                .collect();
            let conf = format!(
                "server_name: {name}\n\
                 listen: 127.0.0.1:{port}\n\
                 http: 127.0.0.1:{http_port}\n\
                 server_tags: [\"node:{name}\"]\n\
                 jetstream {{ store_dir: {store:?}\n{jetstream_extra}\n}}\n\
                 cluster {{ name: tenure-test, listen: 127.0.0.1:{cport}, routes: [{}] }}\n",
                routes.join(", "),
                store = store.display().to_string(),
            );
            let conf_path = dir.path().join(format!("{name}.conf"));
            std::fs::write(&conf_path, conf).unwrap();
            nodes.push(ClusterNode {
                log: dir.path().join(format!("{name}.log")),
                name,
                port: *port,
                http_port: *http_port,
                conf: conf_path,
                child: None,
            });
        }
        NatsCluster { bin, nodes, dir }
    }

    /// Spawns node `i` from its configuration file.
    fn spawn(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let mut command = Command::new(&self.bin);
        command
            .arg("-c")
            .arg(&node.conf)
            .arg("-l")
            .arg(&node.log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        // If the test process dies without unwinding, take the node with it.
        // SAFETY: prctl is async-signal-safe and touches only the child.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        node.child = Some(command.spawn().expect("start nats-server"));
    }

    /// Waits (at most 30 s) until node `i` answers `/healthz` with 200: it
    /// listens, and JetStream on it is current with the meta leader. Fails
    /// with the end of the node's log if it exits or never gets there.
    async fn wait_healthy(&mut self, i: usize) {
        if let Err(e) = self.healthy(i).await {
            panic!("{}", e.report);
        }
    }

    /// [`NatsCluster::wait_healthy`], saying why not instead of failing.
    async fn healthy(&mut self, i: usize) -> Result<(), Unhealthy> {
        let addr: SocketAddr = format!("127.0.0.1:{}", self.nodes[i].http_port)
            .parse()
            .unwrap();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if healthz_ok(addr).await {
                return Ok(());
            }
            let node = &mut self.nodes[i];
            let exited = node
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || tokio::time::Instant::now() > deadline {
                let log = std::fs::read_to_string(&node.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(15).collect();
                return Err(Unhealthy {
                    port_taken: exited.is_some() && log.contains("address already in use"),
                    report: format!(
                        "nats-server {} not healthy within 30s (exit: {exited:?}); its log ends:\n{}",
                        node.name,
                        tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                    ),
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `$JS.API.INFO` answers: only the meta leader replies in
    /// a cluster, so an answer means JetStream can create streams.
    async fn wait_meta_leader(&self) {
        let client = self.client().await;
        let js = jetstream::new(client);
        within("a JetStream meta leader", async {
            while !matches!(
                tokio::time::timeout(Duration::from_secs(2), js.query_account()).await,
                Ok(Ok(_))
            ) {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
    }

    /// Client URLs of every node, comma-separated (for `--nats-url`).
    pub fn urls(&self) -> String {
        (0..self.nodes.len())
            .map(|i| self.url(i))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The client URL of node `i` alone.
    pub fn url(&self, i: usize) -> String {
        format!("nats://127.0.0.1:{}", self.nodes[i].port)
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The server name of node `i` (`n1`...).
    pub fn name(&self, i: usize) -> &str {
        &self.nodes[i].name
    }

    /// The index of the node called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The folder holding the nodes' stores, configs and logs.
    pub fn dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// A NATS client that knows every node (and fails over between them).
    pub async fn client(&self) -> async_nats::Client {
        let addrs: Vec<async_nats::ServerAddr> = (0..self.nodes.len())
            .filter(|i| self.nodes[*i].child.is_some())
            .map(|i| self.url(i).parse().unwrap())
            .collect();
        async_nats::connect(addrs)
            .await
            .expect("connect to the cluster")
    }

    /// A JetStream context over [`NatsCluster::client`].
    pub async fn jetstream(&self) -> jetstream::Context {
        jetstream::new(self.client().await)
    }

    /// The server name of the node leading `stream` now, if it has one.
    pub async fn leader(&self, js: &jetstream::Context, stream: &str) -> Option<String> {
        let mut s = js.get_stream(stream).await.ok()?;
        s.info().await.ok()?.cluster.clone()?.leader
    }

    /// The pid of node `i`, if it runs.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].child.as_ref().and_then(|c| c.id())
    }

    /// SIGKILLs node `i` (by its PID) and reaps it.
    pub async fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts node `i` (again: with the same ports and store), and waits
    /// until it is current with the meta group.
    pub async fn restart(&mut self, i: usize) {
        assert!(self.nodes[i].child.is_none(), "node {i} still runs");
        self.spawn(i);
        self.wait_healthy(i).await;
        self.wait_meta_leader().await;
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(child) = node.child.as_mut() {
                // SIGKILL by PID; the tokio runtime reaps it.
                let _ = child.start_kill();
            }
        }
    }
}
