"""The S_b paper's Delhi/Chennai example, run under every policy.

C asks "Did you visit Chennai?" and "Did you visit Delhi?"; A answers the
first "No", B the second "Yes".  A's answer reaches D late, so D receives
"Yes" first.  For each policy we record what D displays and whether D can
tell which answer goes with which question from what the policy gives it:
S_b names the parent in the header; causal order tells D which questions an
answer's writer had seen (its vector clock); the other orders only tell D
which questions were displayed before the answer.
"""

from __future__ import annotations

from dataclasses import dataclass

from .network import LAN
from .policies import POLICIES, CausalPolicy
from .simulator import SimResult, simulate
from .workload import ChatMessage, Workload, handmade

A, B, C, D = range(4)
NAMES = "ABCD"


def paper_workload() -> Workload:
    messages = [
        ChatMessage(0, C, None, 0.0, 0.0, "Did you visit Chennai?"),
        ChatMessage(1, C, None, 5.0, 0.0, "Did you visit Delhi?"),
        ChatMessage(2, A, 0, 0.0, 1000.0, "No"),
        ChatMessage(3, B, 1, 0.0, 1000.0, "Yes"),
    ]
    transit = [
        [1.0, 1.0, 0.0, 1.0],
        [1.0, 1.0, 0.0, 1.0],
        [0.0, 1.0, 1.0, 30.0],  # A's "No" is slow to reach D
        [1.0, 0.0, 1.0, 1.0],
    ]
    return handmade(4, messages, transit, LAN)


@dataclass(frozen=True, slots=True)
class ExampleOutcome:
    policy: str
    display_at_d: tuple[str, ...]
    candidates: dict[str, tuple[str, ...]]
    """For each answer, the questions D cannot rule out as the one it answers."""
    can_tell: bool


def _causal_past(result: SimResult, index: int) -> set[int]:
    """Messages delivered at the writer of ``index`` before it was sent (what its vector clock covers)."""
    writer = result.workload.messages[index].sender
    past: set[int] = set()
    for event, k in result.events[writer]:
        if event == "send" and k == index:
            return past
        past.add(k)
    raise ValueError(f"message {index} was never sent")


def outcome(policy_name: str, seed: int = 0) -> ExampleOutcome:
    policy_cls = POLICIES[policy_name]
    workload = paper_workload()
    result = simulate(workload, policy_cls, seed)
    messages = workload.messages
    display = result.logs[D]
    questions = {m.index for m in messages if m.parent is None}
    candidates: dict[str, tuple[str, ...]] = {}
    can_tell = True
    for answer in (m for m in messages if m.parent is not None):
        assert answer.parent is not None
        possible: set[int]
        if policy_cls.names_parent:
            possible = {answer.parent}
        else:
            shown_before = set(display[: display.index(answer.index)])
            possible = questions & shown_before
            if policy_cls is CausalPolicy:
                possible &= _causal_past(result, answer.index)
        candidates[answer.text] = tuple(messages[q].text for q in sorted(possible))
        can_tell = can_tell and possible == {answer.parent}
    return ExampleOutcome(
        policy_name, tuple(messages[k].text for k in display), candidates, can_tell
    )


def all_outcomes(seed: int = 0) -> list[ExampleOutcome]:
    return [outcome(name, seed) for name in POLICIES]
