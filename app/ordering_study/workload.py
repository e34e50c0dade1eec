"""The chat workload: who writes what, answering which message, and how long each copy travels.

Users decide to write as a Poisson process.  With probability ``reply_prob`` a
message answers one of the ``recent`` latest messages (written by someone
else), otherwise it starts a new thread.  A root is sent when it is decided; a
reply is sent ``think_ms`` after its writer has *read* the parent, i.e. after
the parent was delivered at the writer, which depends on the ordering policy.

With ``ops_share`` above 0, that share of the events are *operations* on
earlier messages instead (edits of one's own message, reactions, pins) or
topic settings, in the proportions of ``OP_WEIGHTS``.  An operation on a
message is sent ``think_ms`` after its writer read that message, like a reply,
and names it as its ``parent``; a topic setting is sent when decided.

Everything random that does not depend on the policy is drawn here, once, so
every policy runs on the same trace: writers, parents, think times and the
transit time of every data message to every receiver (retransmissions
included).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .network import NetworkProfile, Transit


@dataclass(frozen=True, slots=True)
class ChatMessage:
    index: int
    sender: int
    parent: int | None
    """Index of the message this one answers; None for a thread root."""
    decided_ms: float
    """When the user decided to write; the send time of a root."""
    think_ms: float
    """For a reply: from reading the parent to sending the answer."""
    text: str = ""
    op: str = ""
    """``""`` for a chat message, else the operation: ``edit``, ``react``, ``pin`` or ``topic``."""
    emoji: str = ""

    @property
    def object_key(self) -> tuple | None:
        """The object an operation acts on (None for a chat message); see ``middleware.obg``."""
        if not self.op:
            return None
        if self.op == "edit":
            return ("text", self.parent)
        if self.op == "react":
            return ("react", self.parent, self.sender, self.emoji)
        if self.op == "pin":
            return ("pin", self.parent)
        return ("topic",)


OP_WEIGHTS = (("react", 0.5), ("edit", 0.2), ("pin", 0.15), ("topic", 0.15))
EMOJI = ("👍", "❤", "😂")


@dataclass(frozen=True, slots=True)
class ChatParams:
    processes: int = 16
    messages: int = 1000
    rate_per_process_hz: float = 0.1
    reply_prob: float = 0.6
    recent: int = 8
    think_median_ms: float = 2000.0
    think_sigma: float = 0.8
    ops_share: float = 0.0

    def __post_init__(self) -> None:
        if self.processes < 2:
            raise ValueError("a group needs at least 2 processes")
        if self.messages < 1:
            raise ValueError("the workload needs at least 1 message")
        if not 0.0 <= self.reply_prob <= 1.0:
            raise ValueError("reply_prob must lie in [0, 1]")
        if not 0.0 <= self.ops_share < 1.0:
            raise ValueError("ops_share must lie in [0, 1)")


@dataclass(frozen=True, slots=True)
class Workload:
    processes: int
    messages: tuple[ChatMessage, ...]
    transit_ms: tuple[tuple[float, ...], ...]
    """``transit_ms[k][r]``: time for data message k to reach receiver r."""
    profile: NetworkProfile
    receiver_scales: tuple[float, ...]
    clock_offsets_ms: tuple[float, ...]
    """Physical clock error of each process, within +-lambda."""


def generate(params: ChatParams, profile: NetworkProfile, seed: int) -> Workload:
    rng = random.Random(f"workload/{seed}/{profile.name}/{params.processes}")
    n = params.processes
    scales = profile.receiver_scales(n, rng)
    offsets = [rng.uniform(-profile.clock_error_ms, profile.clock_error_ms) for _ in range(n)]
    group_rate_per_ms = params.rate_per_process_hz * n / 1000.0
    messages: list[ChatMessage] = []
    now = 0.0
    chats: list[ChatMessage] = []
    for k in range(params.messages):
        now += rng.expovariate(group_rate_per_ms)
        sender = rng.randrange(n)
        if params.ops_share and k and rng.random() < params.ops_share:
            op = _operation(rng, params, k, sender, now, chats)
            if op is not None:
                messages.append(op)
                continue
        parent = None
        if k and rng.random() < params.reply_prob:
            candidates = [m.index for m in chats[-params.recent :] if m.sender != sender]
            if candidates:
                parent = rng.choice(candidates)
        think = params.think_median_ms * rng.lognormvariate(0.0, params.think_sigma)
        messages.append(ChatMessage(k, sender, parent, now, think))
        chats.append(messages[-1])
    transit = Transit(profile, scales, f"data/{seed}/{profile.name}/{n}")
    matrix = tuple(tuple(transit.broadcast(m.sender)) for m in messages)
    return Workload(n, tuple(messages), matrix, profile, tuple(scales), tuple(offsets))


def _operation(
    rng: random.Random, params: ChatParams, k: int, sender: int, now: float, chats: list[ChatMessage]
) -> ChatMessage | None:
    """An operation by ``sender`` on a recent message (or the topic); None if it has nothing to act on."""
    roll, kind = rng.random(), OP_WEIGHTS[-1][0]
    for name, weight in OP_WEIGHTS:
        if roll < weight:
            kind = name
            break
        roll -= weight
    think = params.think_median_ms * rng.lognormvariate(0.0, params.think_sigma)
    if kind == "topic":
        return ChatMessage(k, sender, None, now, think, f"topic {k}", op="topic")
    recent = chats[-params.recent :]
    if kind == "edit":
        candidates = [m.index for m in chats[-4 * params.recent :] if m.sender == sender]
    else:
        candidates = [m.index for m in recent if m.sender != sender]
    if not candidates:
        return None
    target = rng.choice(candidates)
    emoji = rng.choice(EMOJI) if kind == "react" else ""
    return ChatMessage(k, sender, target, now, think, f"{kind} {k}", op=kind, emoji=emoji)


def handmade(
    processes: int,
    messages: list[ChatMessage],
    transit_ms: list[list[float]],
    profile: NetworkProfile,
    clock_offsets_ms: list[float] | None = None,
) -> Workload:
    """A workload given message by message, for examples and tests."""
    if len(transit_ms) != len(messages) or any(len(row) != processes for row in transit_ms):
        raise ValueError("transit_ms needs one row of `processes` delays per message")
    offsets = clock_offsets_ms or [0.0] * processes
    return Workload(
        processes, tuple(messages), tuple(tuple(row) for row in transit_ms), profile,
        tuple([1.0] * processes), tuple(offsets),
    )
