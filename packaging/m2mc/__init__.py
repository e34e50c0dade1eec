"""M2MC, serverless threaded chat for one local network: the one import package the wheel installs.

Its subpackages are the repository's top-level folders, mapped in setup.py: `m2mc.middleware`
(Qt-free protocols, transport and store), `m2mc.ui` (the PySide6 interface) and `m2mc.app`
(the programs, the analytics, the ordering study and the benchmarks).
"""
