"""GJLP's group tables under floods (issue 26, item 4), in-process with a hand-set clock:
strangers' groups and zeroconf sightings never push out a group this peer has reason to keep,
and fetching descriptors costs one ADV per FETCH_INTERVAL, fairly shared between addresses."""

import random

import pytest

from m2mc.middleware import crypto, gjlp, wire
from m2mc.middleware.gjlp import FETCH_INTERVAL, MAX_FETCH, Gjlp

ANN = crypto.Identity.generate()


@pytest.fixture(autouse=True)
def small_tables(monkeypatch):
    """Tables a few dozen groups large, so floods take milliseconds (the rules do not depend on size)."""
    monkeypatch.setattr(gjlp, "MAX_GROUPS", 40)
    monkeypatch.setattr(gjlp, "MAX_STRANGER_GROUPS", 10, raising=False)
    monkeypatch.setattr(gjlp, "ADMIT_BURST", 5, raising=False)


def peer():
    return Gjlp(crypto.Identity.generate(), "Me", random.Random(1))


def group(creator, desc="Payroll", n=0):
    """A GROUPS_INFO of a new open group with its creator's own record, as its creator sends it."""
    d = wire.sign_descriptor(creator, desc, False, "", 0, 0, bytes(16), b"", f"239.255.{1 + n // 250}.{1 + n % 250}",
                             47477, 1_000 + n)
    return d.gid, wire.GroupsInfo((wire.GroupInfo(d.gid, d, (wire.sign_member(creator, d.gid, "x", 1, True),)),))


def stranger_flood(p, count, now, start=0):
    """``count`` fresh keys' groups, all within one second of ``now``."""
    for i in range(count):
        mallory = crypto.Identity.generate()
        p.receive(mallory.pid, group(mallory, f"spam {i}", start + i)[1], now + i / count)


def test_a_flood_of_strangers_groups_never_evicts_a_group_seen_before_it():
    p = peer()
    gid, message = group(ANN)
    p.receive(ANN.pid, message, 1.0)
    stranger_flood(p, 200, now=2.0)
    assert gid in p.groups and p.groups[gid].verified
    p.join(gid, 3.0)
    assert p.is_member(gid)
    assert len(p.groups) <= gjlp.MAX_GROUPS + gjlp.MAX_STRANGER_GROUPS
    assert p.stranger_groups_evicted >= 200 - gjlp.ADMIT_BURST - gjlp.MAX_STRANGER_GROUPS


def test_a_flood_of_zeroconf_sightings_never_evicts_a_verified_group_and_fetches_one_adv_per_interval():
    p = peer()
    gid, message = group(ANN)
    p.receive(ANN.pid, message, 1.0)
    rng = random.Random(26)
    fetches, now = [], 2.0
    for n in range(3_000):  # 3,000 sightings in 3 s, each claiming another address
        fake = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz234567") for _ in range(26))
        p.note_zeroconf(fake, f"Payroll {n}", False, 3, now, source=f"10.0.{n // 250}.{n % 250}")
        now += 0.001
        if p.get_timer() is not None and p.get_timer() <= now:
            p.handle_timer(now)
        fetches += p.datagrams_to_send()
    while now < 10.0:
        now += 0.1
        if p.get_timer() is not None and p.get_timer() <= now:
            p.handle_timer(now)
        fetches += p.datagrams_to_send()
    assert gid in p.groups and p.groups[gid].verified
    assert len(p.groups) <= 1 + gjlp.MAX_STRANGER_GROUPS
    assert all(isinstance(m, wire.Adv) and 0 < len(m.gids) <= MAX_FETCH for m in fetches)
    assert len(fetches) <= (now - 2.0) / FETCH_INTERVAL + 1, len(fetches)


def test_fetches_are_shared_between_announcing_addresses():
    p = peer()
    spam = [f"{i:026d}".replace("0", "a") for i in range(3 * MAX_FETCH)]
    for n, fake in enumerate(spam):
        p.note_zeroconf(fake, "spam", False, 1, 1.0 + n / 1000, source="10.0.0.66")
    real, _ = group(ANN)
    p.note_zeroconf(real, "Payroll", False, 2, 2.0, source="10.0.0.1")
    p.handle_timer(p.get_timer())
    (first,) = p.datagrams_to_send()
    assert real in first.gids and len([g for g in first.gids if g in spam]) == gjlp.FETCH_PER_SOURCE
    assert p.get_timer() == pytest.approx(2.0 + FETCH_INTERVAL, abs=1.0)


def test_a_known_peers_group_is_admitted_even_when_the_main_table_is_full_of_strangers_groups(monkeypatch):
    monkeypatch.setattr(gjlp, "ADMIT_BURST", 1_000)  # the flood fills the main table at once
    p = peer()
    lobby, message = group(ANN, "Lobby")
    p.receive(ANN.pid, message, 1.0)
    p.join(lobby, 1.0)  # Ann is a known peer now: she holds a record in a group this peer is in
    stranger_flood(p, 100, now=2.0)
    main = [g for g in p.groups if not p.is_stranger_group(g)]
    assert len(main) == gjlp.MAX_GROUPS
    refused = p.groups_refused
    mallory = crypto.Identity.generate()
    late, late_message = group(mallory, "late", 999)
    p.receive(mallory.pid, late_message, 3.0)
    assert p.is_stranger_group(late) and p.groups_refused == refused + 1  # nothing fresh makes room for it
    payroll, message = group(ANN, "Payroll", 500)
    p.receive(ANN.pid, message, 4.0)
    assert payroll in p.groups and not p.is_stranger_group(payroll)
    assert lobby in p.groups and len([g for g in p.groups if not p.is_stranger_group(g)]) == gjlp.MAX_GROUPS
    # An hour on, a stranger's group unseen since gives way to an admitted one.
    p.receive(mallory.pid, late_message, 3.0 + gjlp.STALE_AFTER + 10)
    assert not p.is_stranger_group(late) and payroll in p.groups and lobby in p.groups


def test_a_group_joined_from_the_stranger_table_is_never_evicted():
    p = peer()
    stranger_flood(p, 20, now=1.0)  # the admission burst is spent
    gid, message = group(ANN)
    p.receive(ANN.pid, message, 2.0)
    assert p.is_stranger_group(gid)
    p.join(gid, 2.0)
    assert not p.is_stranger_group(gid)
    stranger_flood(p, 100, now=3.0, start=100)
    assert p.is_member(gid)
