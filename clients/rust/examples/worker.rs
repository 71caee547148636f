//! A worker that holds a lease and writes to a fenced store with its token.
//!
//! Run: `cargo run --example worker -- --addr ADDR --name NAME --holder HOLDER
//! --store DIR [--writes N]` (the flags every client's example worker takes,
//! so `clients/examples/two_workers.sh` drives them all).
//!
//! It acquires NAME (waiting for the current holder), then writes once every
//! 100 ms to the store in DIR, passing its fencing token, until it has made
//! N writes (default: forever), the lease is lost, or it gets SIGTERM
//! or SIGINT; it releases the lease on the way out. The store is a
//! directory: a write takes an exclusive flock on `DIR/lock`, reads
//! `DIR/fence` (decimal, missing = 0), refuses a token below it, else writes
//! the token to `DIR/fence` and appends `<token> <holder> <seq>` to
//! `DIR/log`. `TENURE_TOKEN`, if set, is sent as the bearer token.
//!
//! Exit codes: 0 done or stopped by a signal, 3 the lease was lost or the
//! store refused the token, 1 any other failure.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tenure_client::{AcquireOptions, Client, ClientConfig, Error};
use tokio::signal::unix::{signal, SignalKind};

/// The fenced store: a directory with `lock`, `fence` and `log`.
struct Store {
    /// The directory.
    dir: PathBuf,
}

impl Store {
    /// Writes `<token> <holder> <seq>` unless a newer token has written;
    /// returns false when the store refused the token.
    fn write(&self, token: u64, holder: &str, seq: u64) -> std::io::Result<bool> {
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join("lock"))?;
        // SAFETY: flock(2) on a file descriptor we own; released on close.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let fence = read_fence(&self.dir.join("fence"))?;
        if token < fence {
            return Ok(false);
        }
        std::fs::write(self.dir.join("fence"), token.to_string())?;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("log"))?;
        log.write_all(format!("{token} {holder} {seq}\n").as_bytes())?;
        log.sync_data()?;
        drop(lock);
        Ok(true)
    }
}

/// The fence (0 when the file is missing).
fn read_fence(path: &Path) -> std::io::Result<u64> {
    let mut text = String::new();
    match File::open(path) {
        Ok(mut f) => f.read_to_string(&mut text)?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    text.trim()
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Connects, retrying while the server is not up yet.
async fn connect(config: ClientConfig, holder: &str) -> Result<Client, Error> {
    let mut pause = Duration::from_millis(100);
    loop {
        match Client::connect_with(config.clone()).await {
            Err(err) if err.is_retryable() => {
                eprintln!("{holder}: {err}; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

/// Acquires with wait, retrying while the server is not ready yet.
async fn acquire(
    client: &Client,
    name: &str,
    holder: &str,
) -> Result<tenure_client::Session, Error> {
    let mut pause = Duration::from_millis(100);
    loop {
        let options = AcquireOptions::default().wait(Duration::from_secs(60));
        match client
            .acquire(name, holder, Duration::from_secs(3), options)
            .await
        {
            Err(err) if err.is_retryable() => {
                eprintln!("{holder}: {err}; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

/// The command line: `--addr`, `--name`, `--holder`, `--store`, `--writes`.
struct Args {
    /// The server, HOST:PORT or a URL.
    addr: String,
    /// The lease name.
    name: String,
    /// The holder identity written to the store.
    holder: String,
    /// The fenced store's directory.
    store: PathBuf,
    /// How many writes before a clean exit.
    writes: u64,
}

/// Parses the flags; `Err` is the usage message.
fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    const USAGE: &str =
        "usage: worker --addr ADDR --name NAME --holder HOLDER --store DIR [--writes N]";
    let (mut addr, mut name, mut holder, mut store) = (None, None, None, None);
    let mut writes = u64::MAX;
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(USAGE)?;
        match flag.as_str() {
            "--addr" => addr = Some(value),
            "--name" => name = Some(value),
            "--holder" => holder = Some(value),
            "--store" => store = Some(PathBuf::from(value)),
            "--writes" => writes = value.parse().map_err(|_| USAGE)?,
            _ => return Err(USAGE.to_string()),
        }
    }
    match (addr, name, holder, store) {
        (Some(addr), Some(name), Some(holder), Some(store)) => Ok(Args {
            addr,
            name,
            holder,
            store,
            writes,
        }),
        _ => Err(USAGE.to_string()),
    }
}

#[tokio::main]
async fn main() {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(usage) => {
            eprintln!("{usage}");
            std::process::exit(2);
        }
    };
    let store = Store {
        dir: args.store.clone(),
    };
    let code = match run(&args.addr, &args.name, &args.holder, &store, args.writes).await {
        Ok(code) => code,
        Err(err) => {
            eprintln!("{}: {err}", args.holder);
            1
        }
    };
    std::process::exit(code);
}

/// The worker; returns the exit code.
async fn run(
    addr: &str,
    name: &str,
    holder: &str,
    store: &Store,
    writes: u64,
) -> Result<i32, Box<dyn std::error::Error>> {
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut config = ClientConfig::new(addr);
    if let Ok(token) = std::env::var("TENURE_TOKEN") {
        config = config.bearer_token(token);
    }
    let client = tokio::select! {
        c = connect(config, holder) => c?,
        _ = term.recv() => return Ok(0),
        _ = int.recv() => return Ok(0),
    };
    let session = tokio::select! {
        s = acquire(&client, name, holder) => s?,
        _ = term.recv() => return Ok(0),
        _ = int.recv() => return Ok(0),
    };
    let token = session.fencing_token();
    println!("{holder}: acquired {name} with fencing token {token}");
    let mut code = 0;
    for seq in 0..writes {
        if !session.is_held() {
            eprintln!("{holder}: lost the lease: {:?}", session.loss());
            code = 3;
            break;
        }
        if !store.write(token, holder, seq)? {
            eprintln!("{holder}: the store refused fencing token {token}: a newer holder wrote");
            code = 3;
            break;
        }
        tokio::select! {
            _ = session.lost().cancelled() => {
                eprintln!("{holder}: lost the lease: {:?}", session.loss());
                code = 3;
                break;
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    let released = session.release().await?;
    println!("{holder}: released={released}");
    Ok(code)
}
