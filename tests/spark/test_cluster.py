"""m2mc-thread-stats on a Spark standalone cluster: a master and two workers started from the
venv's pyspark, all inside a private network namespace with only loopback (nothing listens
anywhere else). The second worker runs in a mount namespace of its own, with a tmpfs over
one folder, so it acts as a second host that does not share that folder with the driver.

The job runs through spark-submit, as resources/docs/thread-stats.md shows, with a relative --out and a
file:// --out, and its tables must equal a local run's; an --out the second worker cannot
reach must fail fast, before the heavy stage, leaving nothing marked complete.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from m2mc.app.analytics import gen_logs, job, schema
from tests.testbed.lan import LoopbackHost
from tests.spark.support import TEST_JVM_OPTIONS

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
MASTER_PORT = 7077  # inside our own namespace: nothing else listens there


def _spark_env(work: Path) -> dict:
    return dict(
        os.environ,
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOCAL_HOSTNAME="localhost",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOG_DIR=str(work / "logs"),
        SPARK_WORKER_OPTS="-Dspark.worker.cleanup.enabled=false",
        SPARK_DAEMON_JAVA_OPTS=TEST_JVM_OPTIONS,
    )


def _wait_for(path: Path, text: str, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text(errors="replace").count(text) >= count:
            return
        time.sleep(0.5)
    raise AssertionError(f"{path.name}: no {count} x {text!r} within {timeout} s:\n{path.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, java):
    work = tmp_path_factory.mktemp("cluster")
    hidden = work / "hidden"  # the second worker sees a tmpfs here, the driver the real folder
    hidden.mkdir()
    host = LoopbackHost()
    env = _spark_env(work)
    spark_class = str(BIN / "spark-class")
    processes: list[subprocess.Popen] = []

    def start(name: str, command: list[str]) -> Path:
        log = work / f"{name}.log"
        with open(log, "wb") as out:
            processes.append(subprocess.Popen(["ip", "netns", "exec", host.name, *command], env=env, stdout=out, stderr=subprocess.STDOUT))
        return log

    try:
        master_log = start("master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                                      "--port", str(MASTER_PORT), "--webui-port", "8080"])
        _wait_for(master_log, "I have been elected leader", 1, 90)
        url = f"spark://127.0.0.1:{MASTER_PORT}"
        for name, wrap in (("worker-a", []), ("worker-b", [
            "unshare", "--mount", "--propagation", "private", "sh", "-c",
            f'mount -t tmpfs m2mc-other-host "{hidden}" && exec "$@"', "worker-b",
        ])):
            (work / name).mkdir()
            start(name, [*wrap, spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
                         "--memory", "1g", "--work-dir", str(work / name), "--webui-port", "0", url])
        _wait_for(master_log, "Registering worker", 2, 90)
        yield {"work": work, "hidden": hidden, "url": url, "netns": host.name, "env": env}
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        host.close()


def submit(cluster, cwd: Path, script: Path, *args: str) -> subprocess.CompletedProcess:
    """spark-submit a script on the cluster, from `cwd`, as resources/docs/thread-stats.md shows."""
    cwd.mkdir(parents=True, exist_ok=True)
    command = [
        "ip", "netns", "exec", cluster["netns"], str(BIN / "spark-submit"), "--master", cluster["url"],
        # Both executors (one core each) before the first job, so both take part in every stage.
        "--conf", "spark.cores.max=2", "--conf", "spark.scheduler.minRegisteredResourcesRatio=1.0",
        "--conf", "spark.executor.memory=512m", "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=4", "--driver-java-options", TEST_JVM_OPTIONS,
        "--conf", f"spark.executor.extraJavaOptions={TEST_JVM_OPTIONS}", str(script), *args,
    ]
    return subprocess.run(command, cwd=cwd, env=cluster["env"], capture_output=True, text=True, timeout=300)


def read_tables(folder: Path) -> dict:
    import pyarrow.dataset as ds

    tables = {}
    for name, spec in schema.TABLE_SPECS.items():
        columns = [field for field, _ in schema._fields(spec)]
        table = ds.dataset(str(folder / name), format="parquet").to_table(columns=columns)
        tables[name] = table.sort_by([(column, "ascending") for column in columns[:2]])
    return tables


def test_cluster_outputs_equal_a_local_run_and_unreachable_dir_fails_fast(cluster, spark):
    work = cluster["work"]
    log = work / "export.jsonl"
    assert gen_logs.main(["--messages", "3000", "--out", str(log), "--seed", "5"]) == 0
    local_out = work / "local"
    job.analyse(spark, [str(log)], local_out)
    expected = read_tables(local_out)
    assert expected["messages"].num_rows == 3000

    driver = work / "driver"
    started = time.monotonic()
    done = submit(cluster, driver, ROOT / "app" / "analytics" / "submit.py", str(log), "--out", "out/rel", "--no-report")
    print(f"spark-submit app/analytics/submit.py --out out/rel: {time.monotonic() - started:.1f} s")
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]

    # A file:// URL, then a DIR the second worker cannot reach, in one more application.
    url_out, unreachable = work / "url-out", cluster["hidden"] / "out"
    started = time.monotonic()
    both = submit(cluster, driver, Path(__file__).with_name("cluster_driver.py"), str(log), f"file://{url_out}", str(unreachable))
    print(f"spark-submit cluster_driver.py (file:// and unreachable): {time.monotonic() - started:.1f} s")
    said = both.stdout + both.stderr  # spark-submit hands the Python driver's stderr on through its stdout
    assert both.returncode == 0, said[-4000:]
    outcome = json.loads(said.split("RESULT ", 1)[1].splitlines()[0])

    for what, folder in (("relative", driver / "out" / "rel"), ("file URL", url_out)):
        actual = read_tables(folder)
        for name, table in expected.items():
            assert actual[name].equals(table), f"{what}: {name} differs from the local run"
            assert (folder / name / "_SUCCESS").exists()
        assert (folder / "summary.json").exists()
    assert outcome["summary"]["messages"] == 3000

    # The second worker does not see the driver's `hidden` folder: the probe finds out before
    # any data is read, and nothing there is marked complete.
    assert "DIR must be a location every executor reaches at the same path" in (outcome["error"] or ""), outcome
    assert said.count("messages and threads written") == 1  # the heavy stage ran for the file:// run only
    left = [p.relative_to(cluster["hidden"]) for p in cluster["hidden"].rglob("*")]
    assert not [p for p in left if p.name == "_SUCCESS"], left
    assert not [p for p in left if p.name in schema.TABLE_NAMES], left
    print(f"unreachable DIR: {outcome['error']}")
