"""What the sync and the asyncio Client share about connecting: the checks
of their settings, the channel options, the credentials. Pure: nothing here
opens a connection."""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple, Union

import grpc

from ._rules import MAX_IDENTITY_BYTES

PEM = Union[bytes, str, "os.PathLike[str]"]
Metadata = Optional[Tuple[Tuple[str, str], ...]]


def read_pem(v: Optional[PEM]) -> Optional[bytes]:
    """PEM bytes from bytes, PEM text or a file path."""
    if v is None:
        return None
    if isinstance(v, bytes):
        return v
    s = os.fspath(v)
    if s.lstrip().startswith("-----BEGIN"):
        return s.encode()
    return Path(s).read_bytes()


def default_identity() -> str:
    """The host name, the process id and a random suffix."""
    host = (socket.gethostname() or "unknown")[:64]
    return f"{host}-{os.getpid()}-{secrets.token_hex(4)}"


def check_settings(holder: Optional[str], ttl: float, token: Optional[str], use_tls: bool,
                   insecure_token: bool) -> str:
    """Checks a Client's settings before anything connects; returns its
    identity (``holder``, or a default one). Raises ValueError."""
    identity = holder if holder is not None else default_identity()
    if not identity or len(identity.encode("utf-8")) > MAX_IDENTITY_BYTES:
        raise ValueError(f"coordinator: holder must be 1 to {MAX_IDENTITY_BYTES} bytes")
    if not identity.isprintable():
        raise ValueError("coordinator: holder contains unprintable characters")
    if ttl <= 0:
        raise ValueError(f"coordinator: ttl {ttl} is not positive")
    if token is not None and token == "":
        raise ValueError("coordinator: the bearer token is empty")
    if token and not use_tls and not insecure_token:
        raise ValueError(
            "coordinator: a bearer token is not sent over a plaintext connection, where anyone on the path "
            "can read it: connect with tls=True, or pass insecure_token=True on loopback and in tests"
        )
    return identity


def channel_options(server_name: Optional[str], options: Optional[Sequence[Tuple[str, Any]]]) -> List[Tuple[str, Any]]:
    """The gRPC channel options of a Client, then the caller's ``options``."""
    opts: List[Tuple[str, Any]] = [
        # A lease client must reconnect soon after the coordinator is
        # back: gRPC's default backoff grows to two minutes.
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 3000),
        # gRPC core's name for the minimum connect timeout (as the Go
        # SDK's MinConnectTimeout): a handshake on a loaded machine may
        # take a while.
        ("grpc.min_reconnect_backoff_ms", 5000),
        # Notice a dead connection (the coordinator allows pings every 5s).
        ("grpc.keepalive_time_ms", 10000),
        ("grpc.keepalive_timeout_ms", 5000),
    ]
    if server_name:
        opts.append(("grpc.ssl_target_name_override", server_name))
    opts.extend(options or [])
    return opts


def tls_credentials(root_certificates: Optional[PEM], private_key: Optional[PEM], certificate_chain: Optional[PEM],
                    token: Optional[str]) -> grpc.ChannelCredentials:
    """TLS channel credentials, with the bearer token as call credentials."""
    creds = grpc.ssl_channel_credentials(
        root_certificates=read_pem(root_certificates),
        private_key=read_pem(private_key),
        certificate_chain=read_pem(certificate_chain),
    )
    if token:
        creds = grpc.composite_channel_credentials(creds, grpc.access_token_call_credentials(token))
    return creds


def plaintext_metadata(token: Optional[str]) -> Metadata:
    """The call metadata that carries the bearer token over plaintext."""
    return (("authorization", f"Bearer {token}"),) if token else None
