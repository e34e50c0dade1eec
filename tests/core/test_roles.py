"""The roles core (middleware.roles) and its wire types: who may change roles, order independence, refusals."""

from __future__ import annotations

import itertools

import pytest

from m2mc.middleware import crypto, roles, wire

GID = "g" * 26


def _people(n: int) -> list[crypto.Identity]:
    return [crypto.Identity.from_bytes(bytes([i + 1]) * 32) for i in range(n)]


def test_owner_makes_admins_and_admins_remove():
    owner, bob, cat, dan = _people(4)
    core = roles.GroupRoles(GID, owner.pid)
    assert core.role(owner.pid) == roles.OWNER and core.role(bob.pid) == roles.MEMBER
    core.make(owner, "admin", bob.pid)
    assert core.role(bob.pid) == roles.ADMIN
    bobs = roles.GroupRoles(GID, owner.pid)
    for record in core.records():
        bobs.add(record)
    removal = bobs.make(bob, "remove", cat.pid, cut=3, epoch=7, key_check=bytes(16))
    assert core.add(removal) and core.is_removed(cat.pid) and core.cut(cat.pid) == 3
    assert [e.epoch for e in core.epochs] == [7]
    core.make(owner, "member", bob.pid)
    assert core.role(bob.pid) == roles.MEMBER
    with pytest.raises(PermissionError):
        bobs.make(dan, "admin", dan.pid)  # a non-owner cannot make itself admin


def test_refusals_non_admin_forged_replayed_and_owner():
    owner, bob, cat = _people(3)
    core = roles.GroupRoles(GID, owner.pid)
    # A member that is not an admin: its removal is held but inert.
    rogue = wire.sign_role(bob, GID, 1, "remove", cat.pid)
    assert not core.add(rogue) and not core.is_removed(cat.pid)
    # A member making itself admin: inert.
    assert not core.add(wire.sign_role(bob, GID, 2, "admin", bob.pid))
    assert core.role(bob.pid) == roles.MEMBER
    # A forged removal (signed by bob, claiming the owner's key): refused at the signature.
    forged = wire.RoleRecord(GID, owner.public_key, 3, "remove", cat.pid, 0, 0, b"", bob.sign(b"anything"))
    assert not core.add(forged) and core.refused == 1
    # Another group's record: refused.
    assert not core.add(wire.sign_role(owner, "h" * 26, 1, "remove", cat.pid)) and core.refused == 2
    # The owner cannot be removed, not even by an admin.
    core.make(owner, "admin", bob.pid)
    assert not core.add(wire.sign_role(bob, GID, 9, "remove", owner.pid)) and not core.is_removed(owner.pid)
    # A replayed removal changes nothing.
    removal = core.make(owner, "remove", cat.pid)
    assert not core.add(removal) and core.duplicates == 1
    with pytest.raises(PermissionError):
        core.make(owner, "remove", cat.pid)
    # The removed member cannot act any more, even as the author of an admin's record.
    assert not core.add(wire.sign_role(cat, GID, 20, "remove", bob.pid)) and not core.is_removed(bob.pid)


def test_a_grant_that_arrives_late_makes_the_admins_removal_hold():
    owner, bob, cat = _people(3)
    grant = wire.sign_role(owner, GID, 1, "admin", bob.pid)
    removal = wire.sign_role(bob, GID, 2, "remove", cat.pid)
    core = roles.GroupRoles(GID, owner.pid)
    core.add(removal)
    assert not core.is_removed(cat.pid)
    core.add(grant)
    assert core.is_removed(cat.pid)


