"""Where tables, checkpoints and the landing zone live: the home's folders, or object storage (S3, MinIO).

A *location* is a ``pathlib.Path`` on local disk or a ``upath.UPath`` (fsspec's s3fs) on object storage: both
take ``/``, ``exists``, ``read_text``, ``write_text``, ``iterdir``, ``glob``, ``stat`` and ``unlink``, so the
runtime's own reads of the Delta log, checkpoints and landing files are written once. ``str(location)`` is
what Spark (Hadoop's S3A, which also serves ``s3://`` here) and delta-rs take, with the options of
:func:`hadoop_conf` and :func:`delta_options`. Credentials are never part of a location or a setting: S3A,
s3fs and delta-rs each read the AWS chain (environment, profile, instance role) themselves.

What object storage does not have, this module gives one way: :func:`write_atomically` (a rename on disk, a
single PUT on S3, which is atomic by itself), :func:`entries` (names, sizes and modification times from one
listing), :func:`remove_tree` and :func:`move_tree`.
"""

import os
import shutil
from contextlib import suppress
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from warehouse.settings import REPO_ROOT, Settings, SettingsError

if TYPE_CHECKING:
    import deltalake
    from pyspark.sql import SparkSession
    from upath import UPath

#: A place of the lakehouse's data: local (``Path``) or on object storage (``UPath``).
Location: TypeAlias = "Path | UPath"
#: Hadoop's S3A and the AWS SDK modules it needs, fetched by the set-up (jvm/s3/pom.xml).
S3_JARS_DIR = REPO_ROOT / ".cache" / "s3-jars"


def is_remote(location: object) -> bool:
    return not isinstance(location, Path)


def delta_options(location: Location) -> dict[str, str] | None:
    """delta-rs's storage options for a table at ``location`` (None on local disk), from the location's own
    S3 options. delta-rs commits with S3's conditional PUT (If-None-Match), so two of its writers never take
    the same version."""
    if not is_remote(location):
        return None
    fsspec = location.storage_options
    options = {"AWS_REGION": fsspec.get("client_kwargs", {}).get("region_name", "us-east-1")}
    endpoint = fsspec.get("endpoint_url")
    if endpoint is not None:
        options["AWS_ENDPOINT_URL"] = endpoint
        options["AWS_ALLOW_HTTP"] = str(endpoint.startswith("http://")).lower()
        options["AWS_VIRTUAL_HOSTED_STYLE_REQUEST"] = "false"
    return options


def open_delta(location: Location, version: int | None = None) -> "deltalake.DeltaTable":
    """The delta-rs table at ``location`` (at ``version``, else the latest)."""
    import deltalake

    return deltalake.DeltaTable(str(location), version=version, storage_options=delta_options(location))


def hadoop_conf(settings: Settings) -> dict[str, str]:
    """Spark's settings for S3A (empty on local disk): ``s3://`` served by S3A too, the endpoint and region.
    No credentials: they are not configuration (Dagster shows its resources' configuration); see
    :func:`hand_credentials_to_executors`."""
    storage = settings.storage
    if storage.uri is None:
        return {}
    conf = {
        "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
        "spark.hadoop.fs.s3a.endpoint.region": storage.s3_region,
        # One writer per table at a time is the lakehouse's own lock's job (S3's log store is one JVM's).
        "spark.delta.logStore.s3.impl": "io.delta.storage.S3SingleDriverLogStore",
        "spark.delta.logStore.s3a.impl": "io.delta.storage.S3SingleDriverLogStore",
    }
    if storage.s3_endpoint is not None:
        conf["spark.hadoop.fs.s3a.endpoint"] = storage.s3_endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(storage.s3_endpoint.startswith("https")).lower()
        # S3-compatible servers do not all answer "Expect: 100-continue" (moto's answers an upload with a bare
        # 100, which the SDK takes for an error); AWS does not need it either.
        conf["spark.hadoop.fs.s3a.connection.expect.continue"] = "false"
        # The state store's file uploads (copyFromLocalFile) otherwise go through the SDK's transfer manager
        # and its asynchronous client, which asks for 100-continue whatever the setting above says.
        conf["spark.hadoop.fs.s3a.optimized.copy.from.local.enabled"] = "false"
    return conf


def hand_credentials_to_executors(spark: "SparkSession", settings: Settings) -> None:
    """Put the driver's AWS credentials from its environment into the session's Hadoop configuration, which
    Spark ships to the executors with each job: executors on other hosts need not have them in their own
    environment. Without them in the environment, S3A's own chain (a profile, an instance role) applies.
    Spark redacts these keys wherever it shows its configuration."""
    if settings.storage.uri is None:
        return
    hadoop = spark.sparkContext._jsc.hadoopConfiguration()
    for variable, key in (
        ("AWS_ACCESS_KEY_ID", "fs.s3a.access.key"),
        ("AWS_SECRET_ACCESS_KEY", "fs.s3a.secret.key"),
        ("AWS_SESSION_TOKEN", "fs.s3a.session.token"),
    ):
        if os.environ.get(variable):
            hadoop.set(key, os.environ[variable])


