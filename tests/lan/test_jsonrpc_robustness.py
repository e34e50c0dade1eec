"""m2mc-peer's request loop under hostile JSON-RPC input: every line gets a clean answer,
and the peer keeps answering (the real process, on a private loopback namespace)."""

import json
import time

import pytest

from m2mc.middleware.commands import Whoami
from m2mc.app.peer import MAX_BATCH, MAX_LINE_BYTES, MAX_NESTING, JsonRpcPeer, LineSplitter, to_json_line
from tests.testbed.lan import LoopbackHost, PeerProcess

# Done-when bound of issue 16: the peer answers whoami this soon after each hostile line.
WHOAMI_WITHIN = 2.0

WHOAMI = '{"jsonrpc": "2.0", "id": %s, "method": "whoami"}'

# (name, the line, the error codes its answer carries: None for no answer at all)
HOSTILE_LINES = [
    ("1,000-deep arrays", "[" * 1000 + "]" * 1000, [-32600]),
    ("1,000-deep objects", '{"a":' * 1000 + "1" + "}" * 1000, [-32600]),
    ("33-deep params", '{"jsonrpc": "2.0", "id": 5, "method": "whoami", "params": '
     + '{"a": ' * MAX_NESTING + "1" + "}" * (MAX_NESTING + 1), [-32600]),
    ("5,000-digit id", WHOAMI % ("9" * 5000), [-32700]),
    ("object id", WHOAMI % '{"a": 1}', [-32600]),
    ("array id", WHOAMI % "[1]", [-32600]),
    ("boolean id", WHOAMI % "true", [-32600]),
    ("NaN id", WHOAMI % "NaN", [-32700]),
    ("Infinity id", WHOAMI % "-Infinity", [-32700]),
    ("1e999 id", WHOAMI % "1e999", [-32700]),
    ("not UTF-8", b'{"jsonrpc": "2.0", "id": "\xff\xfe", "method": "whoami"}', None),
    ("empty batch", "[]", [-32600]),
    ("batch of garbage", "[1, 2, 3]", [-32600, -32600, -32600]),
    ("batch of notifications", '[{"jsonrpc": "2.0", "method": "whoami"}]', None),
    (f"batch of {MAX_BATCH + 1}", "[" + ",".join([WHOAMI % 1] * (MAX_BATCH + 1)) + "]", [-32600]),
    ("stats with NaN params", '{"jsonrpc": "2.0", "id": 9, "method": "stats", "params": {"x": NaN}}', [-32700]),
    ("over-long line", "x" * (MAX_LINE_BYTES + 10), [-32600]),
    ("over-long line ending in a request", '"' + "y" * (2 * MAX_LINE_BYTES) + '"' + WHOAMI % '"tail"', [-32600]),
    ("params a list", '{"jsonrpc": "2.0", "id": 10, "method": "whoami", "params": [1]}', [-32602]),
    # One past the largest seqno (an SQLite INTEGER) is a parameter error, not "internal error" from the
    # store; GID is a group of the peer's, so the answer is about the root, not an unknown group.
    ("thread root seqno 2**63", '{"jsonrpc": "2.0", "id": 10, "method": "thread", "params": '
     f'{{"gid": "GID", "root": "{"ab" * 16}:{2**63}"}}}}', [-32602]),
    ("root seqno in Arabic-Indic digits", '{"jsonrpc": "2.0", "id": 10, "method": "thread", "params": '
     f'{{"gid": "GID", "root": "{"ab" * 16}:\u0663\u0663"}}}}', [-32602]),
]


