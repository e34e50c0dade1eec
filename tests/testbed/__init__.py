"""Test and benchmark support that the wheel does not ship: private network namespaces
(``tests.testbed.netns``) and fault injection (``tests.testbed.faults``).  Importable from a checkout:
pytest puts the repository root on ``sys.path`` (``pythonpath`` in pyproject.toml), and
``python -m m2mc.app.bench.…`` run from the root finds it in the current directory."""
