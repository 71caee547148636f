//! The server processes a benchmark run needs, each a separate OS process
//! like in production: nats-server (one node, or a 3-node JetStream
//! cluster on loopback for the shard workload), the `tenure` binary and
//! etcd, optionally
//! pinned with `taskset` to the servers' CPUs; and what `/proc` says about
//! them (RSS, CPU time).
//!
//! Every process binds to 127.0.0.1 on a free port with its data in a
//! temporary folder, and is stopped by its PID (SIGTERM, then SIGKILL) when
//! its handle is dropped or stopped.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// A result whose error is a message for the person running the bench.
pub type R<T> = Result<T, String>;

/// How long a server may take to accept clients.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// One running server process.
pub struct Server {
    /// What it is, for messages.
    pub what: &'static str,
    /// The port its clients use on 127.0.0.1.
    pub port: u16,
    /// The child process (its PID is the server's: `taskset` execs it).
    child: Child,
    /// Where its log goes.
    pub log: PathBuf,
}

impl Server {
    /// The server `what` just spawned as `child`, once its `port` accepts
    /// connections.
    async fn ready(what: &'static str, port: u16, child: Child, log: PathBuf) -> R<Server> {
        let mut server = Server {
            what,
            port,
            child,
            log,
        };
        wait_tcp(&mut server).await?;
        Ok(server)
    }

    /// A NATS client of this server (a nats-server on 127.0.0.1).
    pub async fn connect_nats(&self) -> R<async_nats::Client> {
        let url = format!("nats://127.0.0.1:{}", self.port);
        async_nats::connect(url.as_str())
            .await
            .map_err(|e| format!("NATS {url}: {e}"))
    }

    /// The process id, for `/proc` readings.
    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or_default()
    }

    /// Fails if the process has exited, pointing at its log.
    pub fn check_alive(&mut self) -> R<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(format!(
                "{} exited ({status}); see {}",
                self.what,
                self.log.display()
            )),
            Err(e) => Err(format!("{}: {e}", self.what)),
        }
    }

    /// Stops the process: SIGTERM, up to 5 s, then SIGKILL.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            // SAFETY: signalling our own child by its PID.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGTERM);
            }
            if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
                .await
                .is_err()
            {
                let _ = self.child.kill().await;
            }
        }
    }
}

/// How server processes are launched: optionally under `taskset -c CPUS`.
#[derive(Clone, Debug)]
pub struct Launcher {
    /// CPU list for `taskset -c`, or none.
    pub cpus: Option<String>,
}

impl Launcher {
    /// A command for `program`, prefixed with `taskset -c` when pinning.
    fn command(&self, program: &Path) -> Command {
        let mut cmd = match &self.cpus {
            Some(cpus) => {
                let mut c = Command::new("taskset");
                c.arg("-c").arg(cpus).arg(program);
                c
            }
            None => Command::new(program),
        };
        cmd.stdin(Stdio::null()).kill_on_drop(true);
        cmd
    }

