//! Starts and supervises a local nats-server for `tenure serve` without
//! `--nats-url`, and for the tests and benchmarks that need a real server.
//!
//! The server binds to 127.0.0.1 only, with JetStream on and its store under
//! the given folder. The first start takes a free port (`-p -1`) and reads it
//! from the ports file nats-server writes once it is ready; restarts reuse
//! that port so the NATS client reconnects by itself.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use tokio_util::sync::CancellationToken;

/// The nats-server release `scripts/tools.sh` installs.
pub const PINNED_VERSION: &str = "2.15.1";

/// What to tell a person whose machine lacks nats-server.
pub const INSTALL_HINT: &str =
    "install nats-server 2.11 or newer and put it on the PATH (in a checkout of Tenure, `scripts/tools.sh` installs it into .tools/bin), pass --nats-server PATH (TENURE_NATS_SERVER), or use --nats-url for an existing NATS";

/// Finds nats-server: the explicit path, then `.tools/bin/nats-server` in
/// this folder, then the PATH. A binary that still runs from this crate's
/// own build folder (tests, benchmarks, `cargo run`) also looks in the
/// crate's `.tools/bin`; a binary installed or copied elsewhere never looks
/// at a path of the machine it was built on.
pub fn find_binary(explicit: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = explicit {
        return if path.is_file() {
            Ok(path.to_path_buf())
        } else {
            Err(format!(
                "nats-server not found at {} (--nats-server): {INSTALL_HINT}",
                path.display()
            ))
        };
    }
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let in_build_tree = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.canonicalize().ok())
        .zip(crate_dir.canonicalize().ok())
        .is_some_and(|(exe, dir)| exe.starts_with(dir));
    let mut local = vec![PathBuf::from(".tools/bin/nats-server")];
    if in_build_tree {
        local.push(crate_dir.join(".tools/bin/nats-server"));
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("nats-server"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    local.into_iter().chain(on_path).find(|p| p.is_file()).ok_or_else(|| {
        format!(
            "nats-server not found in ./.tools/bin or on the PATH, and Tenure needs it to run a local NATS (no --nats-url given): {INSTALL_HINT}"
        )
    })
}

/// Checks that the binary is nats-server 2.11 or newer (per-message TTL).
pub async fn check_version(bin: &Path) -> Result<String, String> {
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .await
        .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let version = text.rsplit('v').next().unwrap_or_default().to_string();
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if (major, minor) < (2, 11) {
        return Err(format!(
            "{} is {text:?}; Tenure needs nats-server 2.11 or newer for per-lease TTL: {INSTALL_HINT}",
            bin.display()
        ));
    }
    Ok(version)
}

/// One running nats-server process.
pub struct NatsProcess {
    /// The client port on 127.0.0.1.
    pub port: u16,
    /// The child process.
    child: Child,
}

impl NatsProcess {
    /// Starts nats-server with JetStream, its store in `store_dir`, logging to
    /// `store_dir/nats-server.log`, on `port` (or a free one), and waits until
    /// it accepts clients.
    pub async fn spawn(
        bin: &Path,
        store_dir: &Path,
        port: Option<u16>,
    ) -> Result<NatsProcess, String> {
        NatsProcess::spawn_with_config(bin, store_dir, port, None).await
    }

    /// [`NatsProcess::spawn`], also reading the nats-server configuration
    /// file `config` (e.g. an `authorization` block); the address, port and
    /// store flags still come from the command line.
    pub async fn spawn_with_config(
        bin: &Path,
        store_dir: &Path,
        port: Option<u16>,
        config: Option<&Path>,
    ) -> Result<NatsProcess, String> {
        let ports_dir = store_dir.join("ports");
        std::fs::create_dir_all(&ports_dir)
            .map_err(|e| format!("cannot create {}: {e}", ports_dir.display()))?;
        let port_arg = port.map_or("-1".to_string(), |p| p.to_string());
        let mut command = Command::new(bin);
        if let Some(config) = config {
            command.arg("-c").arg(config);
        }
        command
            .args(["-a", "127.0.0.1", "-p", &port_arg, "-js", "-sd"])
            .arg(store_dir)
            .arg("--ports_file_dir")
            .arg(&ports_dir)
            .arg("-l")
            .arg(store_dir.join("nats-server.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        // If Tenure itself is killed (SIGKILL, OOM), take the server down
        // with it, or it would linger on the store the next start needs.
        // SAFETY: prctl is async-signal-safe and touches only the child.
        unsafe {
            command.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let pid = child.id().unwrap_or_default();
        let ports_file = ports_dir.join(format!(
            "{}_{pid}.ports",
            bin.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("nats-server")
        ));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(port) = read_client_port(&ports_file) {
                return Ok(NatsProcess { port, child });
            }
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "nats-server exited at start ({status}); see {}",
                    store_dir.join("nats-server.log").display()
                ));
            }
            if tokio::time::Instant::now() > deadline {
                let _ = child.start_kill();
                return Err("nats-server did not become ready within 20s".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The client URL.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// The process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Kills the server at once (SIGKILL) and reaps it.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// Stops the server cleanly (SIGTERM), killing it after 5 s.
    pub async fn stop(&mut self) {
        if let Some(pid) = self.child.id() {
            // SAFETY: sending a signal to our own child process by its pid.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGTERM);
            }
            if tokio::time::timeout(Duration::from_secs(5), self.child.wait())
                .await
                .is_ok()
            {
                return;
            }
        }
        self.kill().await;
    }

    /// Waits for the process to exit.
    async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.child.wait().await
    }
}

/// Reads the client port from a nats-server ports file, once it exists.
fn read_client_port(path: &Path) -> Option<u16> {
    let text = std::fs::read_to_string(path).ok()?;
    let json: serde_json::Value = serde_json::from_str(&text).ok()?;
    let url = json.get("nats")?.as_array()?.first()?.as_str()?;
    url.rsplit(':').next()?.parse().ok()
}

/// A local nats-server that is restarted if it dies, until stopped.
pub struct Supervised {
    /// The client URL.
    url: String,
    /// Tells the supervisor to stop the server.
    stop: CancellationToken,
    /// The supervisor task.
    task: JoinHandle<()>,
}

impl Supervised {
    /// Finds and checks the binary, starts the server with its store under
    /// `data_dir`, and supervises it.
    pub async fn start(bin: Option<&Path>, data_dir: &Path) -> Result<Supervised, String> {
        let bin = find_binary(bin)?;
        let version = check_version(&bin).await?;
        let store_dir = data_dir.join("nats");
        let mut process = NatsProcess::spawn(&bin, &store_dir, None).await?;
        let url = process.url();
        tracing::info!(
            url = %url,
            version = %version,
            store = %store_dir.display(),
            log = %store_dir.join("nats-server.log").display(),
            "started local nats-server"
        );
        let stop = CancellationToken::new();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stopped.cancelled() => {
                        process.stop().await;
                        return;
                    }
                    status = process.wait() => {
                        tracing::error!(?status, "local nats-server exited; restarting it");
                    }
                }
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if stopped.is_cancelled() {
                        return;
                    }
                    match NatsProcess::spawn(&bin, &store_dir, Some(process.port)).await {
                        Ok(p) => {
                            process = p;
                            tracing::info!(port = process.port, "local nats-server restarted");
                            break;
                        }
                        Err(err) => {
                            tracing::error!(%err, "cannot restart local nats-server; trying again")
                        }
                    }
                }
            }
        });
        Ok(Supervised { url, stop, task })
    }

    /// The client URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops the server and the supervisor.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}
