"""The acquisition, release and proclamation rules that the sync and asyncio
clients share (coordinator._acquire, election.proclaim_calls): decisions only, so they are tested as such, with the
answers and errors a coordinator gives. The clients' loops around them are
tested against real coordinators (test_locks, test_aio, test_semaphores)."""

from __future__ import annotations

import time
from typing import List, Optional, Tuple

import grpc
import pytest

import coordinator
from coordinator import pb
from coordinator._acquire import AcquireSteps, Grant, ReleaseSteps, Step
from coordinator._rules import MAX_CONFIRMS
from coordinator.election import next_call, proclaim_calls
from coordinator.errors import ClientClosed, CoordinatorError, LeaseExpired, LeaseNotHeld, NotAcquired

UNAVAILABLE = CoordinatorError("down", code=grpc.StatusCode.UNAVAILABLE, retry_after=0.2)
REFUSED = CoordinatorError("bad", code=grpc.StatusCode.FAILED_PRECONDITION)


def first_step(wait: Optional[float], answer: object) -> Step:
    """The Step after one request of an acquisition that waits ``wait``,
    answered with a Grant or failed with a CoordinatorError."""
    steps = AcquireSteps("lock", "n", 10.0, wait)
    steps.begin()
    if isinstance(answer, CoordinatorError):
        return steps.failed(answer)
    assert isinstance(answer, Grant)
    return steps.answered(answer)


@pytest.mark.parametrize(
    "wait, answer, error, abandon, pause",
    [
        # Not waiting: a refusal names the holder and when to retry.
        (0, Grant(False, holder="h#1", retry_after=1.5), NotAcquired, False, False),
        # Not waiting, a transient error is raised as it is; its outcome is
        # unknown, so what it may have granted is given up.
        (0, UNAVAILABLE, CoordinatorError, True, False),
        # Waiting, a transient error is retried after a pause.
        (None, UNAVAILABLE, None, False, True),
        (30, UNAVAILABLE, None, False, True),
        # An error that retrying cannot fix ends it, waiting or not.
        (None, REFUSED, CoordinatorError, False, False),
        (None, ClientClosed("closed"), ClientClosed, False, False),
        # Granted with its validity ahead: done.
        (None, Grant(True, token=7, ttl=10.0), None, False, False),
    ],
)
def test_the_step_after_the_first_answer(wait, answer, error, abandon: bool, pause: bool) -> None:
    step = first_step(wait, answer)
    if error is None:
        assert step.error is None
    else:
        assert type(step.error) is error
    assert step.abandon is abandon
    assert (step.pause is not None) is pause
    if pause:
        assert step.retrying is answer and 0 < step.pause <= 30
        assert step.warning is not None and "'n'" in step.warning and "retrying" in step.warning
    if isinstance(answer, Grant) and answer.acquired:
        assert step.grant is answer
    else:
        assert step.grant is None


def test_a_retried_error_ends_as_not_acquired_when_the_wait_is_over() -> None:
    steps = AcquireSteps("semaphore", "n", 10.0, 30)
    steps.begin()
    step = steps.failed(UNAVAILABLE)
    assert step.pause is not None and step.pause >= UNAVAILABLE.retry_after  # the coordinator's retry_after
    assert steps.resumed(step).error is None  # time is left: ask again
    steps.end = time.monotonic() - 0.001  # the wait ran out during the pause
    final = steps.resumed(step)
    assert isinstance(final.error, NotAcquired) and final.error.last_error is UNAVAILABLE
    assert final.error.__cause__ is UNAVAILABLE
    assert final.abandon  # the last call's outcome is unknown


def test_a_prompt_refusal_while_waiting_pauses_instead_of_spinning() -> None:
    steps = AcquireSteps("lock", "n", 10.0, None)
    assert steps.begin() > 0  # it waits on the coordinator
    step = steps.answered(Grant(False, holder="h#1"))
    assert step.pause is not None and step.retrying is None and step.error is None
    assert steps.resumed(step).error is None and steps.resumed(step).grant is None


def test_a_grant_with_little_validity_left_is_confirmed_then_given_up() -> None:
    steps = AcquireSteps("lock", "n", 10.0, None)
    stale = Grant(True, token=7, ttl=10.0, sent=time.monotonic() - 8.0)
    for _ in range(MAX_CONFIRMS):
        wait_for = steps.begin()
        assert (wait_for > 0) is (steps.confirms == 0)  # a confirmation does not wait
        step = steps.answered(stale)
        assert step.grant is None and step.error is None and not step.abandon  # ask again as the holder
    steps.begin()
    fresh = Grant(True, token=7, ttl=10.0, sent=time.monotonic())
    assert steps.answered(fresh).grant is fresh and steps.sent == fresh.sent
    # Every answer past its validity: given up, and said why.
    steps = AcquireSteps("lock", "n", 10.0, None)
    expired = Grant(True, token=7, ttl=10.0, sent=time.monotonic() - 20.0)
    for _ in range(MAX_CONFIRMS):
        steps.begin()
        assert steps.answered(expired).grant is None
    steps.begin()
    step = steps.answered(expired)
    assert step.abandon and isinstance(step.error, CoordinatorError) and "validity" in str(step.error)