    /// Spawns nats-server with the config file `conf`, logging to `log`.
    fn spawn_nats(&self, bin: &Path, conf: &Path, log: &Path) -> R<Child> {
        let mut cmd = self.command(bin);
        cmd.arg("-c").arg(conf).arg("-l").arg(log);
        cmd.stdout(Stdio::null()).stderr(Stdio::null());
        cmd.spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))
    }

    /// Starts nats-server with JetStream, its store in `dir`. `sync_always`
    /// makes JetStream fsync every write (`sync_interval: always`); otherwise
    /// the server default applies (fsync every 2 minutes).
    pub async fn nats(&self, bin: &Path, dir: &Path, sync_always: bool) -> R<Server> {
        let port = free_port()?;
        let store = dir.join("nats");
        std::fs::create_dir_all(&store).map_err(|e| format!("{}: {e}", store.display()))?;
        let conf = dir.join("nats.conf");
        let sync = if sync_always {
            "\n  sync_interval: always"
        } else {
            ""
        };
        std::fs::write(
            &conf,
            format!(
                "listen: 127.0.0.1:{port}\njetstream {{\n  store_dir: {:?}{sync}\n}}\n",
                store.display().to_string()
            ),
        )
        .map_err(|e| format!("{}: {e}", conf.display()))?;
        let log = dir.join("nats-server.log");
        let child = self.spawn_nats(bin, &conf, &log)?;
        Server::ready("nats-server", port, child, log).await
    }

    /// Starts a JetStream cluster of `n` nats-server nodes on 127.0.0.1,
    /// named `n1`..`n<n>`, each with its own free client and cluster ports,
    /// store and log under `dir/<name>`, routed to every other node; waits
    /// until every node listens and JetStream answers through the cluster
    /// (a meta leader is elected and knows all `n` peers).
    pub async fn nats_cluster(
        &self,
        bin: &Path,
        dir: &Path,
        n: usize,
        sync_always: bool,
    ) -> R<Cluster> {
        let ports: Vec<(u16, u16)> = (0..n)
            .map(|_| Ok((free_port()?, free_port()?)))
            .collect::<R<_>>()?;
        let mut nodes = Vec::new();
        for (i, (port, cport)) in ports.iter().enumerate() {
            let name = format!("n{}", i + 1);
            let store = dir.join(&name);
            std::fs::create_dir_all(&store).map_err(|e| format!("{}: {e}", store.display()))?;
            let sync = if sync_always {
                " sync_interval: always"
            } else {
                ""
            };
            let routes: Vec<String> = ports
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, (_, c))| format!("nats-route://127.0.0.1:{c}"))
                .collect();
            let conf = dir.join(format!("{name}.conf"));
            std::fs::write(
                &conf,
                format!(
                    "server_name: {name}\nserver_tags: [\"node:{name}\"]\nlisten: 127.0.0.1:{port}\njetstream {{ store_dir: {:?}{sync} }}\ncluster {{ name: tenure-bench, listen: 127.0.0.1:{cport}, routes: [{}] }}\n",
                    store.display().to_string(),
                    routes.join(", ")
                ),
            )
            .map_err(|e| format!("{}: {e}", conf.display()))?;
            let log = dir.join(format!("{name}.log"));
            let child = self.spawn_nats(bin, &conf, &log)?;
            nodes.push(Server {
                what: "nats-server (cluster node)",
                port: *port,
                child,
                log,
            });
        }
        let mut cluster = Cluster {
            names: (1..=n).map(|i| format!("n{i}")).collect(),
            nodes,
        };
        for node in cluster.nodes.iter_mut() {
            wait_tcp(node).await?;
        }
        cluster.wait_jetstream().await?;
        Ok(cluster)
    }

    /// Starts the `tenure` binary against `nats_url`, logging warnings only.
    /// Default settings, but one: every bench client is the same
    /// (anonymous) identity, so the per-identity watch-stream limit (10,000
    /// by default) is raised to the replica's (20,000); workload 5 opens
    /// 10,000 streams while the writer and earlier runs' streams close.
    pub async fn tenure(&self, bin: &Path, dir: &Path, nats_url: &str) -> R<Server> {
        self.tenure_with(bin, dir, nats_url, "tenure", &[]).await
    }

    /// [`Launcher::tenure`] with `extra` arguments after the defaults
    /// (e.g. `--bucket`, `--replicas`, `--shards`), logging to
    /// `dir/<name>.log`.
    pub async fn tenure_with(
        &self,
        bin: &Path,
        dir: &Path,
        nats_url: &str,
        name: &str,
        extra: &[String],
    ) -> R<Server> {
        let port = free_port()?;
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let mut cmd = self.command(bin);
        cmd.args(["serve", "--listen"])
            .arg(format!("127.0.0.1:{port}"))
            .arg("--nats-url")
            .arg(nats_url)
            .args(["--max-watch-streams-per-identity", "20000"])
            .args(extra);
        // The shared watcher idles 2 s (not 30 s) after its last
        // subscriber, unless `extra` says otherwise: a workload after one
        // that watches or waits (3, 4, 5, 8) then measures Tenure without
        // it, as a replica without watches runs (workload 5 measures it).
        if !extra.iter().any(|a| a == "--watcher-idle-timeout") {
            cmd.args(["--watcher-idle-timeout", "2s"]);
        }
        cmd.env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(file);
        let child = cmd.spawn().map_err(|e| {
            format!(
                "cannot start {}: {e} (build it: cargo build --release)",
                bin.display()
            )
        })?;
        Server::ready("tenure", port, child, log).await
    }

    /// Starts a single-node etcd on loopback, data in `dir`, optionally with
    /// `--unsafe-no-fsync`.
    pub async fn etcd(&self, bin: &Path, dir: &Path, no_fsync: bool) -> R<Server> {
        let port = free_port()?;
        let peer = free_port()?;
        let data = dir.join(if no_fsync { "etcd-nofsync" } else { "etcd" });
        let log = dir.join(if no_fsync {
            "etcd-nofsync.log"
        } else {
            "etcd.log"
        });
        let file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let client_url = format!("http://127.0.0.1:{port}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut cmd = self.command(bin);
        cmd.arg("--name")
            .arg("bench")
            .arg("--data-dir")
            .arg(&data)
            .arg("--listen-client-urls")
            .arg(&client_url)
            .arg("--advertise-client-urls")
            .arg(&client_url)
            .arg("--listen-peer-urls")
            .arg(&peer_url)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer_url)
            .arg("--initial-cluster")
            .arg(format!("bench={peer_url}"))
            .args([
                "--logger",
                "zap",
                "--log-outputs",
                "stderr",
                "--log-level",
                "warn",
            ])
            .stdout(Stdio::null())
            .stderr(file);
        if no_fsync {
            cmd.arg("--unsafe-no-fsync");
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let what = if no_fsync {
            "etcd --unsafe-no-fsync"
        } else {
            "etcd"
        };
        Server::ready(what, port, child, log).await
    }
}

