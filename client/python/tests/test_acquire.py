"""The acquisition and release rules that the sync and asyncio clients share
(coordinator._acquire): decisions only, so they are tested as such, with the
answers and errors a coordinator gives. The clients' loops around them are
tested against real coordinators (test_locks, test_aio, test_semaphores)."""

from __future__ import annotations

import time
from typing import Optional

import grpc
import pytest

import coordinator
from coordinator._acquire import AcquireSteps, Grant, ReleaseSteps, Step
from coordinator.errors import ClientClosed, CoordinatorError, NotAcquired

UNAVAILABLE = CoordinatorError("down", code=grpc.StatusCode.UNAVAILABLE, retry_after=0.2)
REFUSED = CoordinatorError("bad", code=grpc.StatusCode.FAILED_PRECONDITION)


def first_step(wait: Optional[float], answer: object) -> Step:
    """The Step after one request of an acquisition that waits ``wait``,
    answered with a Grant or failed with a CoordinatorError."""
    steps = AcquireSteps("lock", "n", wait)
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
        # Granted (in a session, valid as long as it): done.
        (None, Grant(True, token=7), None, False, False),
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
    steps = AcquireSteps("semaphore", "n", 30)
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
    steps = AcquireSteps("lock", "n", None)
    assert steps.begin() > 0  # it waits on the coordinator
    step = steps.answered(Grant(False, holder="h#1"))
    assert step.pause is not None and step.retrying is None and step.error is None
    assert steps.resumed(step).error is None and steps.resumed(step).grant is None


def test_release_steps_retry_transient_errors_for_the_close_timeout() -> None:
    steps = ReleaseSteps(10.0, 2.0)
    assert steps.calling() and 0 < steps.call_timeout() <= 2.0
    assert 0 < steps.failed(UNAVAILABLE, closed=False) <= 2.0 and steps.calling()
    with pytest.raises(CoordinatorError) as ei:
        steps.failed(REFUSED, closed=False)
    assert ei.value is REFUSED
    assert steps.failed(UNAVAILABLE, closed=True) == 0 and not steps.calling()  # closed: given up
    steps = ReleaseSteps(10.0, 2.0)
    steps.end = time.monotonic()  # the close timeout is over
    with pytest.raises(CoordinatorError):
        steps.failed(UNAVAILABLE, closed=False)


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
