"""The README examples in Python run as written, against a real
coordinator: README.md's of semaphores and read-write locks, and
client/python/README.md's of sessions."""

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


def test_readme_session_example(server) -> None:
    text = (REPO / "client" / "python" / "README.md").read_text()
    section = text.split("\n## Sessions\n", 1)[1].split("\n## ", 1)[0]
    script = section.split("/usr/bin/python3 - <<'EOF'\n", 1)[1].split("\nEOF\n", 1)[0]
    assert script.count('"127.0.0.1:7400"') == 2
    script = script.replace('"127.0.0.1:7400"', repr(server.address))
    out = subprocess.run([sys.executable, "-"], input=script, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "one session: True",
        "listed in it: [True, True, True]",
        "taken: True",
        "all ended: True SessionEnded",
        "free at once, a higher token: True",
        "default session: True",
    ]
