"""Fixtures: a coordinator binary built once, real coordinator processes on
free ports (memory store always; Redis too when COORDINATOR_TEST_REDIS_URL is
set, the redis variants skipped otherwise), private redis-servers, and
Clients that are closed at teardown."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Dict, Iterator, List, NoReturn, Optional

import pytest

sys.dont_write_bytecode = True
REPO = Path(__file__).resolve().parents[3]
#: Set by scripts/test-python.sh, which runs these tests against the package
#: installed in a virtualenv; otherwise the checkout's package is imported.
INSTALLED = os.environ.get("COORDINATOR_TEST_INSTALLED") == "1"
if not INSTALLED:
    sys.path.insert(0, str(REPO / "client" / "python"))

import coordinator  # noqa: E402
import coordinator.aio  # noqa: E402
import grpc  # noqa: E402

REDIS_URL = os.environ.get("COORDINATOR_TEST_REDIS_URL", "")
# Both always: without a Redis the redis variants are reported as skipped,
# rather than left out of the run unseen.
STORES = ["memory", "redis"]


def skip_unless_ci(reason: str) -> NoReturn:
    """Skips the test for want of a tool or a Redis, except in CI (CI set),
    where .ci/run installs the tools and make test starts a Redis: there a
    missing one fails rather than skipping unseen."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}, in CI")
    pytest.skip(reason)


def wait_until(cond: Callable[[], object], timeout: float = 20.0, interval: float = 0.02,
               what: str = "condition") -> object:
    """Polls cond until it returns something truthy, or fails after timeout."""
    end = time.monotonic() + timeout
    last_exc: Optional[BaseException] = None
    while time.monotonic() < end:
        try:
            v = cond()
            if v:
                return v
        except Exception as e:  # keep polling; report the last one
            last_exc = e
        time.sleep(interval)
    last = f" (last error: {last_exc!r})" if last_exc else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}{last}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def workdir() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="coordinator-pytest-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def coordinator_bin(workdir: Path) -> str:
    """The coordinator binary: $COORDINATOR_BIN, or built once with go build."""
    given = os.environ.get("COORDINATOR_BIN")
    if given:
        return given
    go = shutil.which("go")
    if go is None:
        skip_unless_ci("go is not installed and COORDINATOR_BIN is not set")
    out = workdir / "coordinator"
    last = ""
    for attempt in range(3):  # others may be editing the Go code: retry a transient failure
        p = subprocess.run([go, "build", "-o", str(out), "./cmd/coordinator"], cwd=REPO, capture_output=True, text=True)
        if p.returncode == 0:
            return str(out)
        last = p.stderr
        sys.stderr.write(f"go build ./cmd/coordinator failed (attempt {attempt + 1}); retrying in 20s:\n{last}\n")
        time.sleep(20)
    pytest.fail(f"go build ./cmd/coordinator failed:\n{last}")


HEALTH_CHECK = "/grpc.health.v1.Health/Check"
LIVENESS_REQUEST = b"\n\x08liveness"  # HealthCheckRequest{service: "liveness"}
SERVING = b"\x08\x01"  # HealthCheckResponse{status: SERVING}


