"""The message kinds registry (middleware/kinds.py): bodies to kinds and payloads and back, what each
kind indexes, exports and shows, a newer peer's kind kept and shown as such, and learned on upgrade."""

import dataclasses
import json

import pytest

from m2mc.middleware import chatops, crypto, kinds, wire
from m2mc.middleware.files import FileOffer
from m2mc.middleware.memory_store import MemoryStore
from m2mc.middleware.store import Store
from m2mc.middleware.types import ChatMessage

ANN = crypto.Identity.generate()
OFFER = FileOffer("plan.pdf", 2048, "application/pdf", "ab" * 32, 256 * 1024, "cd" * 32)
NEWER = "\x00" + "poll9" + '{"question":"lunch?"}'  # a kind a newer peer has and this one does not


def message(seqno, text, parent=None, gid="g"):
    return ChatMessage(gid, (ANN.pid, seqno), parent, "Ann", text, 1_700_000_000_000 + seqno,
                       1_700_000_000_500 + seqno, 0, bytes(66), ANN.public_key)


@pytest.mark.parametrize("kind, payload", [(kinds.CHAT, "hello"), (kinds.CHAT, ""),
                                           (kinds.OPERATION, '["react",null,1,"","x",true]'),
                                           (kinds.FILE_OFFER, '{"name":"a"}')])
def test_a_body_is_its_kind_and_payload_and_back(kind, payload):
    body = kinds.body(kind, payload)
    assert kinds.split(body) == (kind, payload) and kinds.kind_of(body) == kind and kinds.payload_of(body) == payload
    assert (body == payload) == (kind == kinds.CHAT)  # chat text travels as it is


def test_what_each_kind_indexes_exports_and_shows():
    offer, op = OFFER.to_text(), chatops.encode("react", None, 1, emoji="\U0001F44D")
    assert kinds.kind_of(offer) == kinds.FILE_OFFER and kinds.kind_of(op) == kinds.OPERATION
    assert [kinds.indexed(b) for b in ("hi <@x>", offer, op, NEWER)] == ["hi <@x>", "plan.pdf", None, None]
    assert [kinds.listed(b) for b in ("hi", offer, op, NEWER)] == [True, True, False, True]
    assert kinds.exported("hi") == {"kind": "chat", "text": "hi"}
    exported = kinds.exported(offer)
    assert exported["kind"] == "file" and json.loads(exported["text"])["name"] == "plan.pdf"
    assert exported["file"] == OFFER.to_json()
    assert kinds.shown(offer, {}).startswith("\U0001F4CE plan.pdf")
    assert kinds.shown(NEWER, {}) == "a message of a kind this version of M2MC cannot show"
    assert kinds.parse(offer, kinds.FILE_OFFER) == OFFER and kinds.parse(op, kinds.OPERATION)[0] == "react"
    with pytest.raises(ValueError):
        kinds.parse("hi", kinds.FILE_OFFER)
    with pytest.raises(ValueError):
        kinds.parse(kinds.body(kinds.FILE_OFFER, "{"), kinds.FILE_OFFER)
    stored = message(1, offer)
    assert (stored.kind, stored.payload) == (kinds.FILE_OFFER, kinds.payload_of(offer))
    assert stored.to_json()["file"] == OFFER.to_json() and stored.to_json()["kind"] == "file"
    data = wire.signed_data(ANN, "g", 1, None, 5, "Ann", offer)
    assert (data.kind, data.payload) == (stored.kind, stored.payload)


def test_a_newer_peer_s_kind_is_unknown_here_and_a_nul_without_a_tag_is_chat():
    assert kinds.split(NEWER) == (kinds.UNKNOWN, NEWER[1:])
    assert kinds.kind_of("\x00 just a NUL") == kinds.CHAT and kinds.kind_of("\x00") == kinds.CHAT
    assert kinds.exported(NEWER)["kind"] == "unknown"


@pytest.mark.parametrize("text, refused", [("hello", False), ("\x00 not a tag", False),
                                           (chatops.encode("pin", None, 1), True), (OFFER.to_text(), True),
                                           (NEWER, True)])
def test_a_chat_text_cannot_take_another_kind_s_form(text, refused):
    assert (kinds.chat_refusal(text) is not None) == refused


def test_a_kind_whose_module_is_not_imported_says_so():
    kind = dataclasses.replace(kinds.KINDS[kinds.CHAT], parse=kinds._NotImplemented("poll", "polls"))
    with pytest.raises(LookupError, match="middleware.polls"):
        kind.parse("{}")


@pytest.fixture(params=["sqlite", "memory"])
def store(request, tmp_path):
    made = Store(tmp_path / "m.db") if request.param == "sqlite" else MemoryStore()
    yield made
    made.close()


def test_each_kind_is_found_by_group_and_kind_in_both_stores(store):
    store.add_messages([message(1, "hi"), message(2, OFFER.to_text()),
                        message(3, chatops.encode("pin", None, 1), (ANN.pid, 1)), message(4, NEWER),
                        message(1, OFFER.to_text(), gid="other")])
    store.commit()
    assert [m.mid[1] for m in store.of_kind("g", kinds.FILE_OFFER)] == [2] == [m.mid[1] for m in store.file_offers("g")]
    assert [m.mid[1] for m in store.of_kind("g", kinds.OPERATION)] == [3]
    assert [m.mid[1] for m in store.of_kind("g", kinds.UNKNOWN)] == [4]
    assert [m.mid[1] for m in store.history_page("g")] == [1, 2, 4]  # a newer kind shows, as a line saying so
    assert [m.mid[1] for m in store.of_kind("other", kinds.FILE_OFFER)] == [1]


def test_an_upgrade_that_learns_a_kind_finds_what_was_stored_before_as_unknown(tmp_path, monkeypatch):
    store = Store(tmp_path / "m.db")
    store.add_messages([message(1, NEWER), message(2, "hi")])
    store.commit()
    store.close()
    poll = kinds.Kind("poll", "poll9", True, json.loads, lambda payload: json.loads(payload)["question"],
                      lambda payload: {}, lambda payload, names: "a poll")
    monkeypatch.setitem(kinds.KINDS, "poll", poll)
    monkeypatch.setitem(kinds._BY_TAG, "poll9", poll)
    upgraded = Store(tmp_path / "m.db")
    try:
        assert [m.mid[1] for m in upgraded.of_kind("g", "poll")] == [1] and upgraded.of_kind("g", kinds.UNKNOWN) == []
    finally:
        upgraded.close()
