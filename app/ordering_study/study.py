"""The study's scenarios and runs: every policy over the same trace, and the group-size sweep."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .metrics import Row, delivery_delays, summarize
from .network import LAN, LOSSY_WIRELESS, WIRELESS, NetworkProfile
from .policies import OPS_POLICIES, POLICIES, OrderingPolicy
from .simulator import simulate
from .workload import ChatParams, generate

SWEEP_SIZES = (2, 4, 8, 16, 32, 64)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    profile: NetworkProfile
    chat: ChatParams
    about: str
    operations: bool = False
    """The trace mixes operations into the chat; rows measure the operations only."""

    @property
    def policies(self) -> dict[str, type[OrderingPolicy]]:
        return OPS_POLICIES if self.operations else POLICIES


@dataclass(frozen=True, slots=True)
class StudySize:
    processes: int
    messages: int
    sweep_messages: int


FULL = StudySize(processes=16, messages=2000, sweep_messages=400)
QUICK = StudySize(processes=16, messages=400, sweep_messages=100)


def scenarios(size: StudySize) -> list[Scenario]:
    chat = ChatParams(processes=size.processes, messages=size.messages)
    busy = replace(chat, rate_per_process_hz=0.3, think_median_ms=400.0)
    return [
        Scenario("lan", LAN, chat, "switched LAN, no loss"),
        Scenario("wireless", WIRELESS, chat, "ad hoc wireless, Pareto-tailed delay"),
        Scenario("wireless_loss", LOSSY_WIRELESS, chat, "wireless + 5% loss, resent after 200 ms"),
        Scenario("wireless_busy", LOSSY_WIRELESS, busy, "wireless_loss with quick replies (think 0.4 s)"),
        Scenario(
            "wireless_ops", LOSSY_WIRELESS, replace(busy, ops_share=0.4),
            "wireless_busy, 40% of events operations (react, edit, pin, topic); rows: operations only",
            operations=True,
        ),
    ]


@dataclass
class ScenarioRun:
    scenario: Scenario
    rows: list[Row]
    delays: dict[str, list[float]]


def run_scenario(scenario: Scenario, seed: int, policies: list[str] | None = None) -> ScenarioRun:
    workload = generate(scenario.chat, scenario.profile, seed)
    rows, delays = [], {}
    available = scenario.policies
    for name in policies or list(available):
        policy_cls = available[name]
        result = simulate(workload, policy_cls, seed)
        rows.append(summarize(scenario.name, result, policy_cls, scenario.operations))
        delays[name] = delivery_delays(result, scenario.operations)
    return ScenarioRun(scenario, rows, delays)


def run_sweep(
    profile: NetworkProfile, messages: int, seed: int, sizes: tuple[int, ...] = SWEEP_SIZES
) -> list[Row]:
    rows = []
    for n in sizes:
        workload = generate(ChatParams(processes=n, messages=messages), profile, seed)
        for policy_cls in POLICIES.values():
            rows.append(summarize(f"{profile.name}_sweep", simulate(workload, policy_cls, seed), policy_cls))
    return rows