class Server:
    """One coordinator process."""

    def __init__(self, binary: str, workdir: Path, store: str = "memory",
                 env: Optional[Dict[str, Optional[str]]] = None,
                 tls_cert: Optional[Path] = None) -> None:
        self.binary = binary
        self.store = store
        self.dir = Path(tempfile.mkdtemp(prefix="srv-", dir=workdir))
        self.extra = dict(env or {})
        self.tls_cert = tls_cert
        self.port = 0
        self.proc: Optional[subprocess.Popen] = None
        self.log_path = self.dir / "coordinator.log"
        self.prefix = f"pytest-{uuid.uuid4().hex[:12]}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "Server":
        for attempt in range(3):
            self.port = free_port()
            # Nothing of the caller's own coordinator settings leaks in.
            env = {k: v for k, v in os.environ.items() if not k.startswith("COORDINATOR_")}
            env.update(
                {
                    "COORDINATOR_LISTEN": self.address,
                    "COORDINATOR_METRICS_LISTEN": "",
                    "COORDINATOR_HEALTH_LISTEN": "",
                    "COORDINATOR_STATE_DIR": str(self.dir / "state"),
                    "COORDINATOR_STORE": self.store,
                    "COORDINATOR_LOG_LEVEL": "debug",
                }
            )
            if self.store == "redis":
                env["COORDINATOR_REDIS_URL"] = REDIS_URL
                env["COORDINATOR_REDIS_KEY_PREFIX"] = self.prefix
                env["COORDINATOR_REDIS_NEW_STORE"] = "true"
            env.update(self.extra)
            env = {k: v for k, v in env.items() if v is not None}
            with open(self.log_path, "ab") as logf:
                self.proc = subprocess.Popen([self.binary], env=env, stdout=logf, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, cwd=self.dir, start_new_session=True)
            try:
                self._wait_ready(timeout)
                return self
            except _PortTaken:
                self.kill()
                continue
        raise AssertionError(f"coordinator did not start; log:\n{self.log()}")

    def _wait_ready(self, timeout: float) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            assert self.proc is not None
            if self.proc.poll() is not None:
                if "address already in use" in self.log():
                    raise _PortTaken()
                raise AssertionError(f"coordinator exited with {self.proc.returncode}; log:\n{self.log()}")
            if self.healthy():
                return
            time.sleep(0.05)
        raise AssertionError(f"coordinator not ready after {timeout}s; log:\n{self.log()}")

    def healthy(self) -> bool:
        """Whether the gRPC health service answers SERVING for "liveness"
        (no credentials needed). A fresh channel each time: a channel whose
        first connection was refused waits out gRPC's reconnect backoff."""
        if self.tls_cert is not None:
            creds = grpc.ssl_channel_credentials(root_certificates=self.tls_cert.read_bytes())
            channel = grpc.secure_channel(self.address, creds)
        else:
            channel = grpc.insecure_channel(self.address)
        try:
            return channel.unary_unary(HEALTH_CHECK)(LIVENESS_REQUEST, timeout=2.0) == SERVING
        except grpc.RpcError:
            return False
        finally:
            channel.close()

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-8000:]
        except OSError:
            return ""


class _PortTaken(Exception):
    pass


class RedisServer:
    """A private redis-server on a free port, which a test may kill."""

    def __init__(self, workdir: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="redis-", dir=workdir))
        self.port = 0
        self.proc: Optional[subprocess.Popen] = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        for attempt in range(3):
            self.port = free_port()
            self.proc = subprocess.Popen(
                ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
                 "--dir", str(self.dir), "--logfile", str(self.dir / "redis.log")],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )
            end = time.monotonic() + 10
            while time.monotonic() < end and self.proc.poll() is None:
                if self.ping():
                    return self
                time.sleep(0.05)
            self.kill()
        raise AssertionError("could not start redis-server")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def start_server(coordinator_bin: str, workdir: Path) -> Iterator[Callable[..., Server]]:
    """start_server(store="memory", env={...}, tls_cert=None) starts a
    coordinator of this test's own; it is killed at teardown."""
    started: List[Server] = []

    def start(store: str = "memory", env: Optional[Dict[str, Optional[str]]] = None,
              tls_cert: Optional[Path] = None) -> Server:
        if store == "redis" and not REDIS_URL and not (env or {}).get("COORDINATOR_REDIS_URL"):
            skip_unless_ci("COORDINATOR_TEST_REDIS_URL is not set")
        s = Server(coordinator_bin, workdir, store, env, tls_cert)
        started.append(s)
        return s.start()

    yield start
    for s in started:
        s.kill()


@pytest.fixture(scope="session")
def shared_servers(coordinator_bin: str, workdir: Path) -> Iterator[Dict[str, Server]]:
    """One coordinator per store, shared by the tests that do not stop it."""
    servers: Dict[str, Server] = {}
    yield servers
    for s in servers.values():
        s.kill()


