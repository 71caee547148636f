//! The processes of a run: nats-server nodes (one, or a 3-node JetStream
//! cluster on loopback), Tenure replicas and workload clients, each a real
//! child process so faults are real signals (SIGKILL, SIGSTOP, SIGCONT).
//!
//! Every process binds to 127.0.0.1 on a free port, keeps its files under
//! the run's folder, and is stopped by PID (and killed on drop).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use async_nats::jetstream;
use tenure::proto::lease_service_client::LeaseServiceClient;
use tenure::proto::{GetFenceKeysRequest, GetLeaseRequest};
use tokio::process::{Child, Command};
use tonic::transport::{Channel, Endpoint};

/// Sends `sig` to the process `pid` (one of our children).
pub fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) on a pid we spawned; no memory is involved.
    unsafe {
        libc::kill(pid as libc::pid_t, sig);
    }
}

/// A free TCP port on 127.0.0.1 (bound and released).
pub fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// Opens a log file for a child's stdout/stderr (appending, so a restarted
/// process keeps the log of its earlier life).
fn log_file(path: &Path) -> Result<Stdio, String> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map(Stdio::from)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))
}

/// Stops a child: SIGCONT (in case it is stopped), SIGTERM, then SIGKILL
/// after `grace`.
pub async fn stop_child(child: &mut Child, grace: Duration) {
    if let Some(pid) = child.id() {
        signal(pid, libc::SIGCONT);
        signal(pid, libc::SIGTERM);
        if tokio::time::timeout(grace, child.wait()).await.is_ok() {
            return;
        }
    }
    let _ = child.kill().await;
}

/// One nats-server node.
struct Node {
    /// Server name (`n1`...), as the stream's cluster info reports it.
    name: String,
    /// Client address (127.0.0.1, or its namespace's address).
    host: String,
    /// Client port.
    port: u16,
    /// The network namespace it runs in, if any.
    netns: Option<String>,
    /// Its config file.
    conf: PathBuf,
    /// Its log file.
    log: PathBuf,
    /// The running process (None while killed).
    child: Option<Child>,
}

/// One nats-server, or a JetStream cluster of several on loopback.
pub struct Nats {
    /// The binary.
    bin: PathBuf,
    /// The nodes.
    nodes: Vec<Node>,
}

impl Nats {
    /// Starts `n` nodes (a cluster when `n > 1`) with stores under `dir`,
    /// and waits until JetStream answers.
    pub async fn start(
        bin: &Path,
        dir: &Path,
        n: usize,
        netns: Option<&Netns>,
    ) -> Result<Nats, String> {
        // On loopback every node needs its own free ports; in network
        // namespaces every node has its own address and the standard ports.
        let hosts: Vec<(String, u16, u16)> = (0..n)
            .map(|i| match netns {
                Some(ns) => Ok((ns.ip(i), 4222, 6222)),
                None => Ok(("127.0.0.1".to_string(), free_port()?, free_port()?)),
            })
            .collect::<Result<_, String>>()?;
        let mut nodes = Vec::new();
        for (i, (host, port, cport)) in hosts.iter().enumerate() {
            let name = format!("n{}", i + 1);
            let store = dir.join(&name);
            std::fs::create_dir_all(&store).map_err(|e| e.to_string())?;
            let mut conf = format!(
                "server_name: {name}\nlisten: {host}:{port}\njetstream {{ store_dir: {:?} }}\n",
                store.display().to_string()
            );
            if n > 1 {
                let routes: Vec<String> = hosts
                    .iter()
                    .enumerate()
                    .filter(|(j, _)| *j != i)
                    .map(|(_, (h, _, c))| format!("nats-route://{h}:{c}"))
                    .collect();
                conf.push_str(&format!(
                    "cluster {{ name: tenure-safety, listen: {host}:{cport}, routes: [{}] }}\n",
                    routes.join(", ")
                ));
            }
            let conf_path = dir.join(format!("{name}.conf"));
            std::fs::write(&conf_path, conf).map_err(|e| e.to_string())?;
            nodes.push(Node {
                name: name.clone(),
                host: host.clone(),
                port: *port,
                netns: netns.map(|ns| ns.namespace(i)),
                conf: conf_path,
                log: dir.join(format!("{name}.log")),
                child: None,
            });
        }
        let mut nats = Nats {
            bin: bin.to_path_buf(),
            nodes,
        };
        for i in 0..n {
            nats.spawn(i)?;
        }
        for i in 0..n {
            nats.wait_port(i).await?;
        }
        nats.wait_jetstream().await?;
        Ok(nats)
    }

