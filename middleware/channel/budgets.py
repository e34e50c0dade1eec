"""What answering may cost: repairs and sync answers are charged to the requester
(``REQUESTER_MESSAGES`` and ``REQUESTER_BYTES`` per second, in its sender record) and to this
peer (``ANSWER_RATE`` messages per second, both kinds of answer together)."""

from __future__ import annotations

from .group import MAX_SENDERS, GroupState
from .senders import RequesterBudget

ANSWER_RATE = 30_000  # messages per second this peer sends as repairs or sync answers
SYNC_PACE = 0.008  # between two chunks of one sync answer, or of a repair the budget held back (s)


class AnswerBudgets:
    __slots__ = ("state", "_answer_budget", "_budget_at")

    def __init__(self, state: GroupState) -> None:
        self.state = state
        self._answer_budget = float(ANSWER_RATE)
        self._budget_at = 0.0

    def take(self, now: float, wanted: int) -> int:
        """Up to ``wanted`` messages of this peer's own answer rate."""
        self._answer_budget = min(ANSWER_RATE, self._answer_budget + (now - self._budget_at) * ANSWER_RATE)
        self._budget_at = now
        granted = max(0, min(wanted, int(self._answer_budget)))
        self._answer_budget -= granted
        return granted

    def of(self, requester: str, now: float) -> RequesterBudget:
        """``requester``'s budget, refilled to ``now``."""
        senders = self.state.senders
        record = senders.of(requester)
        budget = record.budget
        if budget is None:
            if senders.budgets >= MAX_SENDERS:  # the idle ones (full again) go
                for other in senders.by_pid.values():
                    if other.budget is not None and now - other.budget.at >= 1.0:
                        other.budget = None
                        senders.budgets -= 1
            budget = record.budget = RequesterBudget(now)
            senders.budgets += 1
        budget.refill(now)
        return budget
