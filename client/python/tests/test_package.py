"""The installable package: what scripts/test-python.sh installs is what the
tests import, the wheel carries the generated code and nothing outside
coordinator/, and the generated google.rpc modules give way to an
installed google.rpc (googleapis-common-protos)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import Dict, List

import pytest

import coordinator
import coordinator.aio
from coordinator import _gen
from conftest import INSTALLED, REPO

CHECKOUT = REPO / "client" / "python"


def _env(pythonpath: List[str]) -> Dict[str, str]:
    """The environment of a fresh interpreter: the checkout's package only
    when these tests import it from the checkout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    paths = list(pythonpath) + ([] if INSTALLED else [str(CHECKOUT)])
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _run(code: str, cwd: Path, pythonpath: List[str] = []) -> str:
    p = subprocess.run([sys.executable, "-c", code], cwd=cwd, env=_env(pythonpath), capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.mark.skipif(not INSTALLED, reason="the tests import the checkout (scripts/test-python.sh installs the package)")
def test_the_tests_import_the_installed_package() -> None:
    assert sys.prefix != sys.base_prefix, "not running in a virtualenv"
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    for mod in (coordinator, coordinator.aio, coordinator.pb, coordinator.pb_grpc, _gen.status_pb2,
                _gen.error_details_pb2, _gen.rules_pb2):
        path = Path(mod.__file__).resolve()
        assert site in path.parents, f"{mod.__name__} is {path}, not in {site}"
        assert CHECKOUT not in path.parents, f"{mod.__name__} comes from the checkout: {path}"
    assert str(CHECKOUT) not in sys.path


@pytest.mark.skipif(not os.environ.get("COORDINATOR_TEST_WHEEL"), reason="COORDINATOR_TEST_WHEEL is not set")
def test_the_wheel_carries_the_generated_code_and_nothing_outside_the_package() -> None:
    wheel = zipfile.ZipFile(os.environ["COORDINATOR_TEST_WHEEL"])
    names = wheel.namelist()
    dist_info = [n for n in names if n.split("/")[0].endswith(".dist-info")]
    package = [n for n in names if n.startswith("coordinator/")]
    assert sorted(dist_info + package) == sorted(names), sorted(set(names) - set(dist_info) - set(package))
    for needed in ("coordinator/_generated/coordinator/v1/coordinator_pb2.py",
                   "coordinator/_generated/coordinator/v1/coordinator_pb2_grpc.py",
                   "coordinator/_generated/coordinator/v1/rules_pb2.py",
                   "coordinator/_generated/google/rpc/status_pb2.py",
                   "coordinator/_generated/google/rpc/error_details_pb2.py",
                   "coordinator/aio/__init__.py",
                   "coordinator/py.typed"):  # PEP 561: the package is typed
        assert needed in names
    metadata = wheel.read([n for n in dist_info if n.endswith("/METADATA")][0]).decode()
    assert "Requires-Dist: grpcio" in metadata and "Requires-Dist: protobuf" in metadata


def test_imports_from_any_directory(tmp_path: Path) -> None:
    out = _run(
        "import coordinator, coordinator.aio\n"
        "from coordinator import errors, _gen\n"
        "st = _gen.status_pb2.Status(code=9, message='m')\n"
        "info = _gen.error_details_pb2.ErrorInfo(reason='LEASE_NOT_HELD', domain='coordinator.v1')\n"
        "st.details.add().Pack(info)\n"
        "print(type(errors.from_status(st)).__name__, coordinator.__file__)\n",
        tmp_path,
    )
    kind, where = out.split()
    assert kind == "LeaseNotHeld"
    if INSTALLED:
        assert CHECKOUT not in Path(where).resolve().parents, where


@pytest.mark.parametrize("first", ["google.rpc", "coordinator"])
def test_an_installed_google_rpc_wins_over_the_generated_copy(tmp_path: Path, first: str) -> None:
    # A google.rpc installed elsewhere (as googleapis-common-protos installs
    # it), ahead of this package on the path.
    other = tmp_path / "site"
    (other / "google" / "rpc").mkdir(parents=True)
    for f in ("status_pb2.py", "error_details_pb2.py"):
        shutil.copy(_gen.GEN_DIR / "google" / "rpc" / f, other / "google" / "rpc" / f)
    imports = ["import google.rpc.status_pb2", "import coordinator"]
    if first == "coordinator":
        imports.reverse()
    out = _run(
        "\n".join(imports) + "\n"
        "import sys\n"
        "from coordinator import _gen\n"
        "assert _gen.status_pb2 is sys.modules['google.rpc.status_pb2']\n"
        "import coordinator.aio\n"
        "print(_gen.status_pb2.__file__)\n",
        tmp_path,
        [str(other)],
    )
    assert Path(out.strip()).resolve() == (other / "google" / "rpc" / "status_pb2.py").resolve()
