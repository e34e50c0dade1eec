"""A class-data archive (AppCDS) for the Spark driver's JVM, kept in the user's cache.

Starting Spark loads and verifies some ten thousand classes, and on this 2-core machine
that took about 7 of a run's first 16 seconds. The JVM can instead map them from an
archive it wrote at the end of an earlier run (`-XX:ArchiveClassesAtExit`, JDK 13+).
The first run records one; every later run with the same Java and the same Spark jars
maps it. A stale or damaged archive is refused by the JVM itself, which then loads the
classes as usual, so the archive only ever saves time.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from pathlib import Path

log = logging.getLogger("m2mc.jvm_archive")

# The JVM's own notes about the archive (classes it cannot keep, a mismatch) are not
# the user's business; and once the driver's stdout is closed, printing them would
# kill the JVM in the middle of writing.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "m2mc" / "jvm"


def _fingerprint() -> str | None:
    """What the archive depends on: the Java binary and Spark's jars (names and sizes)."""
    import pyspark

    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    jars = Path(pyspark.__file__).parent / "jars"
    if not java or not jars.is_dir():
        return None
    digest = hashlib.sha256(os.path.realpath(java).encode())
    digest.update(pyspark.__version__.encode())
    for jar in sorted(jars.iterdir()):
        digest.update(f"{jar.name}:{jar.stat().st_size};".encode())
    return digest.hexdigest()[:16]


class ClassArchive:
    """Chooses the driver's archive options and, after a recording run, keeps the archive."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or cache_dir()
        fingerprint = _fingerprint()
        self.path = self.directory / f"spark-driver-{fingerprint}.jsa" if fingerprint else None
        self.recording: Path | None = None

    def java_options(self) -> str:
        """Options for spark.driver.extraJavaOptions: map the archive, or record one at exit."""
        if self.path is None or '"' in str(self.path) or "'" in str(self.path):
            return ""
        if self.path.is_file():
            return f'"-XX:SharedArchiveFile={self.path}" {QUIET}'
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            return ""
        self.recording = self.path.with_name(f"{self.path.name}.{os.getpid()}.partial")
        return f'"-XX:ArchiveClassesAtExit={self.recording}" {QUIET}'

    def finish(self, timeout: float = 120.0) -> None:
        """After a recording run's session stopped: end the driver's JVM, which writes the
        archive as it exits, and keep the archive under its final name."""
        recording, path = self.recording, self.path
        if recording is None or path is None:  # a recording run has both
            return
        from pyspark import SparkContext

        gateway = SparkContext._gateway
        process = getattr(gateway, "proc", None)
        try:
            if process is not None and gateway is not None:
                # The gateway JVM exits when its stdin closes (pyspark's own shutdown signal).
                gateway.shutdown()
                process.stdin.close()
                process.wait(timeout)
                # The next session in this process must start a JVM of its own.
                SparkContext._gateway = None
                SparkContext._jvm = None
            if process is not None and process.returncode == 0 and recording.is_file():
                os.replace(recording, path)
                log.info("recorded the JVM class archive %s for faster starts", path)
        except Exception as exc:  # noqa: BLE001 - the archive is an optimisation only
            log.debug("no JVM class archive: %s", exc)
        finally:
            recording.unlink(missing_ok=True)
