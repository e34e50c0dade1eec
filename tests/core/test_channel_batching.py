"""A burst of new messages leaves in DATA_BATCH datagrams that each fit one Ethernet frame."""

import random

import pytest

from m2mc.middleware import channel as channel_module
from m2mc.middleware import crypto, wire
from m2mc.middleware.channel import GroupChannel
from m2mc.middleware.types import UsageError

WRITER = crypto.Identity.generate()


def burst(gid: str, rng: random.Random, count: int) -> GroupChannel:
    group = GroupChannel(gid, WRITER, 1, lambda g, m: [], random.Random(1))
    for i in range(count):
        length = rng.choice([1, 5, 30, 100, 400, 1100])
        text = "".join(rng.choice("aé✓") if rng.random() < 0.3 else "x" for _ in range(length))
        parent = (WRITER.pid, rng.randrange(1, i + 1)) if i and rng.random() < 0.7 else None
        group.compose("n" * rng.choice([0, 6, 64]), text, parent, 1.7e9 + i)
    return group


@pytest.mark.parametrize("gid_length", [1, 32, wire.MAX_ID])
@pytest.mark.parametrize("sealed", [False, True])
def test_batches_fit_one_frame_and_carry_every_message_once(gid_length, sealed):
    rng = random.Random(gid_length)
    cipher = crypto.GroupCipher(bytes(32)) if sealed else None
    for _ in range(40):
        count = rng.randrange(1, 80)
        group = burst("g" * gid_length, rng, count)
        batches = group.datagrams_to_send()
        seqnos = [item[0] for batch in batches for item in batch.items]
        assert seqnos == list(range(1, count + 1))
        for batch in batches:
            assert len(batch.items) <= crypto.MAX_BATCH
            size = len(wire.encode(WRITER, batch, cipher))
            if len(batch.items) > 1:  # a single long message may need fragments; a batch never does
                assert size <= channel_module.FRAME_PAYLOAD
            assert wire.decode(wire.encode(WRITER, batch, cipher), lambda gid: cipher).message.items == batch.items


def test_a_burst_of_short_messages_shares_datagrams():
    group = GroupChannel("g" * 32, WRITER, 1, lambda g, m: [], random.Random(1))
    for i in range(100):
        group.compose("Ann", f"message number {i}", None, 1.7e9)
    batches = group.datagrams_to_send()
    assert len(batches) <= 100 // 15  # about 20 such messages fit one frame
    assert {proof[:64] for proof in batches[0].proofs} == {batches[0].signature}


def test_own_messages_are_delivered_signed_and_only_after_datagrams_to_send():
    # datagrams_to_send() signs the burst and gives the deliveries their proofs: delivered before
    # it, our own messages went out unsigned to the store, and a member could not relay them.
    group = GroupChannel("g", WRITER, 1, lambda g, m: [], random.Random(1))
    group.compose("Ann", "hello", None, 1.7e9)
    with pytest.raises(UsageError, match="datagrams_to_send"):
        group.deliveries()
    (batch,) = group.datagrams_to_send()
    (delivered,) = group.deliveries()
    assert delivered.signature == batch.proofs[0] != b""
    assert group.deliveries() == []  # nothing composed since: no need to flush first
