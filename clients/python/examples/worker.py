"""Tenure example worker (synchronous API).

Acquires a lease (waiting while another worker holds it), then writes to a
fenced store with its fencing token in a loop until the lease is lost, the
store refuses the token, or SIGTERM/SIGINT arrives, and releases on the way
out.

The fenced store is a directory: a write takes an exclusive flock on
<dir>/lock, reads <dir>/fence (decimal, missing = 0), refuses a token below
it, else writes fence=token and appends "<token> <holder> <seq>" to
<dir>/log.

    python worker.py --addr 127.0.0.1:7419 --name jobs.report --holder w1 --store /tmp/store

TENURE_TOKEN sends a bearer token; --ca dials TLS.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import signal
import socket
import threading
import time
from pathlib import Path

from tenure_client import Reason, TenureError
from tenure_client.sync import TenureClient


class StaleToken(Exception):
    """The store has seen a newer holder's token."""


def write(store: Path, token: int, holder: str, seq: int) -> None:
    """One fenced write to the store directory."""
    with open(store / "lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            fence_file = store / "fence"
            fence = int(fence_file.read_text().strip() or 0) if fence_file.exists() else 0
            if token < fence:
                raise StaleToken(f"token {token} < fence {fence}")
            fence_file.write_text(str(token))
            with open(store / "log", "a") as log:
                log.write(f"{token} {holder} {seq}\n")
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default=os.environ.get("TENURE_ADDR", "127.0.0.1:7419"))
    parser.add_argument("--name", default="jobs.example")
    parser.add_argument("--holder", default=f"{socket.gethostname()}-{os.getpid()}")
    parser.add_argument("--store", required=True, type=Path)
    parser.add_argument("--ttl", type=float, default=2.0)
    parser.add_argument("--every", type=float, default=0.05, help="seconds between writes")
    parser.add_argument("--ca", help="CA file: dial with TLS")
    args = parser.parse_args()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    with TenureClient(args.addr, token=os.environ.get("TENURE_TOKEN") or None, ca=args.ca) as client:
        while not stop.is_set():
            try:
                lease = client.acquire(args.name, args.holder, ttl=args.ttl, wait=30)
                break
            except TenureError as err:
                if err.reason is not Reason.LEASE_HELD and not err.retryable:
                    raise
                stop.wait(0.2)  # retry pause
        else:
            return  # stopped while waiting: nothing held
        print(f"acquired {args.name} token {lease.fencing_token}", flush=True)
        try:
            seq = 0
            while lease.is_held() and not stop.is_set():
                seq += 1
                try:
                    write(args.store, lease.fencing_token, args.holder, seq)
                except StaleToken as err:
                    print(f"store refused: {err}", flush=True)
                    break
                stop.wait(args.every)
            print("signalled: stopping" if stop.is_set() else f"lost: {lease.lost_cause}", flush=True)
        finally:
            print(f"released={str(lease.release()).lower()}", flush=True)


if __name__ == "__main__":
    main()
