"""Several runs trained together: each in its own thread, with its own round loop, state, snapshots and
record, their selected clients trained in one batched step (`vectorised.train_requests`).

A run's batched training (`vectorised.train_phases_many`) hands its drawn step (`vectorised.Request`)
to the group and waits; when every run still training waits, the last to arrive trains all of their
clients in one step and hands each run its own results. A run that trains client by client, or
evaluates, is simply not waiting yet: the others wait for it. So each run's numbers are those of the
run trained alone, to the float tolerance of a batched step (its draws come from its own generator,
in its own order).
"""

from __future__ import annotations

import threading
from typing import Callable

from fedgmh.engine.vectorised import Request, train_requests


class RunGroup:
    """The meeting point of its runs (`member`, one each, all taken before any run starts); each leaves
    once it stops training (finished, failed or never started), so that the others do not wait for it."""

    def __init__(self, train: Callable[[list[Request]], list] | None = None) -> None:
        self.live, self.pending = 0, []
        #: the batched steps trained and the number of runs whose clients each held (`train_requests`:
        #: runs whose steps cannot be joined train in steps of their own)
        self.steps: list[int] = []
        self.train_all = train or (lambda requests: train_requests(requests, self.steps))
        self.condition = threading.Condition()
        #: held while a run builds its model and algorithm, which may draw from torch's global generator
        self.setup_lock = threading.Lock()

    def member(self) -> Member:
        with self.condition:
            self.live += 1
        return Member(self)

    def train(self, request: Request) -> list:
        """`request`'s results, trained in one step with the requests of the other runs."""
        with self.condition:
            self.pending.append(request)
            self._maybe_train()
            while not request.done:
                self.condition.wait()
        if isinstance(request.outcome, BaseException):
            raise request.outcome
        return request.outcome

    def leave(self) -> None:
        with self.condition:
            self.live -= 1
            self._maybe_train()

    def _maybe_train(self) -> None:
        """Train the pending requests when every run still training has one (the caller holds the condition)."""
        if not self.pending or len(self.pending) < self.live:
            return
        requests, self.pending = self.pending, []
        try:
            for request, results in zip(requests, self.train_all(requests)):
                request.outcome = results
        except BaseException as err:  # noqa: BLE001 - every waiting run gets the error and stops
            for request in requests:
                request.outcome = err
        for request in requests:
            request.done = True
        self.condition.notify_all()


class Member:
    """One run's place in a `RunGroup` (`RunGroup.member`); `leave` counts once however often it is called."""

    def __init__(self, group: RunGroup) -> None:
        self.group, self.left = group, False

    def leave(self) -> None:
        if not self.left:
            self.left = True
            self.group.leave()
