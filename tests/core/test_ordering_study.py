"""Tests of the ordering study: each policy's own guarantee, S_b's, the paper's example, the CLI."""

from __future__ import annotations

import csv
from dataclasses import replace

import pytest

from m2mc.app.ordering_study import main
from m2mc.app.ordering_study.direct import (
    DIRECT_POLICIES,
    DIRECT_SCENARIOS,
    DirectMessage,
    DirectParams,
    DirectWorkload,
    causal_violations,
    generate_direct,
    simulate_direct,
    summarize_direct,
)
from m2mc.app.ordering_study.example import D, all_outcomes, paper_workload
from m2mc.app.ordering_study.metrics import COLUMNS, object_violations, parent_violations, summarize
from m2mc.app.ordering_study.network import LAN, LOSSY_WIRELESS, WIRELESS
from m2mc.app.ordering_study.policies import (
    OPS_POLICIES,
    POLICIES,
    FifoInbox,
    LamportPolicy,
    PhysicalLinearPolicy,
    SequencerPolicy,
)
from m2mc.app.ordering_study.simulator import Packet, Simulation, simulate
from m2mc.app.ordering_study.study import QUICK, run_scenario, scenarios
from m2mc.app.ordering_study.workload import ChatMessage, ChatParams, generate, handmade

# Small, busy and lossy: replies come fast, copies arrive late and out of order.
BUSY = ChatParams(processes=6, messages=300, rate_per_process_hz=0.5, think_median_ms=300.0)


@pytest.fixture(scope="module")
def busy_workload():
    return generate(BUSY, LOSSY_WIRELESS, seed=7)


@pytest.fixture(scope="module")
def busy_results(busy_workload):
    return {name: simulate(busy_workload, cls, seed=7) for name, cls in POLICIES.items()}


def happened_before_violations(result) -> int:
    """Deliveries of m2 before some m1 with send(m1) -> send(m2) (Lamport's happened-before)."""
    past: dict[int, int] = {}  # message -> bitmask of the messages in its causal past
    # A message's past is fixed when it is sent, from what its sender knew by then, so
    # walk every process's events in one global time order (ties keep each process's order).
    timeline = []
    for pid, events in enumerate(result.events):
        for order, (kind, index) in enumerate(events):
            at = result.send_ms[index] if kind == "send" else result.delivery_ms[index][pid]
            timeline.append((at, pid, order, kind, index))
    timeline.sort()
    known = [0] * result.workload.processes
    delivered = [0] * result.workload.processes
    violations = 0
    for _, pid, _, kind, index in timeline:
        if kind == "send":
            past[index] = known[pid]
            known[pid] |= 1 << index
        else:
            if past[index] & ~delivered[pid]:
                violations += 1
            delivered[pid] |= 1 << index
            known[pid] |= past[index] | (1 << index)
    return violations


# -- the baselines' own guarantees ---------------------------------------------------


def test_causal_never_delivers_against_happened_before(busy_results):
    assert happened_before_violations(busy_results["causal"]) == 0
    # the same check catches arrival order on this trace, so it can fail
    assert happened_before_violations(busy_results["none"]) > 0


@pytest.mark.parametrize("policy", ["total_sequencer", "total_lamport", "linear_clock"])
def test_total_orders_give_every_process_the_same_sequence(busy_results, policy):
    logs = busy_results[policy].logs
    assert len(logs[0]) == BUSY.messages
    assert all(log == logs[0] for log in logs)


def test_arrival_order_differs_between_processes(busy_results):
    logs = busy_results["none"].logs
    assert any(log != logs[0] for log in logs)


def _three_process_trace() -> list[ChatMessage]:
    return [
        ChatMessage(0, 1, None, 0.0, 0.0, "from P1"),
        ChatMessage(1, 2, None, 0.5, 0.0, "from P2"),
        ChatMessage(2, 0, None, 100.0, 0.0, "from P0, later"),
    ]


