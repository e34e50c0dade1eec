"""Run by spark-submit in the cluster test: two outputs in one application (one start of the
driver and executors instead of two). argv: LOG FILE_URL_OUT UNREACHABLE_OUT; prints one
JSON line: the summary of the first run, and the error of the second."""

import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from m2mc.app.analytics import job  # noqa: E402


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    log, reachable, unreachable = sys.argv[1:4]
    spark = job.build_session(None, "1g")
    outcome = {"summary": job.analyse(spark, [log], reachable).summary}
    try:
        job.analyse(spark, [log], unreachable)
        outcome["error"] = None
    except job.UsageError as exc:
        outcome["error"] = str(exc)
    print("RESULT " + json.dumps(outcome), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
