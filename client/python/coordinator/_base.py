"""What the sync and the asyncio Client share: their constructor (settings,
credentials, identity, ttl) and the properties that describe them."""

from __future__ import annotations

from typing import Any, Callable, Generic, Optional, Sequence, Tuple

from ._connect import PEM
from ._core import DEFAULT_TARGET, Core, Settings
from ._rules import CLOSE_TIMEOUT, DEFAULT_TTL
from ._state import F, SessionState
from .session import SessionBase


class ClientBase(Generic[F]):
    """A connection to one coordinator (see coordinator.Client).

    Args:
        target: host:port, or any gRPC target ("dns:///coord.example:7400").
        token: a bearer token, sent as ``authorization: Bearer TOKEN``. Sent
            as call credentials over TLS only, unless ``insecure_token``.
        tls: connect with TLS (implied by ``root_certificates``).
        root_certificates: PEM CA certificates to verify the coordinator
            with (bytes, PEM text or a file path); None: the system's roots.
        private_key, certificate_chain: a client certificate (mTLS).
        server_name: the name to verify the coordinator's certificate for,
            when it differs from the target's host.
        insecure_token: send ``token`` over a plaintext connection (loopback
            and tests only: anyone on the path can read it).
        holder: the identity every holder and candidate of this Client starts
            with (default: host name, process id, random suffix). Each
            acquisition holds as ``holder#N`` of its own, so that two
            acquisitions of one name through one Client exclude each other.
        ttl: the TTL of the Client's default session, in seconds (default:
            the proto's ClientRules, 15 s): how long what it holds outlives
            this process's last renewal.
        timeout: the deadline of one call that does not wait, in seconds.
        close_timeout: how long close() (and a release) spend releasing, in
            seconds (default: the proto's ClientRules, 2 s).
        options: extra gRPC channel options.
    """

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        token: Optional[str] = None,
        tls: bool = False,
        root_certificates: Optional[PEM] = None,
        private_key: Optional[PEM] = None,
        certificate_chain: Optional[PEM] = None,
        server_name: Optional[str] = None,
        insecure_token: bool = False,
        holder: Optional[str] = None,
        ttl: float = DEFAULT_TTL,
        timeout: float = 10.0,
        close_timeout: float = CLOSE_TIMEOUT,
        options: Optional[Sequence[Tuple[str, Any]]] = None,
    ) -> None:
        settings = Settings(target, token, tls, root_certificates, private_key, certificate_chain, server_name,
                            insecure_token, holder, ttl, timeout, close_timeout, options)
        self.target = target
        self._core: Core[F] = Core(settings, self._flag_factory())

    def _flag_factory(self) -> Callable[[], F]:
        """What makes the ``lost`` and ``ended`` flags of this Client's
        sessions and grants."""
        raise NotImplementedError

    def _state_of(self, session: Optional[SessionBase[F]]) -> Optional[SessionState[F]]:
        """The state of a session the caller passed (None: the default)."""
        if session is None:
            return None
        return self._core.explicit_session(session.id, session.done, session.error)

    @property
    def identity(self) -> str:
        """The identity every holder of this Client starts with."""
        return self._core.identity

    @property
    def ttl(self) -> float:
        """The TTL of the default session, in seconds."""
        return self._core.ttl

    @property
    def timeout(self) -> float:
        """The deadline of one call that does not wait, in seconds."""
        return self._core.timeout

    @property
    def close_timeout(self) -> float:
        """How long close() and a release spend releasing, in seconds."""
        return self._core.close_timeout

    @property
    def closed(self) -> bool:
        """Whether close() was called."""
        return self._core.closed

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.{type(self).__name__} {self.target!r} identity={self.identity!r}>"
