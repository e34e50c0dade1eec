"""M2MC middleware: wire codec, protocol cores (MOP, GJLP, MSP) and their thin I/O layers.

Nothing in this package imports Qt; the GUI (`ui`) and entry points (`app`) build on it.
"""

__version__ = "0.1.0"