/// A JetStream cluster on loopback, its nodes named `n1`..`n<n>` (the
/// names stream info reports as `cluster.leader`).
pub struct Cluster {
    /// The node processes, in name order.
    pub nodes: Vec<Server>,
    /// Their server names.
    pub names: Vec<String>,
}

impl Cluster {
    /// Client URLs of every node, comma-separated (a client picks one and
    /// fails over to the others).
    pub fn urls(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("nats://127.0.0.1:{}", n.port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Connects a client that knows every node (it picks one and fails
    /// over to the others).
    pub async fn connect(&self) -> R<async_nats::Client> {
        let addrs: Vec<async_nats::ServerAddr> = self
            .nodes
            .iter()
            .map(|n| {
                format!("nats://127.0.0.1:{}", n.port)
                    .parse()
                    .map_err(|e| format!("{e}"))
            })
            .collect::<R<_>>()?;
        async_nats::connect(addrs)
            .await
            .map_err(|e| format!("NATS cluster {}: {e}", self.urls()))
    }

    /// Waits until JetStream answers account queries through the cluster
    /// (so a meta leader exists) and the meta group has every node as a
    /// current peer, so that a stream of `n` replicas can be placed at
    /// once. Polls every 100 ms, up to [`READY_TIMEOUT`].
    async fn wait_jetstream(&mut self) -> R<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let want = self.nodes.len();
        let mut last;
        loop {
            for node in self.nodes.iter_mut() {
                node.check_alive()?;
            }
            let probe = tokio::time::timeout(Duration::from_secs(2), async {
                let client = self.connect().await?;
                // A stream of n replicas is placed only when the meta
                // leader sees n current peers: the direct test that a
                // replicated bucket can be created now.
                let js = async_nats::jetstream::new(client);
                js.query_account().await.map_err(|e| e.to_string())?;
                let probe = js
                    .create_stream(async_nats::jetstream::stream::Config {
                        name: "bench_ready_probe".into(),
                        subjects: vec!["bench.ready.probe".into()],
                        num_replicas: want,
                        storage: async_nats::jetstream::stream::StorageType::Memory,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| e.to_string())?;
                drop(probe);
                js.delete_stream("bench_ready_probe")
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<(), String>(())
            })
            .await;
            match probe {
                Ok(Ok(())) => return Ok(()),
                Ok(Err(e)) => last = e,
                Err(_) => last = "no answer within 2 s".into(),
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "the {want}-node JetStream cluster was not ready within {READY_TIMEOUT:?} ({last}); see {}",
                    self.nodes[0].log.display()
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Which node leads `stream` (stream info `cluster.leader`), if known.
    pub async fn leader(js: &async_nats::jetstream::Context, stream: &str) -> Option<String> {
        let mut s = js.get_stream(stream).await.ok()?;
        s.info().await.ok()?.cluster.clone()?.leader
    }

    /// Stops every node.
    pub async fn stop(self) {
        for node in self.nodes.into_iter().rev() {
            node.stop().await;
        }
    }
}

/// A port that was free a moment ago on 127.0.0.1.
pub fn free_port() -> R<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    l.local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("bind: {e}"))
}

/// Waits until the server accepts TCP connections on its port.
async fn wait_tcp(server: &mut Server) -> R<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", server.port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        server.check_alive()?;
        if Instant::now() > deadline {
            return Err(format!(
                "{} did not listen within {READY_TIMEOUT:?}; see {}",
                server.what,
                server.log.display()
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Resident set size of a process in bytes (`VmRSS`), 0 if unreadable.
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// User + system CPU time a process has used so far, from `/proc/<pid>/stat`.
pub fn cpu_time(pid: u32) -> Duration {
    let ticks = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // Fields after the command name (which may contain spaces).
            let rest = &s[s.rfind(')')? + 2..];
            let f: Vec<&str> = rest.split_whitespace().collect();
            // utime and stime are fields 14 and 15 of the full line: 11 and
            // 12 after the state field (index 0 here).
            Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_micros(ticks * 1_000_000 / hz)
}

/// Pins this process (and the threads it starts afterwards) to `cpus`
/// (a `taskset`-style list such as `1` or `2-3,5`).
pub fn pin_self(cpus: &str) -> R<()> {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET only write into it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        for cpu in parse_cpu_list(cpus)? {
            libc::CPU_SET(cpu, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(format!(
                "cannot pin to CPUs {cpus}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// Parses `1`, `0,2`, `2-3,5` into CPU numbers.
fn parse_cpu_list(list: &str) -> R<Vec<usize>> {
    let mut out = Vec::new();
    for part in list.split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("bad CPU list {list:?}: use e.g. 1 or 0,2 or 2-3");
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) =
                    (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                out.extend(a..=b);
            }
            None => out.push(part.parse().map_err(|_| bad())?),
        }
    }
    if out.is_empty() {
        return Err(format!("empty CPU list {list:?}"));
    }
    Ok(out)
}

/// Finds a program: the explicit path, then the candidates, then the PATH.
pub fn find_program(
    name: &str,
    explicit: Option<&Path>,
    candidates: &[PathBuf],
) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return p.is_file().then(|| p.to_path_buf());
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    candidates
        .iter()
        .cloned()
        .chain(on_path)
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CPU lists parse like taskset's.
    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("1").unwrap(), vec![1]);
        assert_eq!(parse_cpu_list("0,2-3").unwrap(), vec![0, 2, 3]);
        assert!(parse_cpu_list("x").is_err());
        assert!(parse_cpu_list("").is_err());
    }

    /// This process's own /proc readings are non-zero. The CPU time counts
    /// in clock ticks, and a loaded machine may deschedule a short busy loop
    /// for all of its wall time, so spin until a tick shows (10 s at most).
    #[test]
    fn proc_readings() {
        let me = std::process::id();
        assert!(rss_bytes(me) > 0);
        let start = Instant::now();
        while cpu_time(me) == Duration::ZERO && start.elapsed() < Duration::from_secs(10) {
            std::hint::black_box(0u64);
        }
        assert!(cpu_time(me) > Duration::ZERO);
    }
}
