"""README.md's Python example of semaphores and read-write locks runs as
written, against a real coordinator."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO


def _section(title: str) -> str:
    text = (REPO / "README.md").read_text()
    _, rest = text.split("\n## " + title + "\n", 1)
    return rest.split("\n## ", 1)[0]


def test_readme_semaphore_example(server) -> None:
    section = _section("Semaphores and read-write locks")
    script = section.split("/usr/bin/python3 - <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    assert '"127.0.0.1:7400"' in script
    script = script.replace('"127.0.0.1:7400"', repr(server.address))
    out = subprocess.run([sys.executable, "-"], input=script, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "held: 5 tokens increase: True",
        "full: True",
        "writer refused beside a reader: True",
        "writer's token above the reader's: True",
    ]
