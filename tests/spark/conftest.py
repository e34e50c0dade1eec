"""Shared SparkSession for the Spark tests: local[1], one shuffle partition, no web UI."""

from __future__ import annotations

import os
import sys

import pytest


def _stub_pandas_on_spark_if_broken() -> None:
    """Let pyspark.testing.assertDataFrameEqual run when pyspark.pandas cannot import.

    assertDataFrameEqual imports pyspark.pandas whenever pandas and pyarrow are present,
    and PySpark 4.x's pandas-on-Spark does not import under pandas 3. These tests never
    pass pandas-on-Spark frames, so empty stand-ins make its isinstance checks false.
    Remove once the environment pins pandas < 3 (or PySpark supports pandas 3).
    """
    import types

    try:
        import pyspark.pandas  # noqa: F401
    except ImportError:
        stub = types.ModuleType("pyspark.pandas")
        stub.DataFrame = type("DataFrame", (), {})
        utils = types.ModuleType("pyspark.testing.pandasutils")
        utils.PandasOnSparkTestUtils = type("PandasOnSparkTestUtils", (), {})
        sys.modules["pyspark.pandas"] = stub
        sys.modules["pyspark.testing.pandasutils"] = utils


_stub_pandas_on_spark_if_broken()


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
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
    session.sparkContext.setCheckpointDir(str(tmp_path_factory.mktemp("spark-checkpoints")))
    yield session
    session.stop()
