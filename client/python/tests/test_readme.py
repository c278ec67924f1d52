"""The documentation's examples in Python run as written, against a real
coordinator: docs/semaphores.md's of semaphores and read-write locks, and
client/python/README.md's of sessions."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import List

from conftest import REPO


def _run_example(readme: Path, title: str, address: str) -> List[str]:
    """Runs the ``/usr/bin/python3 - <<'EOF'`` script of readme's section
    ``title`` from the repository's root, against the coordinator at
    address; returns its output's lines."""
    section = readme.read_text().split("\n## " + title + "\n", 1)[1].split("\n## ", 1)[0]
    script = section.split("/usr/bin/python3 - <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    assert '"127.0.0.1:7400"' in script
    script = script.replace('"127.0.0.1:7400"', repr(address))
    out = subprocess.run([sys.executable, "-"], input=script, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_readme_semaphore_example(server) -> None:
    assert _run_example(REPO / "docs" / "semaphores.md", "Python", server.address) == [
        "held: 5 tokens increase: True",
        "full: True",
        "writer refused beside a reader: True",
        "writer's token above the reader's: True",
    ]


def test_readme_session_example(server) -> None:
    assert _run_example(REPO / "client" / "python" / "README.md", "Sessions", server.address) == [
        "one session: True",
        "listed in it: [True, True, True]",
        "taken: True",
        "all ended: True SessionEnded",
        "free at once, a higher token: True",
        "default session: True",
    ]
