"""Settings groups of the lakehouse's surroundings: the local Spark cluster, where the data lives (local disk or
object storage) and Dagster's instance storage. ``warehouse.settings`` gathers them under ``Settings``."""

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from warehouse.setting_kinds import (
    HOST,
    MEMORY,
    OPTIONAL_PATH,
    PORT,
    POSITIVE_INT,
    Group,
    Kind,
    SettingsError,
    choice,
    pattern,
    var,
)

__all__ = ["DAGSTER_PG_PASSWORD_VARIABLE", "ClusterSettings", "DagsterSettings", "StorageSettings"]


@dataclass(frozen=True)
class ClusterSettings(Group):
    """The local Spark standalone cluster ``lakehouse cluster up`` starts on 127.0.0.1 (tests, the demo,
    trying a cluster on one machine): a master and ``workers`` workers, each offering ``worker_cores``
    task slots and ``worker_memory`` to executors."""

    port: int = field(default=7077, metadata=var("LAKEHOUSE_CLUSTER_PORT", PORT))
    ui_port: int = field(default=8080, metadata=var("LAKEHOUSE_CLUSTER_UI_PORT", PORT))
    workers: int = field(default=2, metadata=var("LAKEHOUSE_CLUSTER_WORKERS", POSITIVE_INT))
    worker_cores: int = field(default=2, metadata=var("LAKEHOUSE_CLUSTER_WORKER_CORES", POSITIVE_INT))
    worker_memory: str = field(default="2g", metadata=var("LAKEHOUSE_CLUSTER_WORKER_MEMORY", MEMORY))
    start_timeout_seconds: int = field(
        default=90, metadata=var("LAKEHOUSE_CLUSTER_START_TIMEOUT_SECONDS", POSITIVE_INT)
    )

    @property
    def master_url(self) -> str:
        """The URL ``LAKEHOUSE_SPARK_MASTER`` takes to run on this cluster."""
        return f"spark://127.0.0.1:{self.port}"


#: An S3 location for tables, checkpoints and the landing zone: ``s3://bucket`` or ``s3://bucket/prefix``.
STORAGE_URI = Kind(
    lambda text: None if text.lower() in {"none", "off"} else text.rstrip("/"),
    lambda v: (
        v is None or (isinstance(v, str) and re.fullmatch(r"s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9](/[^\s]*)?", v))
    ),
    "be none or an S3 location such as s3://bucket/lakehouse",
    shown=str.strip,
)
ENDPOINT = Kind(
    lambda text: None if text.lower() in {"none", "off"} else text.rstrip("/"),
    lambda v: v is None or (isinstance(v, str) and re.fullmatch(r"https?://[A-Za-z0-9_.\-]+(:\d{1,5})?", v)),
    "be none or an http(s) URL such as http://127.0.0.1:9000",
    shown=str.strip,
)
REGION = pattern(r"[a-z]{2}(-[a-z]+)+-\d", "be an AWS region such as us-east-1")


@dataclass(frozen=True)
class StorageSettings(Group):
    """Where the data lives: the home's folders (``uri`` none, the default), or object storage (``uri``
    ``s3://bucket/prefix``) for the three places every executor and host must reach: tables, checkpoints and
    the landing zone. Logs, status files and reports stay in the home; locks become leases beside the data,
    renewed within ``lease_seconds``. Credentials come from the environment or the AWS chain
    (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, a profile, an instance role), never from a setting.
    ``s3_endpoint`` names an S3-compatible server (MinIO, a test server), which is then addressed
    path-style."""

    uri: str | None = field(default=None, metadata=var("LAKEHOUSE_STORAGE_URI", STORAGE_URI))
    s3_endpoint: str | None = field(default=None, metadata=var("LAKEHOUSE_S3_ENDPOINT", ENDPOINT))
    s3_region: str = field(default="us-east-1", metadata=var("LAKEHOUSE_S3_REGION", REGION))
    #: On object storage the locks are leases: one not renewed for this long (its holder died or stalled)
    #: is taken over by the next writer; holders renew every third of it.
    lease_seconds: int = field(default=30, metadata=var("LAKEHOUSE_LOCK_LEASE_SECONDS", POSITIVE_INT))

    @property
    def on_object_storage(self) -> bool:
        return self.uri is not None

    def location(self) -> Any:
        """The storage URI as a ``UPath`` (fsspec's s3fs), one per settings (its S3 client is reused)."""
        return _object_store_root(self)


@functools.cache
def _object_store_root(storage: StorageSettings) -> Any:
    from upath import UPath

    options: dict[str, Any] = {
        # Listings are read to find new commits, landing files and checkpoint entries: never from a cache.
        "use_listings_cache": False,
        "client_kwargs": {"region_name": storage.s3_region},
    }
    if storage.s3_endpoint is not None:
        options["endpoint_url"] = storage.s3_endpoint
        options["config_kwargs"] = {"s3": {"addressing_style": "path"}}
    return UPath(storage.uri, **options)


#: Dagster's instance storage takes its PostgreSQL password from this variable: ``dagster.yaml`` names it
#: (``env:``), so the password is never written to a file, printed or held in the settings.
DAGSTER_PG_PASSWORD_VARIABLE = "LAKEHOUSE_DAGSTER_PG_PASSWORD"
IDENTIFIER = pattern(r"[a-z_][a-z0-9_]{0,62}", "be a lower-case SQL name such as 'dagster'")


@dataclass(frozen=True)
class DagsterSettings(Group):
    """Where the Dagster instance keeps runs, event logs and schedules: SQLite files under ``DAGSTER_HOME``
    (``sqlite``, the embedded default, one host) or a PostgreSQL database every host reaches (``postgres``,
    production: webserver, daemon and runs on different hosts). ``pg_dir`` is where ``lakehouse postgres up``
    keeps a local server for tests and trying it (default ``LAKEHOUSE_HOME/postgres``)."""

    storage: str = field(default="sqlite", metadata=var("LAKEHOUSE_DAGSTER_STORAGE", choice(("sqlite", "postgres"))))
    pg_host: str = field(default="127.0.0.1", metadata=var("LAKEHOUSE_DAGSTER_PG_HOST", HOST))
    pg_port: int = field(default=5432, metadata=var("LAKEHOUSE_DAGSTER_PG_PORT", PORT))
    pg_database: str = field(default="dagster", metadata=var("LAKEHOUSE_DAGSTER_PG_DATABASE", IDENTIFIER))
    pg_user: str = field(default="dagster", metadata=var("LAKEHOUSE_DAGSTER_PG_USER", IDENTIFIER))
    pg_dir: Path | None = field(default=None, metadata=var("LAKEHOUSE_DAGSTER_PG_DIR", OPTIONAL_PATH))

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        settings = super().from_env(env)
        if settings.storage == "postgres" and not env.get(DAGSTER_PG_PASSWORD_VARIABLE, "").strip():
            raise SettingsError(
                f"{DAGSTER_PG_PASSWORD_VARIABLE} must be set when LAKEHOUSE_DAGSTER_STORAGE=postgres "
                "(the database password, read from the environment only)"
            )
        return settings
