"""Display names, in process: which a peer refuses, how received ones are shown, which look alike
(middleware.names), and that a message's author is shown by its member record, never by the name
the message carries (PeerCore.by_record).  Issue 26, item 5."""

import pytest

from m2mc.middleware import crypto, names, rules, wire
from m2mc.middleware.addresses import Arrival, Via
from m2mc.middleware.events import MessagesDelivered
from m2mc.middleware.memory_store import MemoryStore
from m2mc.middleware.peer_core import PeerCore
from m2mc.middleware.types import Member, UsageError

ALICE = "alice"
# Each shows as "alice" (or nearly): the look-alikes and two more.
LOOK_ALIKES = {
    "Cyrillic а": "\u0430lice",
    "zero-width space": "alice\u200b",
    "right-to-left override": "\u202eecila",
    "override closed again": "\u202eecila\u202c",
    "upper case": "ALICE",
    "full-width": "\uff41\uff4c\uff49\uff43\uff45",
    "capital I for l": "aIice",
    "soft hyphen": "al\u00adice",
    "all Cyrillic": "\u0430l\u0456\u0441\u0435",
}
DIFFERENT = ["alicia", "bob", "Alice Smith", "a lice", "mallory", "ălice"]


@pytest.mark.parametrize("name", LOOK_ALIKES.values(), ids=LOOK_ALIKES.keys())
def test_a_look_alike_of_a_members_name_is_marked_with_both(name):
    members = [Member("a" * 32, ALICE), Member("b" * 32, "bob"), Member("e" * 32, name)]
    assert names.lookalikes(members) == {"a" * 32, "e" * 32}


@pytest.mark.parametrize("name", DIFFERENT)
def test_names_that_only_resemble_stay_apart(name):
    assert not names.look_alike(name, ALICE)
    assert names.lookalikes([Member("a" * 32, ALICE), Member("e" * 32, name)]) == set()


def test_the_skeleton_is_unicodes_uts39_mapping():
    assert len(names.prototypes()) > 6_000  # Unicode's confusables.txt, read whole
    assert names.skeleton("\u0430") == "a"  # CYRILLIC SMALL LETTER A
    assert names.skeleton("m") == "rn"  # a prototype of two code points
    assert names.look_alike("rnallory", "mallory")
    assert names.skeleton(names.skeleton("paypal")) == names.skeleton("paypal")  # idempotent


@pytest.mark.parametrize("name, code_point", [
    ("\u202eecila", "U+202E RIGHT-TO-LEFT OVERRIDE"),
    ("alice\u200b", "U+200B ZERO WIDTH SPACE"),
    ("a\u200dlice", "U+200D ZERO WIDTH JOINER"),
    ("\u2067alice", "U+2067 RIGHT-TO-LEFT ISOLATE"),
    ("ali\u3164ce", "U+3164 HANGUL FILLER"),
    ("ali\nce", "U+000A"),
])
def test_a_new_name_with_an_invisible_or_direction_character_is_refused_clearly(name, code_point):
    with pytest.raises(UsageError, match="invisible or text-direction characters") as refused:
        rules.check_name(name)
    assert code_point in str(refused.value)


@pytest.mark.parametrize("name", ["Zoë", "José Ñúñez", "Ann 👩\u200d💻", "Ann ❤\ufe0f", "🇫🇷 Ann", "1\ufe0f\u20e3 Ann",
                                  "Аня", "דנה", "李雷"])
def test_emoji_sequences_and_other_scripts_stay_allowed(name):
    assert rules.check_name(name) == name
    assert names.shown(name) == name


def test_a_received_name_is_shown_without_what_a_new_one_may_not_hold():
    assert names.shown("\u202eecila\u202c") == "ecila"
    assert names.shown("alice\u200b") == "alice"
    assert names.shown("al\nice \u2066x") == "al ice x"
    assert names.shown("\u200b") == ""


def test_a_member_posting_as_alice_is_shown_by_its_own_record_and_counted():
    alice = PeerCore(MemoryStore(), 0.0, ALICE)
    gid = alice.create_group("Payroll", crypto.new_salt(), None, 1_700_000_000.0)
    mal = crypto.Identity.generate()
    wall = 1_700_000_001.0
    alice.receive(wire.encode(mal, wire.Join(wire.sign_member(mal, gid, "Mal", 1, True))), Arrival(None, Via.CONTROL), 1.0, wall)
    for seqno, name in ((1, ALICE), (2, "\u0430lice"), (3, "Mal")):
        data = wire.signed_data(mal, gid, seqno, None, int(wall * 1000), name, f"message {seqno}")
        alice.receive(wire.encode(mal, data), Arrival(None, Via.MULTICAST), 1.0, wall)
    alice.flush(1.0)
    delivered = {m.mid[1]: m for event in alice.events() if isinstance(event, MessagesDelivered)
                 for m in event.messages}
    history = {m.mid[1]: m for m in alice.history(gid)}
    for shown in (delivered, history):
        assert [shown[s].sender_name for s in (1, 2, 3)] == ["Mal", "Mal", "Mal"]
        assert [shown[s].signed_name for s in (1, 2, 3)] == [ALICE, "\u0430lice", None]
    assert history[1].to_json()["sender_name"] == "Mal" and history[1].to_json()["signed_name"] == ALICE
    assert "signed_name" not in history[3].to_json()
    assert alice.stats_dict()["sender_names_differing"] == 2
    # The store keeps what was signed: a relay still verifies.
    assert [m.name for m in alice.store.fetch(gid, [(mal.pid, 1)])] == [ALICE]

    # A new name in the member's own record shows on its old messages too.
    alice.receive(wire.encode(mal, wire.Join(wire.sign_member(mal, gid, "Mallory", 2, True))), Arrival(None, Via.CONTROL), 2.0, wall)
    alice.flush(2.0)
    assert {m.sender_name for m in alice.history(gid) if m.sender == mal.pid} == {"Mallory"}

    # With no record of the author at all, the signed name is never shown bare.
    del alice.gjlp.groups[gid].members[mal.pid]
    unverified = {m.mid[1]: m.sender_name for m in alice.history(gid) if m.sender == mal.pid}
    fingerprint = crypto.pid_of(mal.public_key)[:4]
    assert unverified[1].startswith("alice (unverified · " + fingerprint) and unverified[1] != ALICE
    assert all("unverified" in name for name in unverified.values())