def test_sequencer_delivers_in_the_order_the_sequencer_received():
    # P1's message reaches the sequencer P0 after P2's, although P1 sent first
    transit = [[10.0, 0.0, 1.0], [1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]
    result = simulate(handmade(3, _three_process_trace(), transit, LAN), SequencerPolicy)
    assert result.logs == [[1, 0, 2]] * 3


def test_lamport_delivers_by_timestamp_then_pid():
    # P1 and P2 send concurrently, both with timestamp 1: the tie goes to the lower pid,
    # although everyone but P1 receives P2's message first
    transit = [[10.0, 0.0, 10.0], [1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]
    workload = handmade(3, _three_process_trace(), transit, LAN)
    assert simulate(workload, POLICIES["none"]).logs[0] == [1, 0, 2]
    assert simulate(workload, LamportPolicy).logs == [[0, 1, 2]] * 3


def test_physical_linear_precedence_follows_the_seed_rules():
    lan = handmade(2, [ChatMessage(0, 0, None, 0.0, 0.0)], [[0.0, 1.0]], LAN)
    rules_a = PhysicalLinearPolicy(0, lan, None)  # lambda 5, delta 5: delta <= 2*lambda
    assert rules_a.precedes((100.0, 1), (120.0, 2))
    assert rules_a.precedes((110.0, 1), (100.0, 2))  # within 2*lambda+delta the linear clock decides
    assert not rules_a.precedes((100.0, 2), (100.0, 2))
    assert not rules_a.precedes((120.0, 1), (100.0, 2))  # 20 ms apart: physical time decides
    assert rules_a.precedes((100.0, 9), (116.0, 1))  # beyond 2*lambda+delta physical time decides
    wireless = replace(lan, profile=WIRELESS)
    rules_b = PhysicalLinearPolicy(0, wireless, None)  # lambda 10, delta 250: delta > 2*lambda
    assert not rules_b.precedes((100.0, 1), (110.0, 2))  # within 2*lambda: concurrent
    assert rules_b.precedes((100.0, 1), (150.0, 2))
    assert not rules_b.precedes((100.0, 2), (150.0, 1))  # LT disagrees with PT: concurrent
    assert rules_b.precedes((100.0, 2), (400.0, 1))


def test_fifo_inbox_releases_packets_in_sending_order():
    inbox = FifoInbox(2)
    third, first, second = (Packet("x", 1, n, n) for n in (3, 1, 2))
    assert inbox.accept(third) == []
    assert inbox.accept(first) == [first]
    assert inbox.accept(second) == [second, third]
    assert inbox.accept(first) == []  # a duplicate


# -- S_b -----------------------------------------------------------------------------


def test_sb_never_shows_a_reply_before_its_parent(busy_results):
    violations, checked = parent_violations(busy_results["sb"])
    assert checked > 500 and violations == 0
    assert parent_violations(busy_results["causal"])[0] == 0
    assert parent_violations(busy_results["none"])[0] > 0  # the trace does reorder replies


def test_sb_uses_the_project_orderer(busy_workload):
    from m2mc.middleware.mop import SbOrderer

    from m2mc.app.ordering_study.simulator import Simulation

    sim = Simulation(busy_workload, POLICIES["sb"], seed=7)
    assert all(isinstance(node.orderer, SbOrderer) for node in sim.nodes)
    sim.run()
    assert all(node.orderer.pending == 0 for node in sim.nodes)


def test_sb_holds_less_than_causal_and_total_orders(busy_results):
    rows = {name: summarize("busy", result, POLICIES[name]) for name, result in busy_results.items()}
    assert rows["sb"].held_fraction < rows["causal"].held_fraction < rows["total_sequencer"].held_fraction
    assert rows["sb"].mean_delay_ms < rows["causal"].mean_delay_ms
    assert rows["none"].held_fraction == 0


def test_header_bytes_grow_with_group_size_only_for_vector_clocks():
    sb, causal = POLICIES["sb"], POLICIES["causal"]
    assert sb.header_bytes(2) == sb.header_bytes(64) == 8
    assert causal.header_bytes(64) == 16 * causal.header_bytes(4)


# -- operations: OBG --------------------------------------------------------------------

BUSY_OPS = replace(BUSY, ops_share=0.4)


@pytest.fixture(scope="module")
def ops_results():
    workload = generate(BUSY_OPS, LOSSY_WIRELESS, seed=7)
    return {name: simulate(workload, cls, seed=7) for name, cls in OPS_POLICIES.items()}


def test_the_ops_workload_mixes_every_kind_of_operation_into_the_chat(ops_results):
    messages = ops_results["obg"].workload.messages
    kinds = [m.op for m in messages]
    assert {"", "edit", "react", "pin", "topic"} <= set(kinds)
    assert 0.25 < sum(1 for k in kinds if k) / len(kinds) < 0.45
    for m in messages:
        if m.op == "edit":
            assert messages[m.parent].sender == m.sender and not messages[m.parent].op
        elif m.op in ("react", "pin"):
            assert not messages[m.parent].op


def test_obg_keeps_object_order_which_arrival_order_breaks(ops_results):
    violations, checked = object_violations(ops_results["obg"])
    assert checked > 200 and violations == 0
    assert object_violations(ops_results["causal"])[0] == 0
    assert object_violations(ops_results["none"])[0] > 0
    assert parent_violations(ops_results["obg"])[0] == 0


def test_obg_holds_operations_less_than_causal_and_total_order(ops_results):
    rows = {name: summarize("ops", r, OPS_POLICIES[name], operations=True) for name, r in ops_results.items()}
    assert rows["obg"].held_fraction < rows["causal"].held_fraction < rows["total_sequencer"].held_fraction
    assert rows["obg"].mean_delay_ms < rows["causal"].mean_delay_ms < rows["total_lamport"].mean_delay_ms


def test_obg_members_converge_on_the_same_objects():
    workload = generate(BUSY_OPS, LOSSY_WIRELESS, seed=11)
    sim = Simulation(workload, OPS_POLICIES["obg"], seed=11)
    sim.run()
    cores = [node.obg for node in sim.nodes]
    assert all(core.pending == 0 and core.rejected == 0 for core in cores)
    topics = {core.topic() for core in cores}
    assert len(topics) == 1 and topics.pop().text.startswith("topic")
    targets = set().union(*(core.touched_messages() for core in cores))
    assert targets
    for mid in targets:
        assert len({repr(core.state(mid)) for core in cores}) == 1


def test_obg_on_a_chat_without_operations_is_s_b(busy_workload):
    assert simulate(busy_workload, OPS_POLICIES["obg"], seed=7).logs == simulate(busy_workload, POLICIES["sb"], seed=7).logs


# -- the paper's example -------------------------------------------------------------


def test_paper_example_only_sb_tells_which_answer_goes_with_which_question():
    outcomes = {o.policy: o for o in all_outcomes()}
    assert outcomes["sb"].can_tell
    assert outcomes["sb"].candidates == {"No": ("Did you visit Chennai?",), "Yes": ("Did you visit Delhi?",)}
    assert [name for name, o in outcomes.items() if o.can_tell] == ["sb"]
    for o in outcomes.values():
        assert set(o.display_at_d) == {"Did you visit Chennai?", "Did you visit Delhi?", "No", "Yes"}


def test_paper_example_sb_shows_yes_first_while_causal_waits_for_no():
    workload = paper_workload()
    sb = simulate(workload, POLICIES["sb"])
    causal = simulate(workload, POLICIES["causal"])
    yes, no = 3, 2
    assert sb.delivery_ms[yes][D] == sb.receipt_ms[yes][D]  # its parent is there: shown at once
    assert causal.delivery_ms[yes][D] == causal.receipt_ms[no][D]  # B had seen "No": held for it


# -- determinism and the command -----------------------------------------------------


def test_same_seed_same_numbers_other_seed_other_numbers():
    scenario = replace(scenarios(QUICK)[2], chat=replace(BUSY, messages=120))
    first = run_scenario(scenario, seed=3, policies=["sb", "total_lamport"])
    again = run_scenario(scenario, seed=3, policies=["sb", "total_lamport"])
    other = run_scenario(scenario, seed=4, policies=["sb", "total_lamport"])
    assert first.rows == again.rows and first.delays == again.delays
    assert first.rows != other.rows


# -- point-to-point: SES, per-pair FIFO, arrival order ------------------------------------------------------

BUSY_DIRECT = DirectParams(processes=4, messages=400, rate_per_process_hz=0.5, think_median_ms=300.0)


@pytest.fixture(scope="module")
def direct_results():
    workload = generate_direct(BUSY_DIRECT, LOSSY_WIRELESS, seed=3)
    return {name: simulate_direct(workload, name) for name in DIRECT_POLICIES}


def test_direct_workload_has_answers_and_chains_through_a_third_peer():
    workload = generate_direct(BUSY_DIRECT, LOSSY_WIRELESS, seed=3)
    messages = workload.messages
    follow_ups = [m for m in messages if m.follows is not None]
    assert all(messages[m.follows].destination == m.sender for m in follow_ups)
    assert any(m.destination == messages[m.follows].sender for m in follow_ups)
    assert any(m.destination != messages[m.follows].sender for m in follow_ups)
    assert all(m.sender != m.destination for m in messages)


def test_ses_never_delivers_against_causal_order_where_fifo_and_arrival_do(direct_results):
    violations = {name: causal_violations(result) for name, result in direct_results.items()}
    assert violations["ses"] == 0
    assert 0 < violations["pair_fifo"] < violations["none"]


def test_the_issue_chain_is_a_violation_for_fifo_but_not_for_ses():
    # A -> B (slow), A -> C, C -> B following it up: B must read A's note first.
    messages = (DirectMessage(0, 0, 1, None, 0.0, 0.0), DirectMessage(1, 0, 2, None, 1.0, 0.0),
                DirectMessage(2, 2, 1, 1, 0.0, 5.0))
    workload = DirectWorkload(3, messages, (500.0, 10.0, 10.0), WIRELESS)
    outcome = {name: simulate_direct(workload, name) for name in DIRECT_POLICIES}
    assert causal_violations(outcome["none"]) == causal_violations(outcome["pair_fifo"]) == 1
    assert causal_violations(outcome["ses"]) == 0
    assert [index for kind, index in outcome["ses"].events[1]] == [0, 2]
    assert outcome["ses"].delivery_ms[2] == 500.0


def test_direct_rows_show_the_cost_of_ses(direct_results):
    rows = {name: summarize_direct("direct_loss", result) for name, result in direct_results.items()}
    assert rows["none"].held_fraction == 0 and rows["none"].header_bytes == 0
    assert rows["ses"].held_fraction >= rows["pair_fifo"].held_fraction > 0
    assert rows["ses"].header_bytes > rows["pair_fifo"].header_bytes == 4
    assert rows["ses"].parent_violations == 0 < rows["pair_fifo"].parent_violations


def test_cli_quick_run_writes_table_csv_and_plots(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "out"), "--quick", "--seed", "2"]) == 0
    printed = capsys.readouterr().out
    assert "total_lamport" in printed and "can tell" in printed
    with (tmp_path / "out" / "results.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert tuple(rows[0]) == COLUMNS
    assert {r["policy"] for r in rows} == set(POLICIES) | set(OPS_POLICIES) | set(DIRECT_POLICIES)
    assert len(rows) == sum(len(s.policies) for s in scenarios(QUICK)) + len(DIRECT_SCENARIOS) * len(DIRECT_POLICIES)
    assert {r["scenario"] for r in rows if r["policy"] == "ses"} == {name for name, _ in DIRECT_SCENARIOS}
    assert {r["scenario"] for r in rows if r["policy"] == "obg"} == {"wireless_ops"}
    for r in rows:
        if r["policy"] in ("sb", "causal", "ses"):
            assert float(r["parent_violations"]) == 0
    with (tmp_path / "out" / "sweep.csv").open() as handle:
        assert {int(r["processes"]) for r in csv.DictReader(handle)} == {2, 4, 8, 16, 32, 64}
    for name in ("delay_cdf.png", "delay_vs_group_size.png"):
        assert (tmp_path / "out" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--out", "x", "--seed", "abc"], "seed must be a whole number"),
        (["--out", "x", "--seed", "-1"], "seed must not be negative"),
        ([], "--out"),
    ],
)
def test_bad_arguments_get_a_clear_error(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_out_must_not_be_a_file(tmp_path, capsys):
    existing = tmp_path / "file.txt"
    existing.write_text("x")
    with pytest.raises(SystemExit):
        main(["--out", str(existing)])
    assert "not a directory" in capsys.readouterr().err
