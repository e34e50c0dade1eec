"""Shared fixtures of the Spark tests: Java found (or the tests skip, saying why), and one
SparkSession for them all: local[1], one shuffle partition, no web UI."""

from __future__ import annotations

import os
import sys

import pytest

from tests.spark.support import TEST_JVM_OPTIONS, java_problem


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
        .config("spark.driver.extraJavaOptions", TEST_JVM_OPTIONS)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("WARN")
    yield session
    session.stop()