@pytest.mark.parametrize(
    "ended_now, prior, closed, calls, released",
    [
        (True, None, False, True, True),  # held: released, the answer says
        (False, None, False, False, False),  # released before
        (False, LeaseNotHeld("gone"), False, False, False),  # lost on the coordinator
        (False, LeaseExpired("late"), False, True, False),  # expired here: maybe held there; one call
        (False, LeaseExpired("late"), True, False, False),  # ... unless the client is closed
    ],
)
def test_release_steps(ended_now: bool, prior, closed: bool, calls: bool, released: bool) -> None:
    steps = ReleaseSteps(10.0, 2.0, ended_now, prior, closed)
    assert steps.calling() is calls
    if calls:
        assert 0 < steps.call_timeout() <= 2.0
        assert steps.released(True) is released


def test_release_steps_retry_transient_errors_for_the_close_timeout() -> None:
    steps = ReleaseSteps(10.0, 2.0, True, None, False)
    assert 0 < steps.failed(UNAVAILABLE, closed=False) <= 2.0 and steps.calling()
    with pytest.raises(CoordinatorError) as ei:
        steps.failed(REFUSED, closed=False)
    assert ei.value is REFUSED
    assert steps.failed(UNAVAILABLE, closed=True) == 0 and not steps.calling()  # closed: given up
    steps = ReleaseSteps(10.0, 2.0, True, None, False)
    steps.end = time.monotonic()  # the close timeout is over
    with pytest.raises(CoordinatorError):
        steps.failed(UNAVAILABLE, closed=False)
    once = ReleaseSteps(10.0, 2.0, False, LeaseExpired("late"), False)
    assert once.failed(REFUSED, closed=False) == 0 and not once.calling()  # one call, its errors ignored


def test_semaphore_bounds_are_checked_before_any_call() -> None:
    c = coordinator.Client("127.0.0.1:1")
    try:
        for capacity in (0, -1, coordinator.MAX_CAPACITY + 1):
            with pytest.raises(ValueError, match="capacity"):
                c.semaphore("n", capacity)
        with pytest.raises(ValueError, match="weight"):
            c.semaphore("n", 3).acquire(4)
        with pytest.raises(ValueError, match="weight"):
            c.semaphore("n", 3).acquire(0)
    finally:
        c.close()


class _Host:
    """What proclaim_calls uses of a Client: it records the grant's ends
    and renewals (the sync and asyncio Clients' bookkeeping, no I/O)."""

    def __init__(self) -> None:
        self.ended: List[Tuple[BaseException, bool]] = []
        self.renewed: List[float] = []

    def end_grant(self, h, err, lost):
        first = not h.ended.is_set()
        h._end(err, lost)
        self.ended.append((err, lost))
        return first, None

    def grant_renewed(self, h, sent, ttl):
        self.renewed.append(sent)
        return True


def _leader(term: int = 7) -> Tuple[coordinator.Leadership, _Host]:
    host = _Host()
    return coordinator.Leadership(host, "e", "me#1", term, 10.0, time.monotonic(), b"old"), host  # type: ignore[arg-type]


def _elected(term: int) -> object:
    return pb.CampaignResponse(elected=True, leader=pb.Leader(election="e", candidate="me#1", term=term))


def test_a_proclamation_renews_the_term() -> None:
    lead, host = _leader()
    calls = proclaim_calls(lead, host, b"new")
    kind, req = next_call(calls)
    assert kind == "campaign" and (req.term, req.value, req.candidate) == (7, b"new", "me#1")
    assert next_call(calls, (_elected(7), 123.0)) is None
    assert lead.value == b"new" and host.renewed == [123.0] and not host.ended


def test_a_proclamation_answered_with_another_term_resigns_it_and_ends_the_leadership() -> None:
    lead, host = _leader()
    calls = proclaim_calls(lead, host, b"new")
    next_call(calls)
    kind, req = next_call(calls, (_elected(9), 1.0))  # a coordinator that ignored the term
    assert kind == "resign" and req.term == 9
    with pytest.raises(LeaseNotHeld):
        next_call(calls, err=UNAVAILABLE)  # the resign's failure does not matter
    assert lead.lost.is_set() and lead.value == b"old" and not host.renewed


@pytest.mark.parametrize("err, ends", [(LeaseNotHeld("over", reason="LEASE_NOT_HELD"), True), (UNAVAILABLE, False)])
def test_a_failed_proclamation(err: CoordinatorError, ends: bool) -> None:
    lead, host = _leader()
    calls = proclaim_calls(lead, host, b"new")
    next_call(calls)
    with pytest.raises(CoordinatorError) as ei:
        next_call(calls, err=err)
    assert ei.value is err and lead.lost.is_set() is ends and lead.value == b"old"
