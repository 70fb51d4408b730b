"""Build the driver JVM's class-data archive (AppCDS) that every lakehouse Spark session starts from.

A small pipeline run (bronze, silver, gold, a reconcile) in a scratch home, with the JVM told to archive
every class it loaded when it exits. Later JVMs map that archive instead of finding, parsing and
verifying each Spark, Delta and Catalyst class again (``warehouse.session.driver_jvm_options``). Run by
``scripts/setup.sh`` when the JVM, the jars or the stack change; the archive is a cache (git-ignored),
and a JVM that cannot use it ignores it.

    .venv/bin/python scripts/class_archive.py .cache/jvm/spark-classes.jsa
"""

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: One process: the pipeline once, then a reconcile, then the JVM's pid for the parent to wait on.
_WORKLOAD = """
from warehouse.session import spark_session
from warehouse.settings import Settings
from runtime.runner import run_once, run_reconcile
settings = Settings.from_env()
spark = spark_session(settings)
run_once(spark, settings)
run_reconcile(spark, settings)
print(spark.sparkContext._jvm.ProcessHandle.current().pid())
"""

#: The JVM writes the archive after its Python parent has gone; this long at most.
_DUMP_WAIT_SECONDS = 180


def build(target: Path) -> None:
    repo = Path(__file__).resolve().parents[1]
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="lakehouse-class-archive-") as scratch:
        env = {
            **os.environ,
            "LAKEHOUSE_HOME": str(Path(scratch) / "home"),
            "LAKEHOUSE_JVM_CLASS_ARCHIVE": "",
            "LAKEHOUSE_JVM_OPTIONS": f"-XX:ArchiveClassesAtExit={partial}",
            "PYTHONPATH": str(repo),
        }
        lakehouse = str(Path(sys.executable).with_name("lakehouse"))
        generate = [lakehouse, "generate", "--events", "3000", "--late", "0.02", "--invalid", "0.02"]
        subprocess.run([*generate, "--duplicates", "0.02", "--files", "2"], env=env, check=True, capture_output=True)
        done = subprocess.run(
            [sys.executable, "-c", _WORKLOAD], env=env, check=True, capture_output=True, text=True, cwd=repo
        )
        jvm = int(done.stdout.strip().splitlines()[-1])
        deadline = time.monotonic() + _DUMP_WAIT_SECONDS
        while Path(f"/proc/{jvm}").exists() and time.monotonic() < deadline:
            time.sleep(0.5)
    if Path(f"/proc/{jvm}").exists() or not partial.is_file() or partial.stat().st_size == 0:
        raise SystemExit(f"class archive: the JVM wrote no archive to {partial}")
    partial.replace(target)


if __name__ == "__main__":
    build(Path(sys.argv[1]).resolve())
