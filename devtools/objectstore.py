"""An S3-compatible server on 127.0.0.1 for tests and benchmarks: moto's server mode (a dev dependency).

``ObjectStore.start(bucket)`` runs ``moto_server`` on a free loopback port, waits until it answers, creates the
bucket, and gives the environment that puts a lakehouse's tables, checkpoints and landing zone there
(``LAKEHOUSE_STORAGE_URI``, ``LAKEHOUSE_S3_ENDPOINT`` and throwaway AWS credentials, which moto accepts and
never checks). The server keeps everything in memory and ends with ``stop()``.
"""

import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from devtools.daemons import answers, free_port, stop_process

_HOST = "127.0.0.1"
#: Credentials for the test server only (moto accepts any); never a real account's.
TEST_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "lakehouse-test", "AWS_SECRET_ACCESS_KEY": "lakehouse-test-secret"}


@dataclass
class ObjectStore:
    process: subprocess.Popen
    port: int
    bucket: str
    log: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def endpoint(self) -> str:
        return f"http://{_HOST}:{self.port}"

    @classmethod
    def start(cls, bucket: str, log: Path, prefix: str = "lakehouse", timeout: float = 60) -> "ObjectStore":
        port = free_port()
        log.parent.mkdir(parents=True, exist_ok=True)
        server = str(Path(sys.executable).parent / "moto_server")
        with log.open("ab") as out:
            process = subprocess.Popen(
                [server, "-H", _HOST, "-p", str(port)],
                stdout=out,
                stderr=out,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        store = cls(process, port, bucket, log)
        deadline = time.monotonic() + timeout
        while not answers(_HOST, port):
            if process.poll() is not None or time.monotonic() > deadline:
                store.stop()
                raise RuntimeError(f"the S3 test server did not answer on {_HOST}:{port} (see {log})")
            time.sleep(0.2)
        store.env = {
            **TEST_CREDENTIALS,
            "AWS_REGION": "us-east-1",
            "LAKEHOUSE_S3_ENDPOINT": store.endpoint,
            "LAKEHOUSE_STORAGE_URI": f"s3://{bucket}/{prefix}",
        }
        store.client().create_bucket(Bucket=bucket)
        return store

    def client(self):
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name="us-east-1",
            aws_access_key_id=TEST_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=TEST_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        )

    def keys(self, prefix: str = "") -> list[str]:
        """Every object key under ``prefix`` in the bucket."""
        found: list[str] = []
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix):
            found.extend(item["Key"] for item in page.get("Contents", []))
        return found

    def stop(self) -> None:
        if self.process.poll() is None:
            stop_process(self.process.pid, seconds=10)
        self.process.wait()
