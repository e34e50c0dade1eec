"""Tests of the driver JVM's class-data archive: recorded once, then mapped; never half-kept."""

from __future__ import annotations

import subprocess

import pytest
from pyspark import SparkContext

from m2mc.app.analytics.jvm_archive import ClassArchive


class FakeGateway:
    """Stands in for pyspark's gateway: a process that 'writes the archive' when its stdin closes."""

    def __init__(self, script: str) -> None:
        self.proc = subprocess.Popen(["sh", "-c", script], stdin=subprocess.PIPE)
        self.shut_down = False

    def shutdown(self) -> None:
        self.shut_down = True


@pytest.fixture
def gateway_slot(monkeypatch):
    """Lets a test put its own gateway in SparkContext; the real one comes back afterwards."""
    monkeypatch.setattr(SparkContext, "_gateway", SparkContext._gateway)
    monkeypatch.setattr(SparkContext, "_jvm", SparkContext._jvm)


def test_first_run_records_the_archive_and_later_runs_map_it(tmp_path, gateway_slot):
    archive = ClassArchive(tmp_path)
    options = archive.java_options()
    assert f"-XX:ArchiveClassesAtExit={archive.recording}" in options
    assert archive.recording.parent == tmp_path and not archive.path.exists()

    gateway = FakeGateway(f"cat > /dev/null; echo classes > '{archive.recording}'")
    SparkContext._gateway = gateway
    archive.finish(timeout=10)
    assert gateway.shut_down and gateway.proc.returncode == 0
    assert archive.path.read_text() == "classes\n"
    assert not archive.recording.exists()
    assert SparkContext._gateway is None  # a later session starts a JVM of its own

    later = ClassArchive(tmp_path)
    assert later.path == archive.path
    assert f"-XX:SharedArchiveFile={archive.path}" in later.java_options()
    assert later.recording is None


def test_a_failed_recording_leaves_no_archive(tmp_path, gateway_slot):
    archive = ClassArchive(tmp_path)
    archive.java_options()
    SparkContext._gateway = FakeGateway(f"cat > /dev/null; echo half > '{archive.recording}'; exit 3")
    archive.finish(timeout=10)
    assert not archive.path.exists() and not archive.recording.exists()
    assert "ArchiveClassesAtExit" in ClassArchive(tmp_path).java_options()


def test_a_mapping_run_leaves_the_jvm_alone(tmp_path, gateway_slot):
    archive = ClassArchive(tmp_path)
    archive.path.write_bytes(b"archive")
    assert "SharedArchiveFile" in archive.java_options()
    gateway = FakeGateway("sleep 30")
    SparkContext._gateway = gateway
    archive.finish(timeout=1)
    assert gateway.proc.poll() is None and not gateway.shut_down
    gateway.proc.kill()
    gateway.proc.wait()
