"""Starts a real Tenure server (with its own nats-server) for the tests.

`TENURE_BIN` (default: target/debug/tenure in the repo) and `NATS_SERVER`
(default: .tools/bin/nats-server in the repo) choose the binaries.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional

import grpc

from tenure_client import lease_pb2, lease_pb2_grpc
from tenure_client._errors import Reason, TenureError

REPO = Path(__file__).resolve().parents[3]
READY_TIMEOUT = 30.0
#: Starts of Tenure on a fresh free port when the last one was taken first.
_START_ATTEMPTS = 3
STOP_GRACE = 8.0


def _binary(env: str, default: Path) -> str:
    path = Path(os.environ.get(env) or default)
    if not path.is_absolute():
        path = REPO / path
    if not path.is_file():
        raise RuntimeError(
            f"{path} not found (set {env}); build with `cargo build` and run scripts/tools.sh"
        )
    return str(path)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TenureServer:
    """One `tenure serve` process on 127.0.0.1 with a fresh data dir."""

    def __init__(
        self,
        extra_args: tuple[str, ...] = (),
        ca: Optional[bytes] = None,
        *,
        nats_url: Optional[str] = None,
        port: int = 0,
    ) -> None:
        """`nats_url`: use that NATS (several servers can share its bucket,
        and it outlives them) instead of starting one; `port`: listen there
        (e.g. a new server on the port of a killed one) instead of a free
        port."""
        self.extra_args = extra_args
        self.nats_url = nats_url
        self.fixed_port = port
        self.ca = ca
        self.tenure = _binary("TENURE_BIN", Path("target/debug/tenure"))
        self.nats = _binary("NATS_SERVER", Path(".tools/bin/nats-server"))
        self.data_dir = tempfile.mkdtemp(prefix="tenure-py-")
        self.log_path = os.path.join(self.data_dir, "tenure.log")
        self.proc: Optional[subprocess.Popen] = None
        self.port = 0

    @property
    def target(self) -> str:
        """The server's gRPC address."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> "TenureServer":
        """Starts the server and waits until it answers (bounded).

        A free port can be taken before Tenure binds it (by the nats-server
        it starts, which picks its own free port): Tenure then exits with
        "Address already in use" and is started again on another free port,
        at most three times. Any other failure, or a taken fixed port, is
        raised at once with the log."""
        for attempt in range(1, _START_ATTEMPTS + 1):
            self.port = self.fixed_port or _free_port()
            store = tempfile.mkdtemp(dir=self.data_dir, prefix="data-")
            # Each attempt appends to the one log: remember where it starts.
            start_of_attempt = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [
                        self.tenure, "serve",
                        "--listen", self.target,
                        "--data-dir", store,
                        *(
                            ("--nats-url", self.nats_url)
                            if self.nats_url
                            else ("--nats-server", self.nats)
                        ),
                        "--log-format", "json",
                        *self.extra_args,
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,  # its own group: tenure and its nats-server
                )
            if self._wait_ready():
                return self
            self.stop()
            with open(self.log_path, "rb") as log:
                log.seek(start_of_attempt)
                port_taken = b"Address already in use" in log.read()
            if not port_taken or self.fixed_port:
                break
        raise RuntimeError(
            f"tenure did not become ready (attempt {attempt} of {_START_ATTEMPTS}); "
            f"log:\n{self.log_tail()}"
        )

    def _wait_ready(self) -> bool:
        """Retries GetLease on an unused name until the server answers
        LEASE_NOT_FOUND; False if the process exits first."""
        deadline = time.monotonic() + READY_TIMEOUT
        channel = (
            grpc.secure_channel(self.target, grpc.ssl_channel_credentials(self.ca))
            if self.ca is not None
            else grpc.insecure_channel(self.target)
        )
        with channel:
            stub = lease_pb2_grpc.LeaseServiceStub(channel)
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    return False
                try:
                    stub.GetLease(lease_pb2.GetLeaseRequest(name="readiness.probe"), timeout=1)
                    return True
                except grpc.RpcError as err:
                    # Any Tenure answer (LEASE_NOT_FOUND, or UNAUTHENTICATED
                    # with auth on) means it is serving.
                    if TenureError.from_rpc_error(err).reason is not Reason.ERROR_REASON_UNSPECIFIED:
                        return True
                # Not answering yet: the wait is the retry interval of a
                # bounded readiness poll (there is no event to await).
                time.sleep(0.1)
        raise RuntimeError(f"tenure not ready after {READY_TIMEOUT}s; log:\n{self.log_tail()}")

    def stop(self, sig: int = signal.SIGTERM) -> Optional[int]:
        """Sends `sig`, waits for the exit (SIGKILL to the group after a
        grace period) and returns the exit code."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return proc.returncode

    def cleanup(self) -> None:
        """Stops the server and removes its data dir."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-lines:]).decode(errors="replace")
        except OSError:
            return "(no log)"


class NatsServer:
    """A nats-server with JetStream on a free port and a temp store, for
    Tenure servers started with ``nats_url``."""

    def __init__(self) -> None:
        self.store = tempfile.mkdtemp(prefix="nats-py-")
        self.port = _free_port()
        self.proc = subprocess.Popen(
            [
                _binary("NATS_SERVER", Path(".tools/bin/nats-server")),
                "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", self.store,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.cleanup()
                    raise RuntimeError("nats-server did not start listening")
                time.sleep(0.05)  # readiness probe interval

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def cleanup(self) -> None:
        self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.store, ignore_errors=True)
