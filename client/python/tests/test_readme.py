"""The documentation's examples in Python run as written, against a real
coordinator: README.md's, docs/semaphores.md's of semaphores and read-write
locks, and client/python/README.md's of groups and sessions."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List

from conftest import INSTALLED, REPO

# The line a shell example starts its Python script with: /usr/bin/python3
# (the checkout's package, on sys.path by the script) or the virtualenv's
# python (the installed package).
_SCRIPT_START = re.compile(r"^\S*python3? - <<'EOF'\n", re.MULTILINE)


def _run_example(readme: Path, title: str, address: str) -> List[str]:
    """Runs the ``python - <<'EOF'`` script of readme's section ``title``
    from the repository's root, against the coordinator at address; returns
    its output's lines."""
    section = readme.read_text().split("\n## " + title + "\n", 1)[1].split("\n## ", 1)[0]
    start = _SCRIPT_START.search(section)
    assert start, f"no python script in {readme.name}'s {title}"
    script = section[start.end():].split("\nEOF\n", 1)[0]
    assert '"127.0.0.1:7400"' in script
    script = script.replace('"127.0.0.1:7400"', repr(address))
    env = dict(os.environ)
    if not INSTALLED:  # as the reader's virtualenv would have it
        env["PYTHONPATH"] = str(REPO / "client" / "python")
    out = subprocess.run([sys.executable, "-"], input=script, cwd=REPO, capture_output=True, text=True, timeout=60,
                         env=env)
    assert out.returncode == 0, out.stderr
    return out.stdout.splitlines()


def test_readme_front_page_example(server) -> None:
    lines = _run_example(REPO / "README.md", "Use it from Python", server.address)
    assert len(lines) == 2, lines
    assert re.fullmatch(r"locked; fencing token [0-9]+ valid: True", lines[0]), lines
    assert lines[1] == "released: True"


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


def test_readme_group_example(server) -> None:
    assert _run_example(REPO / "client" / "python" / "README.md", "Groups: several names at once", server.address) == [
        "none while bob is held: None False",
        "both, a token each: True True",
        "alice taken: True",
        "released together: True False",
    ]
