"""spark-submit's entry point for m2mc-thread-stats: `spark-submit app/analytics/submit.py INPUT... --out DIR`.

spark-submit runs a file as a script, where the package's relative imports cannot resolve, so this
file imports nothing of ours by path: it runs the installed job, and therefore needs the interpreter
that M2MC is installed in (PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON).
"""

from __future__ import annotations

import importlib
import sys

EXAMPLE = ("PYSPARK_PYTHON=$PWD/.venv/bin/python PYSPARK_DRIVER_PYTHON=$PWD/.venv/bin/python "
           "spark-submit app/analytics/submit.py ...")


def main() -> int:
    try:
        job = importlib.import_module("m2mc.app.analytics.thread_stats")
    except ImportError as exc:
        print(f"m2mc-thread-stats: this Python ({sys.executable}) cannot import M2MC's job ({exc}). Run it with the "
              f"interpreter of the environment M2MC is installed in, e.g.\n  {EXAMPLE}", file=sys.stderr)
        return 2
    return job.main()


if __name__ == "__main__":
    sys.exit(main())
