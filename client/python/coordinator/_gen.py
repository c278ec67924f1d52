"""Makes the generated protobuf and gRPC code importable.

The generated modules live in the repository's ``gen/python`` directory and
import each other as ``coordinator.v1...`` and ``google.rpc...``. This module
finds that directory (``COORDINATOR_GEN_PYTHON`` overrides it), then:

* adds its ``coordinator`` directory to this package's ``__path__``, so that
  ``coordinator.v1`` (the generated code) resolves under this very package
  (which has no ``v1`` of its own);
* adds the directory to ``sys.path`` and, when ``google`` was already imported
  (as a namespace package or, on some installs, a regular one), to
  ``google.__path__``, so that ``google.rpc`` and ``google.protobuf`` both
  import.

The generated modules are imported without writing ``__pycache__`` into
``gen/`` (a generated tree must stay exactly what the generator wrote).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType
from typing import List

__all__ = ["GEN_DIR", "pb", "pb_grpc", "rules_pb2", "status_pb2", "error_details_pb2"]


def _find_gen_dir() -> Path:
    override = os.environ.get("COORDINATOR_GEN_PYTHON")
    candidates: List[Path] = []
    if override:
        candidates.append(Path(override))
    here = Path(__file__).resolve().parent  # client/python/coordinator
    candidates.append(here.parent.parent.parent / "gen" / "python")  # repository root
    candidates.append(here / "_generated")  # a vendored copy, if someone ships one
    for c in candidates:
        if (c / "coordinator" / "v1" / "coordinator_pb2.py").is_file():
            return c
    raise ImportError(
        "coordinator: cannot find the generated Python code (coordinator/v1/coordinator_pb2.py); "
        "looked in " + ", ".join(str(c) for c in candidates) + ". Set COORDINATOR_GEN_PYTHON to the gen/python directory."
    )


GEN_DIR: Path = _find_gen_dir()


def _setup_paths() -> None:
    gen = str(GEN_DIR)
    # coordinator.v1 -> gen/python/coordinator/v1, beside this package's modules.
    pkg = sys.modules[__name__.rpartition(".")[0]]
    coord_dir = str(GEN_DIR / "coordinator")
    if coord_dir not in list(pkg.__path__):
        pkg.__path__.append(coord_dir)  # type: ignore[attr-defined]
    # google.rpc -> gen/python/google/rpc; appended, so that an installed
    # google.protobuf always wins.
    if gen not in sys.path:
        sys.path.append(gen)
    google = sys.modules.get("google")
    if google is None:
        try:
            import google  # type: ignore[no-redef]  # noqa: F401
        except ImportError:
            google = None
        google = sys.modules.get("google")
    if google is not None and hasattr(google, "__path__"):
        gdir = str(GEN_DIR / "google")
        if gdir not in list(google.__path__):
            google.__path__.append(gdir)


def _import_generated() -> tuple:
    import importlib

    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        import google.protobuf  # noqa: F401  (must be the installed one)

        status = importlib.import_module("google.rpc.status_pb2")
        details = importlib.import_module("google.rpc.error_details_pb2")
        pbmod = importlib.import_module("coordinator.v1.coordinator_pb2")
        grpcmod = importlib.import_module("coordinator.v1.coordinator_pb2_grpc")
        rules = importlib.import_module("coordinator.v1.rules_pb2")
    finally:
        sys.dont_write_bytecode = saved
    return pbmod, grpcmod, rules, status, details


_setup_paths()
pb: ModuleType
pb_grpc: ModuleType
rules_pb2: ModuleType
status_pb2: ModuleType
error_details_pb2: ModuleType
pb, pb_grpc, rules_pb2, status_pb2, error_details_pb2 = _import_generated()