_shared_lock = threading.Lock()


@pytest.fixture(params=STORES)
def server(request: pytest.FixtureRequest, shared_servers: Dict[str, Server], coordinator_bin: str,
           workdir: Path) -> Server:
    """The shared coordinator of each available store (parametrized)."""
    store = request.param
    if store == "redis" and not REDIS_URL:
        skip_unless_ci("COORDINATOR_TEST_REDIS_URL is not set (make test-python sets it)")
    with _shared_lock:
        s = shared_servers.get(store)
        if s is None or s.proc is None or s.proc.poll() is not None:
            s = Server(coordinator_bin, workdir, store).start()
            shared_servers[store] = s
    return s


@pytest.fixture
def redis_server(workdir: Path) -> Iterator[Callable[[], RedisServer]]:
    """redis_server() starts a private redis-server, killed at teardown."""
    if shutil.which("redis-server") is None:
        skip_unless_ci("redis-server is not installed")
    started: List[RedisServer] = []

    def start() -> RedisServer:
        r = RedisServer(workdir)
        started.append(r)
        return r.start()

    yield start
    for r in started:
        r.kill()


@pytest.fixture
def make_client() -> Iterator[Callable[..., coordinator.Client]]:
    """make_client(target, **kwargs) makes a Client closed at teardown."""
    clients: List[coordinator.Client] = []

    def make(target: str, **kwargs: Any) -> coordinator.Client:
        kwargs.setdefault("timeout", 15.0)
        c = coordinator.Client(target, **kwargs)
        clients.append(c)
        return c

    yield make
    for c in clients:
        c.close()


@asynccontextmanager
async def aio_client(target: str, **kwargs: Any) -> AsyncIterator[coordinator.aio.Client]:
    """A coordinator.aio.Client, closed at the end."""
    kwargs.setdefault("timeout", 15.0)
    c = coordinator.aio.Client(target, **kwargs)
    try:
        yield c
    finally:
        await c.close()


def call(target: str, method: str, request: Any, token: Optional[str] = None) -> Any:
    """The unary call ``method`` over a plaintext connection of the test's
    own (with ``token``, if any), as grpcurl or a client without SDK would
    make it."""
    metadata = (("authorization", f"Bearer {token}"),) if token else None
    with grpc.insecure_channel(target) as channel:
        stub = coordinator.pb_grpc.CoordinatorStub(channel)
        try:
            return getattr(stub, method)(request, timeout=10, metadata=metadata)
        except grpc.RpcError as e:
            raise coordinator.from_rpc_error(e) from None


def close_session(target: str, session_id: str, token: Optional[str] = None) -> None:
    """Ends a session behind its Client's back, over a connection of the
    test's own, as an operator (or an expiry) would."""
    call(target, "CloseSession", coordinator.pb.CloseSessionRequest(session_id=session_id), token)


@pytest.fixture
def client(server: Server, make_client: Callable[..., coordinator.Client]) -> coordinator.Client:
    return make_client(server.address)


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A name no other test uses."""
    return f"pytest/{request.node.originalname}/{uuid.uuid4().hex[:10]}"


def metric(port: int, name: str, **labels: str) -> float:
    """The sum of the coordinator's metric ``name`` (at 127.0.0.1:port's
    /metrics) over the series whose labels include ``labels``."""
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        series, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in series for k, v in labels.items()):
            total += float(value)
    return total


@pytest.fixture
def metrics_server(start_server: Callable[..., Server]) -> Callable[..., Server]:
    """metrics_server(store="memory", env={...}) starts a coordinator of the
    test's own that serves /metrics on ``server.metrics_port``."""

    def start(store: str = "memory", env: Optional[Dict[str, Optional[str]]] = None) -> Server:
        port = free_port()
        srv = start_server(store, env={**(env or {}), "COORDINATOR_METRICS_LISTEN": f"127.0.0.1:{port}"})
        srv.metrics_port = port  # type: ignore[attr-defined]
        return srv

    return start