@pytest.mark.netns
def test_the_peer_answers_whoami_within_2_s_after_each_hostile_line(tmp_path):
    host = LoopbackHost()
    try:
        peer = PeerProcess(host.name, "127.0.0.1", tmp_path / "a", "Ann", extra=["--no-zeroconf"])
    except BaseException:
        host.close()
        raise
    latencies = {}
    try:
        gid = peer.call("create_group", {"desc": "hostile lines"})["gid"]
        for name, line, codes in HOSTILE_LINES:
            raw = line if isinstance(line, bytes) else line.replace("GID", gid).encode()
            with peer._cond:
                peer._responses.clear()
                peer.batches.clear()
            started = time.monotonic()
            peer.send_raw(raw)
            assert peer.call("whoami", timeout=WHOAMI_WITHIN)["name"] == "Ann", name
            latencies[name] = time.monotonic() - started
            with peer._cond:
                answers = [r for rid, r in peer._responses.items()] + [r for batch in peer.batches for r in batch]
            got = sorted(r["error"]["code"] for r in answers if "error" in r)
            if name == "not UTF-8":  # decoded with replacement characters: a valid request
                assert not got, answers
            else:
                assert got == sorted(codes or []), (name, answers)
            assert all(r.get("id") in (None, 5, 9, 10) for r in answers if "error" in r), (name, answers)
            assert not any(r.get("id") == "tail" for r in answers), "the tail of a long line ran"
        # A good batch: answered as one array, in any order, notifications left out.
        peer.send_raw(json.dumps([
            {"jsonrpc": "2.0", "id": "w", "method": "whoami"},
            {"jsonrpc": "2.0", "method": "advertise"},
            {"jsonrpc": "2.0", "id": 2.5, "method": "no_such_method"},
            {"jsonrpc": "2.0", "id": None, "method": "stats"},
            {"jsonrpc": "2.0", "id": "g", "method": "create_group", "params": {"desc": "made in a batch"}},
        ]).encode())
        batch = peer.wait_for(lambda: peer.batches and peer.batches[-1], timeout=10, what="batch answer")
        by_id = {r["id"]: r for r in batch}
        assert set(by_id) == {"w", 2.5, None, "g"}
        assert by_id["g"]["result"]["gid"] in {g["gid"] for g in peer.call("list_groups")}
        assert by_id["w"]["result"]["name"] == "Ann" and by_id[2.5]["error"]["code"] == -32601
        assert "datagrams_in" in by_id[None]["result"]
        assert peer.proc.poll() is None
    finally:
        code = peer.shutdown()
        host.close()
    print("whoami answered, from sending each hostile line (ms): "
          + ", ".join(f"{name}: {seconds * 1000:.1f}" for name, seconds in latencies.items()))
    assert code == 0
    assert max(latencies.values()) < WHOAMI_WITHIN


class _Manager:
    """Answers whoami, the one command these tests send."""

    def execute(self, command):
        assert isinstance(command, Whoami), command
        return {"pid": "p" * 32, "name": "Ann"}


def handle(line):
    peer = JsonRpcPeer(lambda obj: None)
    peer.manager = _Manager()
    return peer.handle_line(line)


def test_ids_follow_json_rpc_2_0():
    for good in ['"a"', "7", "-2.5", "null", "1" * 4000]:
        response = handle(WHOAMI % good)
        assert response["result"]["name"] == "Ann" and response["id"] == json.loads(good)
    for bad in ["true", "false", "{}", "[]"]:
        response = handle(WHOAMI % bad)
        assert response == {"jsonrpc": "2.0", "id": None,
                            "error": {"code": -32600, "message": "malformed request: 'id' must be a string, a number or null"}}


def test_a_notification_gets_no_answer_and_a_batch_one_array():
    assert handle('{"jsonrpc": "2.0", "method": "whoami"}') is None
    answer = handle(f"[{WHOAMI % 1}, {WHOAMI % 2}, 3]")
    assert [r.get("id") for r in answer] == [1, 2, None] and answer[2]["error"]["code"] == -32600


def test_nan_and_infinity_are_never_written():
    line = to_json_line({"jsonrpc": "2.0", "id": 4, "result": {"x": float("nan")}})
    assert json.loads(line)["error"]["code"] == -32603 and "NaN" not in line
    assert to_json_line({"jsonrpc": "2.0", "method": "n", "params": [float("inf")]}) == ""


def test_line_splitter_reports_a_long_line_once_and_skips_its_tail():
    splitter = LineSplitter(limit=10)
    assert splitter.feed(b"short\nalso") == [b"short"]
    assert splitter.feed(b" short\n") == [b"also short"]
    assert splitter.feed(b"0123456789ABC") == [None]  # reported as soon as it passes the limit
    assert splitter.feed(b"DEF {tail}") == []
    assert splitter.feed(b"\nnext\n") == [b"next"]
    assert splitter.feed(b"0123456789ABCDEF\nok\n") == [None, b"ok"]
    assert splitter.feed(b"last") == [] and splitter.finish() == [b"last"]
