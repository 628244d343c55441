"""Several runs trained together: each in its own thread, with its own round loop, state, snapshots and
record, their selected clients trained in one batched step (`vectorised.train_requests`) and their
models evaluated in shared batched passes (`batched_evaluation.evaluate_requests`).

A run's batched training (`vectorised.train_phases_many`) or batched evaluation
(`batched_evaluation.evaluate_many`) hands its request to the group and waits; when every run still
training waits, the last to arrive trains all of their training requests in one step, evaluates all of
their evaluation requests in the same passes, and hands each run its own results. A run that trains or
evaluates client by client is simply not waiting yet: the others wait for it. So each run's numbers
are those of the run trained alone, to the float tolerance of a batched step (its draws come from its
own generator, in its own order); its evaluation sums are those of its own passes, bit for bit.
"""

from __future__ import annotations

import threading
from typing import Callable

from fedgmh.engine.batched_evaluation import EvalRequest, evaluate_requests
from fedgmh.engine.vectorised import train_requests


class RunGroup:
    """The meeting point of its runs (`member`, one each, all taken before any run starts); each leaves
    once it stops training (finished, failed or never started), so that the others do not wait for it."""

    def __init__(self, train: Callable[[list], list] | None = None) -> None:
        self.live, self.pending = 0, []
        #: the batched steps trained and the number of runs whose clients each held (`train_requests`:
        #: runs whose steps cannot be joined train in steps of their own); the same for the evaluations
        self.steps: list[int] = []
        self.evaluations: list[int] = []
        self.train_all = train or (lambda requests: train_requests(requests, self.steps))
        self.evaluate_all = lambda requests: evaluate_requests(requests, self.evaluations)
        self.condition = threading.Condition()
        #: held while a run builds its model and algorithm, which may draw from torch's global generator
        self.setup_lock = threading.Lock()

    def member(self) -> Member:
        with self.condition:
            self.live += 1
        return Member(self)

    def train(self, request) -> list:
        """`request`'s results, trained in one step with the requests of the other runs (`evaluate`: the
        same meeting for an `EvalRequest`)."""
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

    def evaluate(self, request: EvalRequest):
        """`request`'s sums, evaluated in passes shared with the other runs' evaluation requests."""
        return self.train(request)

    def _maybe_train(self) -> None:
        """Train (or evaluate) the pending requests when every run still training has one (the caller
        holds the condition): the training requests together, the evaluation requests together."""
        if not self.pending or len(self.pending) < self.live:
            return
        requests, self.pending = self.pending, []
        evaluations = [r for r in requests if isinstance(r, EvalRequest)]
        trainings = [r for r in requests if not isinstance(r, EvalRequest)]
        for batch, run_all in ((trainings, self.train_all), (evaluations, self.evaluate_all)):
            if not batch:
                continue
            try:
                for request, results in zip(batch, run_all(batch)):
                    request.outcome = results
            except BaseException as err:  # noqa: BLE001 - every waiting run gets the error and stops
                for request in batch:
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