    /// Spawns node `i` from its config.
    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let node = &mut self.nodes[i];
        let mut cmd = match &node.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        let child = cmd
            .arg("-c")
            .arg(&node.conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file(&node.log)?)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.bin.display()))?;
        node.child = Some(child);
        Ok(())
    }

    /// Waits until node `i` accepts TCP connections.
    async fn wait_port(&self, i: usize) -> Result<(), String> {
        let addr = format!("{}:{}", self.nodes[i].host, self.nodes[i].port);
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(&addr).await.is_ok() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Err(format!(
            "nats-server {} did not listen on {addr} within 10s; see {}",
            self.nodes[i].name,
            self.nodes[i].log.display()
        ))
    }

    /// Waits until JetStream answers account queries (a meta leader exists).
    async fn wait_jetstream(&self) -> Result<(), String> {
        for _ in 0..60 {
            let ok = tokio::time::timeout(Duration::from_secs(2), async {
                let client = self.connect().await?;
                jetstream::new(client).query_account().await.ok()
            })
            .await;
            if matches!(ok, Ok(Some(_))) {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        Err("JetStream did not become ready within 30s".into())
    }

    /// A NATS client that knows every node.
    pub async fn connect(&self) -> Option<async_nats::Client> {
        let addrs: Vec<async_nats::ServerAddr> = self
            .nodes
            .iter()
            .filter_map(|n| format!("nats://{}:{}", n.host, n.port).parse().ok())
            .collect();
        async_nats::connect(addrs).await.ok()
    }

    /// Client URLs of every node, comma-separated.
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("nats://{}:{}", n.host, n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The client URL of node `i` alone.
    pub fn url(&self, i: usize) -> String {
        format!("nats://{}:{}", self.nodes[i].host, self.nodes[i].port)
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The pid of node `i`, if running.
    pub fn pid(&self, i: usize) -> Option<u32> {
        self.nodes[i].child.as_ref().and_then(|c| c.id())
    }

    /// SIGKILLs node `i`.
    pub async fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.nodes[i].child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts node `i` again with the same port and store, and waits until
    /// it listens.
    pub async fn restart(&mut self, i: usize) -> Result<(), String> {
        self.spawn(i)?;
        self.wait_port(i).await
    }

    /// The index of the node leading `stream`, if one answers within 2 s.
    pub async fn leader(&self, stream: &str) -> Option<usize> {
        let name = tokio::time::timeout(Duration::from_secs(2), async {
            let client = self.connect().await?;
            let mut s = jetstream::new(client).get_stream(stream).await.ok()?;
            s.info().await.ok()?.cluster.clone()?.leader
        })
        .await
        .ok()??;
        self.nodes.iter().position(|n| n.name == name)
    }

    /// Stops every node.
    pub async fn stop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                stop_child(&mut child, Duration::from_secs(5)).await;
            }
        }
    }
}

/// Network namespaces for the nodes of a cluster, each joined to a bridge
/// in the root namespace by a veth pair, so one node can be cut off from
/// everything (its link taken down) without a signal: a network partition.
///
/// Needs root (`ip netns`). Addresses are private ones inside namespaces
/// this run creates, in `10.213.<k>.0/24`; everything is removed on drop.
pub struct Netns {
    /// Name prefix of the namespaces, links and bridge (unique per run).
    tag: String,
    /// The subnet's third octet.
    octet: u8,
    /// Namespaces created.
    count: usize,
}

