"""The examples run as written (README.md shows how) against a real
coordinator, with the package the tests import."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import INSTALLED, REPO, Server

EXAMPLES = REPO / "client" / "python" / "examples"


@pytest.mark.parametrize(
    "example, expected",
    [
        ("lock_example.py", ["locked examples/nightly-report", "second lock refused: held by lock-example#",
                             "leading in term", "leader now: 10.0.0.2:8080", "observed: VACANT"]),
        ("asyncio_example.py", ["locked examples/async-report", "released: True", "waiting: 1", "handed over: token",
                                "leading in term", "leader now: 10.0.0.2:8080", "observed: PROCLAIMED",
                                "observed: VACANT"]),
    ],
)
def test_example_runs(server: Server, example: str, expected: list) -> None:
    if server.store != "memory":
        pytest.skip("once is enough: the examples do not depend on the store")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # Installed: the example must find the installed package by itself (it
    # falls back to the checkout only when `import coordinator` fails).
    p = subprocess.run([sys.executable, str(EXAMPLES / example), server.address], capture_output=True, text=True,
                       env=env, timeout=120, cwd=EXAMPLES if not INSTALLED else "/")
    assert p.returncode == 0, p.stdout + p.stderr
    for line in expected:
        assert line in p.stdout, f"{line!r} not in:\n{p.stdout}"
