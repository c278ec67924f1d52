"""Makes the generated protobuf and gRPC code importable.

The generated modules are part of this package, in ``_generated/`` (buf
writes them there: buf.gen.yaml), and import each other by their proto paths,
as ``coordinator.v1...`` and ``google.rpc...``. This module:

* adds ``_generated/coordinator`` to this package's ``__path__``, so that
  ``coordinator.v1`` (the generated code) resolves under this very package
  (which has no ``v1`` of its own);
* appends ``_generated`` to ``sys.path`` and, once ``google`` is imported
  (protobuf's namespace package or, on some installs, a regular one), to
  ``google.__path__``, so that ``google.rpc`` imports. Appended: an installed
  ``googleapis-common-protos`` (the full ``google.rpc``) and protobuf's own
  ``google.protobuf`` always win, and nothing named ``google`` is installed
  by this package at the top level of site-packages.

The generated modules are imported without writing ``__pycache__`` beside
them (in a checkout, ``_generated`` must stay exactly what buf wrote).
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Tuple

__all__ = ["GEN_DIR", "pb", "pb_grpc", "rules_pb2", "status_pb2", "error_details_pb2"]

GEN_DIR: Path = Path(__file__).resolve().parent / "_generated"
if not (GEN_DIR / "coordinator" / "v1" / "coordinator_pb2.py").is_file():
    raise ImportError(f"coordinator: the generated code is missing from {GEN_DIR} (run make generate)")


def _setup_paths() -> None:
    gen = str(GEN_DIR)
    # coordinator.v1 -> _generated/coordinator/v1, beside this package's modules.
    pkg = sys.modules[__name__.rpartition(".")[0]]
    coord_dir = str(GEN_DIR / "coordinator")
    if coord_dir not in list(pkg.__path__):
        pkg.__path__.append(coord_dir)  # type: ignore[attr-defined]
    # google.rpc -> _generated/google/rpc; appended, so that an installed
    # google.protobuf (and google.rpc) always wins.
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


def _import_generated() -> Tuple[ModuleType, ...]:
    import importlib

    saved = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        importlib.import_module("google.protobuf")  # first: the installed one

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