impl Netns {
    /// Creates `n` namespaces with one address each, reachable from here.
    pub fn setup(n: usize) -> Result<Netns, String> {
        let pid = std::process::id();
        let ns = Netns {
            tag: format!("tsf{}", pid % 100_000),
            octet: (pid % 250) as u8 + 1,
            count: n,
        };
        let br = ns.bridge();
        let mut cmds: Vec<Vec<String>> = vec![
            vec![
                "link".into(),
                "add".into(),
                br.clone(),
                "type".into(),
                "bridge".into(),
            ],
            vec![
                "addr".into(),
                "add".into(),
                format!("10.213.{}.1/24", ns.octet),
                "dev".into(),
                br.clone(),
            ],
            vec!["link".into(), "set".into(), br.clone(), "up".into()],
        ];
        for i in 0..n {
            let (name, veth) = (ns.namespace(i), ns.veth(i));
            cmds.push(vec!["netns".into(), "add".into(), name.clone()]);
            cmds.push(
                [
                    "link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", &name,
                ]
                .map(String::from)
                .to_vec(),
            );
            cmds.push(
                ["link", "set", &veth, "master", &br, "up"]
                    .map(String::from)
                    .to_vec(),
            );
            let addr = format!("{}/24", ns.ip(i));
            for c in [
                vec!["addr", "add", &addr, "dev", "eth0"],
                vec!["link", "set", "eth0", "up"],
                vec!["link", "set", "lo", "up"],
            ] {
                let mut full = vec![
                    "netns".to_string(),
                    "exec".into(),
                    name.clone(),
                    "ip".into(),
                ];
                full.extend(c.into_iter().map(String::from));
                cmds.push(full);
            }
        }
        for args in cmds {
            if let Err(err) = ip(&args) {
                drop(ns);
                return Err(err);
            }
        }
        Ok(ns)
    }

    /// The namespace of node `i`.
    pub fn namespace(&self, i: usize) -> String {
        format!("{}n{}", self.tag, i + 1)
    }

    /// The address of node `i`.
    pub fn ip(&self, i: usize) -> String {
        format!("10.213.{}.{}", self.octet, 11 + i)
    }

    /// The bridge.
    fn bridge(&self) -> String {
        format!("{}br", self.tag)
    }

    /// The root-side link of node `i`.
    fn veth(&self, i: usize) -> String {
        format!("{}v{}", self.tag, i + 1)
    }

    /// Cuts node `i` off from every other process (link down).
    pub fn isolate(&self, i: usize) -> Result<(), String> {
        ip(&["link", "set", &self.veth(i), "down"].map(String::from))
    }

    /// Joins node `i` again.
    pub fn heal(&self, i: usize) -> Result<(), String> {
        ip(&["link", "set", &self.veth(i), "up"].map(String::from))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for i in 0..self.count {
            let _ = ip(&["link", "del", &self.veth(i)].map(String::from));
            let _ = ip(&["netns", "del", &self.namespace(i)].map(String::from));
        }
        let _ = ip(&["link", "del", &self.bridge()].map(String::from));
    }
}

