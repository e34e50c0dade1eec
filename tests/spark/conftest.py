"""Shared fixtures of the Spark tests: Java found (or the tests skip, saying why), and one
SparkSession for them all: local[1], one shuffle partition, no web UI."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

JAVA_NEEDED = 17  # pyspark 4 runs on Java 17 or newer


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


@pytest.fixture(scope="session")
def java():
    problem = java_problem()
    if problem:
        pytest.skip(problem)


@pytest.fixture(scope="session")
def spark(java):
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("m2mc-tests")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.default.parallelism", "1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()
