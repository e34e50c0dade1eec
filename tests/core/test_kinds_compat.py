"""What the release before typed message kinds wrote still reads: a DATA_BATCH it sent (captured as
bytes, tests/core/fixtures/capture_before_kinds.py at d416bc6) and a data dir it left
(fixtures/data-dir-before-kinds.db.gz, made by the same script): a chat message mentioning its
writer, a reaction, a file offer and an edit, by one writer in group "g1"."""

import gzip
from pathlib import Path

from m2mc.middleware import chatops, crypto, kinds, wire
from m2mc.middleware.files import parse_offer
from m2mc.middleware.store import Store
from m2mc.middleware.store_schema import SCHEMA_VERSION

FIXTURES = Path(__file__).parent / "fixtures"
ANN = crypto.Identity.from_bytes(bytes(range(32)))
# wire.encode of that DATA_BATCH, by the code before kinds: the bytes an older peer sends.
CAPTURED_BATCH = bytes.fromhex(
    "96020bd9203536343735616137353436333437346330323835646635646266326263616237c42003a107bff3ce10be1d70dd18e74bc09967e4d6309ba50d5f1ddc8664125531b894a26731949501c0cf0000018bcfe56801a3416e6ed92968656c6c6f203c4035363437356161373534363334373463303238356466356462663262636162373e950292d920353634373561613735343633343734633032383564663564626632626361623701cf0000018bcfe56802a3416e6ed924006f6267315b227265616374222c6e756c6c2c312c22222c22f09f918d222c747275655d950392d920353634373561613735343633343734633032383564663564626632626361623701cf0000018bcfe56803a3416e6ed9dc0066696c65317b226e616d65223a226e6f7465732e747874222c2273697a65223a352c226d696d65223a22746578742f706c61696e222c22736861323536223a2261626162616261626162616261626162616261626162616261626162616261626162616261626162616261626162616261626162616261626162616261626162222c226368756e6b223a3236323134342c22726f6f74223a2263646364636463646364636463646364636463646364636463646364636463646364636463646364636463646364636463646364636463646364636463646364227d950492d920353634373561613735343633343734633032383564663564626632626361623701cf0000018bcfe56804a3416e6ed92a006f6267315b2265646974222c6e756c6c2c322c2268656c6c6f20616761696e222c22222c747275655dc440d1529419e83c3a4484c08cc26517da2fc2597c5aaa39dd636366c1748842c04bca2c1efa5dd2b5a4d760ec53d076f8c72f34a03b82c16f5d45616c8e90c43003c4020000c0")


def test_a_batch_from_the_previous_release_decodes_and_verifies():
    envelope = wire.decode(CAPTURED_BATCH)
    assert envelope.sender == ANN.pid
    batch = envelope.message
    assert [item[0] for item in batch.items] == [1, 2, 3, 4] and len(batch.proofs) == 4
    assert batch.items[0][4] == f"hello <@{ANN.pid}>"
    assert [wire.item_kind(item)[0] for item in batch.items] == [kinds.CHAT, kinds.OPERATION, kinds.FILE_OFFER,
                                                                 kinds.OPERATION]
    assert parse_offer(batch.items[2][4]).name == "notes.txt"


def test_today_s_encoder_writes_the_previous_release_s_bytes():
    """Every kind that release knew travels as it did: its peers read ours, signatures and all."""
    batch = wire.decode(CAPTURED_BATCH).message
    items = [wire.Data("g1", seqno, parent, sent_at, name, kinds.body(*kinds.split(text)), b"")
             for seqno, parent, sent_at, name, text in batch.items]
    assert wire.encode(ANN, wire.sign_burst(ANN, [items])[0]) == CAPTURED_BATCH


def open_old_data_dir(tmp_path) -> Store:
    (tmp_path / "m2mc.db").write_bytes(gzip.decompress((FIXTURES / "data-dir-before-kinds.db.gz").read_bytes()))
    return Store(tmp_path / "m2mc.db")


def test_a_data_dir_from_the_previous_release_opens_with_its_messages(tmp_path):
    store = open_old_data_dir(tmp_path)
    try:
        history = store.history("g1")
        assert [m.mid[1] for m in history] == [1, 2, 3, 4]
        assert [m.kind for m in history] == [kinds.CHAT, kinds.OPERATION, kinds.FILE_OFFER, kinds.OPERATION]
        assert chatops.decode(history[3]).text == "hello again" and chatops.decode(history[1]).emoji == "\U0001F44D"
        assert store._db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
        assert [m.mid[1] for m in store.of_kind("g1", kinds.OPERATION)] == [2, 4]  # the kind column, filled
        assert not store._db.execute("SELECT 1 FROM sqlite_master WHERE name = 'file_offers'").fetchone()
        assert history[2].to_json()["kind"] == "file" and history[2].to_json()["file"]["name"] == "notes.txt"
        assert [m.mid[1] for m in store.file_offers("g1")] == [3]
        assert [m.mid[1] for m in store.mentions(ANN.pid, 10)] == [1]  # an operation mentions no one
        assert [m.mid[1] for m in store.history_page("g1")] == [1, 3]  # operations are no rows of a page
        assert [hit.mid[1] for hit in store.search("notes")] == [3]  # an offer is found by its file name
        assert wire.verify_stored("g1", store.fetch("g1", [(ANN.pid, 3)])[0])  # relayed as signed
    finally:
        store.close()