/// Runs `ip ARGS`.
fn ip(args: &[String]) -> Result<(), String> {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// One Tenure replica process.
pub struct Replica {
    /// Its gRPC address.
    pub addr: String,
    /// `tenure serve` arguments.
    args: Vec<String>,
    /// The binary.
    bin: PathBuf,
    /// Log file.
    log: PathBuf,
    /// Restarts so far (to name log files).
    starts: usize,
    /// Whether it runs with a test fault (`TENURE_TEST_FAULTS=1` set).
    test_fault: bool,
    /// The running process.
    child: Option<Child>,
}

impl Replica {
    /// Starts `tenure serve` on a free port over `nats_urls` (bucket
    /// `replicas`, `shards` when not 0), signing every grant's fence proof
    /// with `fence_key`, broken on purpose by `test_fault` when given
    /// (`--test-fault`, allowed by `TENURE_TEST_FAULTS=1`), and waits until
    /// it answers.
    pub async fn start(
        bin: &Path,
        dir: &Path,
        index: usize,
        nats_urls: &str,
        (replicas, shards): (usize, u32),
        fence_key: &Path,
        test_fault: Option<&str>,
    ) -> Result<Replica, String> {
        let addr = format!("127.0.0.1:{}", free_port()?);
        let mut args = vec![
            "serve".to_string(),
            "--listen".into(),
            addr.clone(),
            "--nats-url".into(),
            nats_urls.into(),
            "--replicas".into(),
            replicas.to_string(),
            "--log-format".into(),
            "json".into(),
            "--shutdown-grace".into(),
            "1s".into(),
            "--fence-signing-key".into(),
            fence_key.display().to_string(),
        ];
        if shards > 0 {
            args.extend(["--shards".to_string(), shards.to_string()]);
        }
        if let Some(fault) = test_fault {
            args.extend(["--test-fault".to_string(), fault.to_string()]);
        }
        let mut replica = Replica {
            addr,
            args,
            bin: bin.to_path_buf(),
            log: dir.join(format!("tenure-{index}")),
            starts: 0,
            test_fault: test_fault.is_some(),
            child: None,
        };
        replica.restart().await?;
        Ok(replica)
    }

    /// (Re)starts the process on the same address and waits until ready.
    pub async fn restart(&mut self) -> Result<(), String> {
        self.starts += 1;
        let log = self.log.with_extension(format!("{}.log", self.starts));
        let mut command = Command::new(&self.bin);
        command.env_remove("TENURE_TEST_FAULTS");
        if self.test_fault {
            command.env("TENURE_TEST_FAULTS", "1");
        }
        let child = command
            .args(&self.args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log_file(&log)?)
            .stderr(log_file(&log.with_extension("err"))?)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.bin.display()))?;
        self.child = Some(child);
        let client = lease_client(&self.addr)?;
        for _ in 0..300 {
            if ready(client.clone()).await {
                return Ok(());
            }
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Err(format!(
                    "tenure exited at start ({status}); see {}",
                    log.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!(
            "tenure on {} not ready within 30s; see {}",
            self.addr,
            log.display()
        ))
    }

    /// SIGKILLs the replica.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }

    /// Stops the replica (SIGTERM, then SIGKILL).
    pub async fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            stop_child(&mut child, Duration::from_secs(3)).await;
        }
    }
}

/// A lazily connected gRPC client for `addr`.
pub fn lease_client(addr: &str) -> Result<LeaseServiceClient<Channel>, String> {
    Endpoint::from_shared(format!("http://{addr}"))
        .map(|e| {
            LeaseServiceClient::new(
                e.connect_timeout(Duration::from_millis(300))
                    .timeout(Duration::from_secs(2))
                    .connect_lazy(),
            )
        })
        .map_err(|e| format!("bad address {addr}: {e}"))
}

/// Writes a new fence signing key to `path` with `tenure fence-keys
/// --generate` (replacing a key an earlier run left there).
pub fn generate_fence_key(tenure_bin: &Path, path: &Path) -> Result<(), String> {
    let _ = std::fs::remove_file(path);
    let out = std::process::Command::new(tenure_bin)
        .args(["fence-keys", "--generate"])
        .arg(path)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", tenure_bin.display()))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "tenure fence-keys --generate {}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The keyset (text form) Tenure at `addr` signs with, from GetFenceKeys,
/// as a store pins it. Fails when it signs no proofs.
pub async fn fence_keyset(addr: &str) -> Result<String, String> {
    let resp = lease_client(addr)?
        .get_fence_keys(GetFenceKeysRequest {})
        .await
        .map_err(|s| format!("GetFenceKeys on {addr}: {}", s.message()))?
        .into_inner();
    if resp.keys.is_empty() {
        return Err(format!(
            "tenure on {addr} signs no fence proofs (started without --fence-signing-key?)"
        ));
    }
    Ok(resp.keyset)
}

/// Whether a Tenure answers lease calls (any answer but UNAVAILABLE).
async fn ready(mut client: LeaseServiceClient<Channel>) -> bool {
    let req = GetLeaseRequest {
        name: "ready.probe".into(),
    };
    match client.get_lease(req).await {
        Ok(_) => true,
        Err(status) => !matches!(
            status.code(),
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::DeadlineExceeded
        ),
    }
}
