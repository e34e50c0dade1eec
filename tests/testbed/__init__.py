"""Test and benchmark support that the wheel does not ship: private network namespaces
(``tests.testbed.netns``) and the LAN of ``m2mc-peer`` processes built on them (``tests.testbed.lan``,
with ``udp_tap.py`` run inside a namespace host), fault injection (``tests.testbed.faults``), and the
in-process simulators of channel cores (``tests.testbed.sim``) and whole peers (``tests.testbed.peer_sim``).
Every test imports them as ``tests.testbed.…``: pytest puts the repository root on ``sys.path``
(``pythonpath`` in pyproject.toml), and ``python -m m2mc.app.bench.…`` run from the root finds it in the
current directory."""