def s3_jars(settings: Settings) -> list[Path]:
    """The S3A jars when the data is on object storage (none otherwise: local runs never load them)."""
    if settings.storage.uri is None:
        return []
    jars = sorted(S3_JARS_DIR.glob("*.jar"))
    if not any(j.name.startswith("hadoop-aws-") for j in jars):
        raise SettingsError(f"LAKEHOUSE_STORAGE_URI is on S3 but {S3_JARS_DIR} holds no hadoop-aws: run `make setup`")
    return jars


def location_of(settings: Settings, text: str) -> Location:
    """A location written out as text (``str(location)``), back as one: on object storage with the
    storage's own options."""
    if "://" not in text:
        return Path(text)
    root = settings.data_root()
    return type(root)(text, **root.storage_options)


def ensure_folder(folder: Location) -> None:
    """Make the folder exist: on disk a directory; on object storage, where a folder is only a prefix, an
    empty hidden object under it (Spark's file source needs its folder to exist and ignores ``.`` names)."""
    if not is_remote(folder):
        folder.mkdir(parents=True, exist_ok=True)
    elif not folder.fs.exists(folder.path):
        (folder / ".keep").write_bytes(b"")


def write_atomically(location: Location, text: str) -> None:
    """Replace a small file's content so a reader sees the old or the new text, never a part."""
    if is_remote(location):
        location.write_text(text)  # one PUT: S3 shows an object whole or not at all
        return
    partial = location.with_name(f".{location.name}.partial")
    partial.write_text(text)
    partial.replace(location)


def entries(folder: Location) -> list[tuple[str, int, int]]:
    """The files directly in ``folder`` (none when it does not exist): name, modification time in ns and size,
    from one listing."""
    if not is_remote(folder):
        try:
            listed = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = []
        for entry in listed:
            try:
                if entry.is_file():
                    stat = entry.stat()
                    found.append((entry.name, stat.st_mtime_ns, stat.st_size))
            except FileNotFoundError:
                # Gone since the listing: a writer's temporary file, or one a writer replaces by deleting it
                # first (Delta's `_last_checkpoint` while `maintain` checkpoints a log; found by the soak).
                continue
        return found
    fs, key = folder.fs, folder.path
    if not fs.exists(key):
        return []
    found = []
    for info in fs.ls(key, detail=True):
        if info.get("type") == "file":
            modified = info.get("LastModified")
            mtime_ns = int(modified.timestamp() * 1_000_000_000) if modified is not None else 0
            found.append((info["name"].rsplit("/", 1)[-1], mtime_ns, int(info.get("size") or 0)))
    return found


def names(folder: Location) -> list[str]:
    """The names of the files directly in ``folder`` (none when it does not exist), from one listing."""
    return [name for name, _, _ in entries(folder)]


def files_under(folder: Location) -> list[str]:
    """Every file under ``folder``, at any depth, as a path relative to it (``a=1/part-0.parquet``)."""
    if not is_remote(folder):
        walked = os.walk(folder)
        return [os.path.relpath(os.path.join(parent, name), folder) for parent, _, names in walked for name in names]
    prefix = folder.path.rstrip("/") + "/"
    return [key[len(prefix) :] for key in folder.fs.find(folder.path) if key.startswith(prefix)]


def file_times(folder: Location) -> dict[str, float]:
    """Every file under ``folder``, at any depth, relative to it as in :func:`files_under`, with its modification
    time in seconds since the epoch."""
    if not is_remote(folder):
        found = {}
        for parent, _, names in os.walk(folder):
            for path in (os.path.join(parent, name) for name in names):
                with suppress(FileNotFoundError):  # gone since the listing
                    found[os.path.relpath(path, folder)] = os.stat(path).st_mtime
        return found
    prefix = folder.path.rstrip("/") + "/"
    listed = folder.fs.find(folder.path, detail=True)
    return {
        key[len(prefix) :]: info["LastModified"].timestamp() if info.get("LastModified") is not None else 0.0
        for key, info in listed.items()
        if key.startswith(prefix)
    }


def remove_tree(location: Location) -> None:
    """Delete a folder and everything under it; fine when it does not exist."""
    if not is_remote(location):
        shutil.rmtree(location, ignore_errors=True)
    elif location.fs.exists(location.path):
        location.fs.rm(location.path, recursive=True)


def move_tree(source: Location, target: Location) -> None:
    """Move a folder to ``target`` (which must not exist; its parents are made): one rename on disk; on
    object storage a copy of every object, then the source's deletion (callers make the move restartable)."""
    if not is_remote(source):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(source), str(target))
        return
    source.fs.copy(source.path, target.path, recursive=True)
    source.fs.rm(source.path, recursive=True)
