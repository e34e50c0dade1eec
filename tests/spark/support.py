"""What the Spark tests need from the machine, and how their JVMs are started."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

JAVA_NEEDED = 17  # pyspark 4 runs on Java 17 or newer
# The tests' JVMs run small jobs for seconds to a minute: C1 alone compiles soon enough what they
# run, where C2 would spend more CPU compiling than it saves, and one GC thread is all a 2-core
# machine spares. Neither changes a plan or a result; together they take a third off the Spark tests.
TEST_JVM_OPTIONS = os.environ.get("M2MC_TEST_JVM_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")


def java_problem() -> str | None:
    """Why Spark cannot start here, or None when a Java it can use is found."""
    home = os.environ.get("JAVA_HOME")
    java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not java or not os.access(java, os.X_OK):
        return f"the Spark tests need Java {JAVA_NEEDED} or newer, and none was found: install openjdk-17-jre-headless"
    said = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60).stderr
    found = re.search(r'version "(\d+)', said)
    if found is None or int(found.group(1)) < JAVA_NEEDED:
        return f"the Spark tests need Java {JAVA_NEEDED} or newer; {java} says: {said.strip()[:200]}"
    return None
