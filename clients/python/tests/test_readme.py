"""The README's example is examples/quickstart.py, verbatim, and it runs."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

import pytest

from conftest import WAIT
from tenure_client import Reason, TenureClient, TenureError
from tenure_server import TenureServer

CLIENT_DIR = Path(__file__).resolve().parents[1]
EXAMPLE = CLIENT_DIR / "examples" / "quickstart.py"


def test_readme_shows_the_example_verbatim() -> None:
    readme = (CLIENT_DIR / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    assert EXAMPLE.read_text() in blocks, "README example differs from examples/quickstart.py"


async def test_example_runs_against_tenure(server: TenureServer, client: TenureClient) -> None:
    env = dict(os.environ, TENURE_ADDR=server.target, PYTHONPATH=str(CLIENT_DIR / "src"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(EXAMPLE), env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), WAIT)
    assert proc.returncode == 0, err.decode()
    lines = out.decode().splitlines()
    assert [line.split(" with ")[0] for line in lines] == ["step 0", "step 1", "step 2"]
    token = int(lines[0].rsplit(" ", 1)[1])
    assert token > 0 and all(line.endswith(f" {token}") for line in lines)
    # The example released the lease on leaving its block.
    with pytest.raises(TenureError) as error:
        await client.get("jobs.nightly")
    assert error.value.reason is Reason.LEASE_NOT_FOUND