def test_any_arrival_order_gives_the_same_state():
    owner, bob, cat, dan, eve = _people(5)
    records = [
        wire.sign_role(owner, GID, 1, "admin", bob.pid),
        wire.sign_role(owner, GID, 1, "admin", dan.pid),
        wire.sign_role(bob, GID, 2, "remove", cat.pid, epoch=5),
        wire.sign_role(dan, GID, 2, "remove", bob.pid, epoch=6),  # concurrent with bob's removal of cat
        wire.sign_role(owner, GID, 3, "member", dan.pid),
        wire.sign_role(dan, GID, 4, "remove", eve.pid),  # after dan was unmade: inert
    ]
    states = set()
    for order in itertools.permutations(records):
        core = roles.GroupRoles(GID, owner.pid)
        for record in order:
            core.add(record)
        states.add((frozenset(core.admins), frozenset(core.removed), tuple(e.epoch for e in core.epochs)))
    assert len(states) == 1
    admins, removed, epochs = states.pop()
    # Order (clock, author pid): both clock-2 removals hold whichever author sorts first, and the
    # second only if its author was not removed by the first.
    assert eve.pid not in removed and admins == frozenset()


def test_a_full_table_gives_way_with_inert_records_first(monkeypatch):
    monkeypatch.setattr(roles, "MAX_RECORDS", 10)
    owner, bob, cat = _people(3)
    core = roles.GroupRoles(GID, owner.pid)
    for clock in range(1, 11):
        core.add(wire.sign_role(bob, GID, clock, "admin", bob.pid))  # inert: bob is no owner
    assert core.add(wire.sign_role(owner, GID, 11, "admin", cat.pid))
    assert core.role(cat.pid) == roles.ADMIN and len(core.records()) == 10


def test_wire_roundtrip_of_the_new_types():
    owner, bob = _people(2)
    removal = wire.sign_role(owner, GID, 1, "remove", bob.pid, cut=4, epoch=2**40, key_check=bytes(16))
    keys = ((owner.pid, crypto.seal_epoch_key(owner.direct_public, bytes(32))),)
    part = wire.Rekey(GID, removal, 0, keys, owner.sign(wire.rekey_bytes(GID, removal.epoch, 0, keys)))
    for message in (wire.Roles(GID, (removal,)), part, wire.KeyRequest(GID, 5, b""),
                    wire.sign_admit(owner, GID, bob.pid, 5, keys[0][1], keys[0][1])):
        assert wire.decode(wire.encode(bob, message)).message == message
    assert wire.verify_rekey(part)
    tampered = wire.Rekey(GID, removal, 1, keys, part.keys_sig)
    assert not wire.verify_rekey(tampered)
    assert crypto.open_epoch_key(owner, keys[0][1]) == bytes(32)
    assert crypto.open_epoch_key(bob, keys[0][1]) is None
    with pytest.raises(wire.WireError):
        wire.decode(wire.encode(bob, wire.KeyRequest(GID, 5, b"")) [:-1] + b"\0")


def test_epoch_sealing_names_the_epoch_and_old_keys_still_open():
    owner, = _people(1)
    keys = crypto.GroupKeys({0: bytes(32)}, 0)
    old = wire.encode(owner, wire.Heartbeat(GID, 1, 5), keys)
    keys.add(0x1234, bytes([9]) * 32)
    keys.use(0x1234)
    new = wire.encode(owner, wire.Heartbeat(GID, 2, 5), keys)
    assert wire.decode(old, {GID: keys}.get).epoch == 0
    assert wire.decode(new, {GID: keys}.get).epoch == 0x1234
    only_old = crypto.GroupKeys({0: bytes(32)}, 0)
    with pytest.raises(wire.SealedError) as refused:
        wire.decode(new, {GID: only_old}.get)
    assert (refused.value.gid, refused.value.epoch, refused.value.sender) == (GID, 0x1234, owner.pid)
    for bad in ("x~", "x~0", "x~zz", "x~" + "f" * 17, "~1"):
        with pytest.raises(wire.SealedError):
            wire.parse_sealed_tag(bad)


def test_the_rekey_bench_runs_and_every_part_fits_one_frame():
    from m2mc.app.bench import rekey

    remover_cpu, parts, member_cpu = rekey.run(30)
    assert len(parts) == 4 and max(len(p) for p in parts) < 1_400
