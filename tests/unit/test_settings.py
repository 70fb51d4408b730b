"""Settings (warehouse/settings.py) without Spark: every ``LAKEHOUSE_*`` variable's reading, its defaults, its one
error line (naming the variable), the rules across fields, and the checks on construction (``dataclasses.replace``
cannot build settings ``from_env`` would refuse)."""

from dataclasses import fields, replace
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from warehouse.settings import (
    DEFAULT_CLASS_ARCHIVE,
    DEFAULT_HOME,
    DEFAULT_JARS_DIR,
    DEFAULT_KAFKA_BROKER_JARS_DIR,
    GOLD_OUTPUTS,
    ClusterSettings,
    DagsterSettings,
    KafkaSettings,
    QualitySettings,
    ScheduleSettings,
    Settings,
    SettingsError,
    SparkSettings,
    StorageSettings,
    StreamSettings,
    WatermarkSettings,
    WindowSettings,
)

GROUPS = (Settings, WindowSettings, WatermarkSettings, StreamSettings, SparkSettings, ScheduleSettings)
GROUPS += (ClusterSettings, DagsterSettings, StorageSettings, KafkaSettings, QualitySettings)
#: Every variable a field is read from.
VARIABLES = {f.metadata["env"] for group in GROUPS for f in fields(group) if "env" in f.metadata}
#: Variables any text is good for (paths, the JVM's options): they have no error line.
ANY_TEXT = {
    "LAKEHOUSE_HOME",
    "LAKEHOUSE_JARS_DIR",
    "LAKEHOUSE_JVM_CLASS_ARCHIVE",
    "LAKEHOUSE_JVM_OPTIONS",
    "LAKEHOUSE_EXECUTOR_JVM_OPTIONS",
    "LAKEHOUSE_KAFKA_BROKER_JARS_DIR",
    "LAKEHOUSE_DAGSTER_PG_DIR",
    "LAKEHOUSE_PIPELINES_DIR",
}


def value(settings: Settings, dotted: str) -> Any:
    for name in dotted.split("."):
        settings = getattr(settings, name)
    return settings


def read(**env: str) -> Settings:
    """Settings from these variables only (names without the ``LAKEHOUSE_`` prefix)."""
    return Settings.from_env({f"LAKEHOUSE_{name}": text for name, text in env.items()})


def refusal(env: dict[str, str]) -> str:
    with pytest.raises(SettingsError) as caught:
        Settings.from_env(env)
    return str(caught.value)


# Variable, its text, where it lands, the value read.
READINGS = [
    ("LAKEHOUSE_HOME", "/tmp/lake/../house", "home", Path("/tmp/house")),
    ("LAKEHOUSE_HOME", "~/lake", "home", Path.home() / "lake"),
    ("LAKEHOUSE_GOLD_OUTPUTS", "all", "gold_outputs", frozenset(GOLD_OUTPUTS)),
    ("LAKEHOUSE_PIPELINES", "all", "pipeline_names", ()),
    ("LAKEHOUSE_PIPELINES", " readings, purchases", "pipeline_names", ("readings", "purchases")),
    ("LAKEHOUSE_PIPELINES_DIR", "/tmp/specs/../my-specs", "pipelines_dir", Path("/tmp/my-specs")),
    ("LAKEHOUSE_PIPELINES_DIR", "none", "pipelines_dir", None),
    ("LAKEHOUSE_GOLD_OUTPUTS", "none", "gold_outputs", frozenset()),
    ("LAKEHOUSE_GOLD_OUTPUTS", " hopping, sessions ,", "gold_outputs", frozenset({"hopping", "sessions"})),
    ("LAKEHOUSE_WINDOW_MINUTES", " 15 ", "windows.minutes", 15),
    ("LAKEHOUSE_HOPPING_SIZE_MINUTES", "120", "windows.hopping_size_minutes", 120),
    ("LAKEHOUSE_HOPPING_SLIDE_MINUTES", "10", "windows.hopping_slide_minutes", 10),
    ("LAKEHOUSE_SESSION_GAP_MINUTES", "45", "windows.session_gap_minutes", 45),
    ("LAKEHOUSE_GLOBAL_TRIGGER_COUNT", "3", "windows.global_trigger_count", 3),
    ("LAKEHOUSE_FIRING_TRIGGER", "watermark", "windows.firing_trigger", "watermark"),
    ("LAKEHOUSE_ACCUMULATION", " retracting", "windows.accumulation", "retracting"),
    ("LAKEHOUSE_ALLOWED_LATENESS_SECONDS", "0", "windows.allowed_lateness_seconds", 0),
    ("LAKEHOUSE_WATERMARK_DELAY_SECONDS", "0", "watermarks.delay_seconds", 0),
    ("LAKEHOUSE_WATERMARK_POLICY", "adaptive", "watermarks.policy", "adaptive"),
    ("LAKEHOUSE_WATERMARK_PERCENTILE", "0.5", "watermarks.percentile", 0.5),
    ("LAKEHOUSE_WATERMARK_PERCENTILE", "1", "watermarks.percentile", 1.0),
    ("LAKEHOUSE_WATERMARK_HORIZON_SECONDS", "600", "watermarks.horizon_seconds", 600),
    ("LAKEHOUSE_WATERMARK_MIN_DELAY_SECONDS", "0", "watermarks.min_delay_seconds", 0),
    ("LAKEHOUSE_WATERMARK_MAX_DELAY_SECONDS", "60", "watermarks.max_delay_seconds", 60),
    ("LAKEHOUSE_WATERMARK_IDLE_SECONDS", "30", "watermarks.idle_seconds", 30),
    ("LAKEHOUSE_WATERMARK_IDLE_MAX_ADVANCE_SECONDS", "0", "watermarks.idle_max_advance_seconds", 0),
    ("LAKEHOUSE_SOURCE", "kafka", "streams.source", "kafka"),
    ("LAKEHOUSE_TRIGGER_INTERVAL_SECONDS", "1", "streams.trigger_interval_seconds", 1),
    ("LAKEHOUSE_MAX_FILES_PER_TRIGGER", "1", "streams.max_files_per_trigger", 1),
    ("LAKEHOUSE_MAX_LINE_BYTES", "100", "streams.max_line_bytes", 100),
    ("LAKEHOUSE_PROGRESS_FLUSH_SECONDS", "1", "streams.progress_flush_seconds", 1),
    ("LAKEHOUSE_FOLLOWERS_NICENESS", "0", "streams.followers_niceness", 0),
    ("LAKEHOUSE_FOLLOWERS_NICENESS", "19", "streams.followers_niceness", 19),
    ("LAKEHOUSE_STREAM_WARMUP", "off", "streams.warmup", False),
    ("LAKEHOUSE_STREAM_WARMUP", "true", "streams.warmup", True),
    ("LAKEHOUSE_SHUFFLE_PARTITIONS", "2", "spark.shuffle_partitions", 2),
    ("LAKEHOUSE_STATE_PARTITIONS", "8", "spark.state_partitions", 8),
    ("LAKEHOUSE_DRIVER_MEMORY", " 512M ", "spark.driver_memory", "512m"),
    ("LAKEHOUSE_SPARK_UI", "yes", "spark.ui", True),
    ("LAKEHOUSE_SPARK_UI", "Off", "spark.ui", False),
    ("LAKEHOUSE_JARS_DIR", "/tmp/jars", "spark.jars_dir", Path("/tmp/jars").resolve()),
    ("LAKEHOUSE_JVM_CLASS_ARCHIVE", "/tmp/a.jsa", "spark.class_archive", Path("/tmp/a.jsa").resolve()),
    ("LAKEHOUSE_JVM_CLASS_ARCHIVE", "", "spark.class_archive", None),
    ("LAKEHOUSE_JVM_CLASS_ARCHIVE", "None", "spark.class_archive", None),
    ("LAKEHOUSE_JVM_CLASS_ARCHIVE", "off", "spark.class_archive", None),
    ("LAKEHOUSE_JVM_OPTIONS", " -Xss4m -XX:+UseG1GC ", "spark.jvm_options", "-Xss4m -XX:+UseG1GC"),
    ("LAKEHOUSE_VERBOSE", "1", "spark.verbose", True),
    ("LAKEHOUSE_VERBOSE", "false", "spark.verbose", False),
    ("LAKEHOUSE_SPARK_MASTER", " spark://10.0.0.5:7077 ", "spark.master", "spark://10.0.0.5:7077"),
    ("LAKEHOUSE_SPARK_MASTER", "local[3]", "spark.master", "local[3]"),
    ("LAKEHOUSE_SPARK_DRIVER_HOST", "10.0.0.4", "spark.driver_host", "10.0.0.4"),
    ("LAKEHOUSE_SPARK_CORES_MAX", "8", "spark.cores_max", 8),
    ("LAKEHOUSE_EXECUTOR_MEMORY", "2G", "spark.executor_memory", "2g"),
    ("LAKEHOUSE_EXECUTOR_JVM_OPTIONS", " -XX:+UseParallelGC ", "spark.executor_jvm_options", "-XX:+UseParallelGC"),
    ("LAKEHOUSE_CLUSTER_PORT", "17077", "cluster.port", 17077),
    ("LAKEHOUSE_CLUSTER_UI_PORT", "18080", "cluster.ui_port", 18080),
    ("LAKEHOUSE_CLUSTER_WORKERS", "3", "cluster.workers", 3),
    ("LAKEHOUSE_CLUSTER_WORKER_CORES", "1", "cluster.worker_cores", 1),
    ("LAKEHOUSE_CLUSTER_WORKER_MEMORY", "512m", "cluster.worker_memory", "512m"),
    ("LAKEHOUSE_CLUSTER_START_TIMEOUT_SECONDS", "30", "cluster.start_timeout_seconds", 30),
    ("LAKEHOUSE_DAGSTER_STORAGE", " sqlite ", "dagster.storage", "sqlite"),
    ("LAKEHOUSE_DAGSTER_PG_HOST", "db.internal", "dagster.pg_host", "db.internal"),
    ("LAKEHOUSE_DAGSTER_PG_PORT", "6432", "dagster.pg_port", 6432),
    ("LAKEHOUSE_DAGSTER_PG_DATABASE", "dagster_prod", "dagster.pg_database", "dagster_prod"),
    ("LAKEHOUSE_DAGSTER_PG_USER", "lakehouse", "dagster.pg_user", "lakehouse"),
    ("LAKEHOUSE_DAGSTER_PG_DIR", "/srv/pg", "dagster.pg_dir", Path("/srv/pg")),
    ("LAKEHOUSE_STORAGE_URI", " s3://lake-1/prod/lakehouse/ ", "storage.uri", "s3://lake-1/prod/lakehouse"),
    ("LAKEHOUSE_STORAGE_URI", "none", "storage.uri", None),
    ("LAKEHOUSE_S3_ENDPOINT", "http://127.0.0.1:9000/", "storage.s3_endpoint", "http://127.0.0.1:9000"),
    ("LAKEHOUSE_S3_REGION", "eu-central-1", "storage.s3_region", "eu-central-1"),
    ("LAKEHOUSE_LOCK_LEASE_SECONDS", "10", "storage.lease_seconds", 10),
    ("LAKEHOUSE_RECONCILE_CRON", " */5  * * * * ", "schedules.reconcile_cron", "*/5 * * * *"),
    ("LAKEHOUSE_MAINTENANCE_CRON", "0 3 1-7 * 1,3", "schedules.maintenance_cron", "0 3 1-7 * 1,3"),
    ("LAKEHOUSE_SWEEP_START_DATE", "2025-02-03", "schedules.sweep_start_date", date(2025, 2, 3)),
    ("LAKEHOUSE_VACUUM_RETENTION_HOURS", "0", "schedules.vacuum_retention_hours", 0),
    ("LAKEHOUSE_GOLD_FRESHNESS_SECONDS", " 90 ", "schedules.gold_freshness_seconds", 90),
    ("LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS", "a:1,[::1]:9093", "kafka.bootstrap_servers", "a:1,[::1]:9093"),
    ("LAKEHOUSE_KAFKA_TOPIC", "orders.v1", "kafka.topic", "orders.v1"),
    ("LAKEHOUSE_KAFKA_PARTITIONS", "6", "kafka.partitions", 6),
    ("LAKEHOUSE_KAFKA_STARTING_OFFSETS", "latest", "kafka.starting_offsets", "latest"),
    ("LAKEHOUSE_KAFKA_STARTING_OFFSETS", '{"events": {"0": 5}}', "kafka.starting_offsets", '{"events": {"0": 5}}'),
    ("LAKEHOUSE_KAFKA_MAX_OFFSETS_PER_TRIGGER", "10", "kafka.max_offsets_per_trigger", 10),
    ("LAKEHOUSE_KAFKA_BROKER_TIMEOUT_SECONDS", "5", "kafka.broker_timeout_seconds", 5),
    ("LAKEHOUSE_KAFKA_BROKER_JARS_DIR", "/tmp/kb", "kafka.broker_jars_dir", Path("/tmp/kb").resolve()),
    ("LAKEHOUSE_DQ_AMOUNT_MIN", "-5.50", "quality.amount_min", Decimal("-5.50")),
    ("LAKEHOUSE_DQ_AMOUNT_MAX", "1e3", "quality.amount_max", Decimal("1000")),
    ("LAKEHOUSE_FRAUD_AMOUNT_LIMIT", " 2500.50 ", "fraud_amount_limit", Decimal("2500.50")),
    ("LAKEHOUSE_DQ_FUTURE_TOLERANCE_SECONDS", "0", "quality.future_tolerance_seconds", 0),
    ("LAKEHOUSE_DQ_EVENT_TYPES", "purchase, click,", "quality.event_types", ("purchase", "click")),
    ("LAKEHOUSE_DQ_FRESHNESS_SECONDS", "60", "quality.freshness_seconds", 60),
    ("LAKEHOUSE_DQ_MAX_LATE_RATE", "0", "quality.max_late_rate", 0.0),
    ("LAKEHOUSE_DQ_MAX_QUARANTINE_RATE", "1", "quality.max_quarantine_rate", 1.0),
    ("LAKEHOUSE_DQ_WARNINGS_BLOCK", "on", "quality.warnings_block", True),
    ("LAKEHOUSE_DQ_CRON", "30 * * * *", "quality.cron", "30 * * * *"),
]

# Variable and a text it refuses.
REFUSALS = [
    ("LAKEHOUSE_PIPELINES", " , "),
    ("LAKEHOUSE_PIPELINES", "purchases,pageviews"),
    ("LAKEHOUSE_GOLD_OUTPUTS", "sessions,tumbling"),
    ("LAKEHOUSE_GOLD_OUTPUTS", " , "),
    ("LAKEHOUSE_GOLD_OUTPUTS", "all,hopping"),
    ("LAKEHOUSE_WINDOW_MINUTES", "0"),
    ("LAKEHOUSE_WINDOW_MINUTES", "five"),
    ("LAKEHOUSE_WINDOW_MINUTES", "7"),
    ("LAKEHOUSE_HOPPING_SIZE_MINUTES", "-60"),
    ("LAKEHOUSE_HOPPING_SIZE_MINUTES", "62"),
    ("LAKEHOUSE_HOPPING_SLIDE_MINUTES", "2.5"),
    ("LAKEHOUSE_HOPPING_SLIDE_MINUTES", "7"),
    ("LAKEHOUSE_SESSION_GAP_MINUTES", "0"),
    ("LAKEHOUSE_GLOBAL_TRIGGER_COUNT", "-3"),
    ("LAKEHOUSE_FIRING_TRIGGER", "late"),
    ("LAKEHOUSE_ACCUMULATION", "sum"),
    ("LAKEHOUSE_ALLOWED_LATENESS_SECONDS", "-1"),
    ("LAKEHOUSE_WATERMARK_DELAY_SECONDS", "-5"),
    ("LAKEHOUSE_WATERMARK_POLICY", "smart"),
    ("LAKEHOUSE_WATERMARK_PERCENTILE", "1.5"),
    ("LAKEHOUSE_WATERMARK_PERCENTILE", "high"),
    ("LAKEHOUSE_WATERMARK_HORIZON_SECONDS", "0"),
    ("LAKEHOUSE_WATERMARK_MIN_DELAY_SECONDS", "-1"),
    ("LAKEHOUSE_WATERMARK_MIN_DELAY_SECONDS", "901"),
    ("LAKEHOUSE_WATERMARK_MAX_DELAY_SECONDS", "x"),
    ("LAKEHOUSE_WATERMARK_IDLE_SECONDS", "-1"),
    ("LAKEHOUSE_WATERMARK_IDLE_MAX_ADVANCE_SECONDS", "1.5"),
    ("LAKEHOUSE_SOURCE", "s3"),
    ("LAKEHOUSE_TRIGGER_INTERVAL_SECONDS", "0"),
    ("LAKEHOUSE_MAX_FILES_PER_TRIGGER", "0"),
    ("LAKEHOUSE_MAX_LINE_BYTES", "1MB"),
    ("LAKEHOUSE_PROGRESS_FLUSH_SECONDS", "0"),
    ("LAKEHOUSE_FOLLOWERS_NICENESS", "20"),
    ("LAKEHOUSE_FOLLOWERS_NICENESS", "-1"),
    ("LAKEHOUSE_STREAM_WARMUP", "sometimes"),
    ("LAKEHOUSE_SHUFFLE_PARTITIONS", "0"),
    ("LAKEHOUSE_STATE_PARTITIONS", "0"),
    ("LAKEHOUSE_DRIVER_MEMORY", "4gb"),
    ("LAKEHOUSE_DRIVER_MEMORY", "g"),
    ("LAKEHOUSE_SPARK_UI", "maybe"),
    ("LAKEHOUSE_VERBOSE", "2"),
    ("LAKEHOUSE_SPARK_MASTER", "yarn"),
    ("LAKEHOUSE_SPARK_MASTER", "local[0]"),
    ("LAKEHOUSE_SPARK_MASTER", "spark://host"),
    ("LAKEHOUSE_SPARK_DRIVER_HOST", "a host"),
    ("LAKEHOUSE_SPARK_CORES_MAX", "0"),
    ("LAKEHOUSE_EXECUTOR_MEMORY", "lots"),
    ("LAKEHOUSE_CLUSTER_PORT", "0"),
    ("LAKEHOUSE_CLUSTER_UI_PORT", "65536"),
    ("LAKEHOUSE_CLUSTER_WORKERS", "0"),
    ("LAKEHOUSE_CLUSTER_WORKER_CORES", "-1"),
    ("LAKEHOUSE_CLUSTER_WORKER_MEMORY", "2 GB"),
    ("LAKEHOUSE_CLUSTER_START_TIMEOUT_SECONDS", "0"),
    ("LAKEHOUSE_DAGSTER_STORAGE", "mysql"),
    ("LAKEHOUSE_DAGSTER_PG_HOST", "db host"),
    ("LAKEHOUSE_DAGSTER_PG_PORT", "99999"),
    ("LAKEHOUSE_DAGSTER_PG_DATABASE", "Dagster-Prod"),
    ("LAKEHOUSE_DAGSTER_PG_USER", "robert'); DROP TABLE runs;--"),
    ("LAKEHOUSE_STORAGE_URI", "/data/lakehouse"),
    ("LAKEHOUSE_STORAGE_URI", "s3a://Lake/x"),
    ("LAKEHOUSE_S3_ENDPOINT", "127.0.0.1:9000"),
    ("LAKEHOUSE_S3_REGION", "Frankfurt"),
    ("LAKEHOUSE_LOCK_LEASE_SECONDS", "0"),
    ("LAKEHOUSE_RECONCILE_CRON", "hourly"),
    ("LAKEHOUSE_RECONCILE_CRON", "* * * *"),
    ("LAKEHOUSE_MAINTENANCE_CRON", "0 3 * * MON"),
    ("LAKEHOUSE_SWEEP_START_DATE", "yesterday"),
    ("LAKEHOUSE_VACUUM_RETENTION_HOURS", "-1"),
    ("LAKEHOUSE_GOLD_FRESHNESS_SECONDS", "0"),
    ("LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS", "localhost"),
    ("LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS", "a:1,,b:2"),
    ("LAKEHOUSE_KAFKA_TOPIC", "bad topic"),
    ("LAKEHOUSE_KAFKA_PARTITIONS", "zero"),
    ("LAKEHOUSE_KAFKA_STARTING_OFFSETS", "newest"),
    ("LAKEHOUSE_KAFKA_MAX_OFFSETS_PER_TRIGGER", "0"),
    ("LAKEHOUSE_KAFKA_BROKER_TIMEOUT_SECONDS", "-1"),
    ("LAKEHOUSE_DQ_AMOUNT_MIN", "x"),
    ("LAKEHOUSE_DQ_AMOUNT_MIN", "Infinity"),
    ("LAKEHOUSE_DQ_AMOUNT_MIN", "2000000"),
    ("LAKEHOUSE_DQ_AMOUNT_MAX", "NaN"),
    ("LAKEHOUSE_FRAUD_AMOUNT_LIMIT", "lots"),
    ("LAKEHOUSE_DQ_FUTURE_TOLERANCE_SECONDS", "-1"),
    ("LAKEHOUSE_DQ_EVENT_TYPES", ",,"),
    ("LAKEHOUSE_DQ_FRESHNESS_SECONDS", "0"),
    ("LAKEHOUSE_DQ_MAX_LATE_RATE", "-0.1"),
    ("LAKEHOUSE_DQ_MAX_QUARANTINE_RATE", "2"),
    ("LAKEHOUSE_DQ_WARNINGS_BLOCK", "sometimes"),
    ("LAKEHOUSE_DQ_CRON", "every hour"),
]


@pytest.mark.parametrize(("name", "text", "where", "expected"), READINGS)
def test_each_variable_is_read(name: str, text: str, where: str, expected: Any) -> None:
    assert value(Settings.from_env({name: text}), where) == expected


@pytest.mark.parametrize(("name", "text"), REFUSALS)
def test_a_bad_value_stops_with_one_line_naming_its_variable(name: str, text: str) -> None:
    message = refusal({name: text})
    assert message.startswith(f"{name} "), message
    assert "\n" not in message


def test_every_variable_has_a_reading_and_a_refusal() -> None:
    assert {name for name, *_ in READINGS} == VARIABLES
    assert {name for name, _ in REFUSALS} == VARIABLES - ANY_TEXT


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"LAKEHOUSE_WINDOW_MINUTES": "0"}, "LAKEHOUSE_WINDOW_MINUTES must be a positive whole number, got '0'"),
        ({"LAKEHOUSE_WINDOW_MINUTES": "5.0"}, "LAKEHOUSE_WINDOW_MINUTES must be a whole number, got '5.0'"),
        (
            {"LAKEHOUSE_FOLLOWERS_NICENESS": "20"},
            "LAKEHOUSE_FOLLOWERS_NICENESS must be a whole number from 0 to 19, got '20'",
        ),
        (
            {"LAKEHOUSE_WATERMARK_DELAY_SECONDS": "-5"},
            "LAKEHOUSE_WATERMARK_DELAY_SECONDS must be zero or a positive whole number, got '-5'",
        ),
        (
            {"LAKEHOUSE_WINDOW_MINUTES": "7"},
            "LAKEHOUSE_WINDOW_MINUTES must divide a day (1440 minutes) so windows align to UTC days, got 7",
        ),
        (
            {"LAKEHOUSE_HOPPING_SLIDE_MINUTES": "7"},
            "LAKEHOUSE_HOPPING_SLIDE_MINUTES must be a multiple of LAKEHOUSE_WINDOW_MINUTES (5): hopping windows "
            "are sums of tumbling ones, got 7",
        ),
        (
            {"LAKEHOUSE_HOPPING_SIZE_MINUTES": "62"},
            "LAKEHOUSE_HOPPING_SIZE_MINUTES must be a multiple of LAKEHOUSE_HOPPING_SLIDE_MINUTES (5), which must "
            "divide a day, got 62",
        ),
        (
            {"LAKEHOUSE_HOPPING_SLIDE_MINUTES": "35", "LAKEHOUSE_HOPPING_SIZE_MINUTES": "70"},
            "LAKEHOUSE_HOPPING_SIZE_MINUTES must be a multiple of LAKEHOUSE_HOPPING_SLIDE_MINUTES (35), which must "
            "divide a day, got 70",
        ),
        ({"LAKEHOUSE_SOURCE": " s3 "}, "LAKEHOUSE_SOURCE must be one of landing, kafka, got 's3'"),
        (
            {"LAKEHOUSE_GOLD_OUTPUTS": "sessions,tumbling"},
            "LAKEHOUSE_GOLD_OUTPUTS must be all, none or a comma-separated list of hopping, sessions, global, "
            "firings, order_payments, fraud_alerts, unique_urls, got 'sessions,tumbling'",
        ),
        ({"LAKEHOUSE_SPARK_UI": "maybe"}, "LAKEHOUSE_SPARK_UI must be true or false, got 'maybe'"),
        ({"LAKEHOUSE_DRIVER_MEMORY": "4GB"}, "LAKEHOUSE_DRIVER_MEMORY must look like 512m or 4g, got '4gb'"),
        (
            {"LAKEHOUSE_RECONCILE_CRON": "hourly"},
            "LAKEHOUSE_RECONCILE_CRON must be a five-field cron expression such as '*/15 * * * *', got 'hourly'",
        ),
        (
            {"LAKEHOUSE_SWEEP_START_DATE": "yesterday"},
            "LAKEHOUSE_SWEEP_START_DATE must be a date like 2024-01-01, got 'yesterday'",
        ),
        (
            {"LAKEHOUSE_DQ_AMOUNT_MIN": "x"},
            "LAKEHOUSE_DQ_AMOUNT_MIN must be a decimal number such as 1000000.00, got 'x'",
        ),
        ({"LAKEHOUSE_DQ_AMOUNT_MAX": "NaN"}, "LAKEHOUSE_DQ_AMOUNT_MAX must be a finite decimal number, got 'NaN'"),
        (
            {"LAKEHOUSE_DQ_AMOUNT_MIN": "10", "LAKEHOUSE_DQ_AMOUNT_MAX": "5"},
            "LAKEHOUSE_DQ_AMOUNT_MIN (10) must not exceed LAKEHOUSE_DQ_AMOUNT_MAX (5)",
        ),
        (
            {"LAKEHOUSE_DQ_MAX_LATE_RATE": "high"},
            "LAKEHOUSE_DQ_MAX_LATE_RATE must be a fraction between 0 and 1 such as 0.05, got 'high'",
        ),
        (
            {"LAKEHOUSE_DQ_EVENT_TYPES": ",,"},
            "LAKEHOUSE_DQ_EVENT_TYPES must be a comma-separated list such as 'purchase,click', got ',,'",
        ),
        (
            {"LAKEHOUSE_WATERMARK_MIN_DELAY_SECONDS": "100", "LAKEHOUSE_WATERMARK_MAX_DELAY_SECONDS": "50"},
            "LAKEHOUSE_WATERMARK_MIN_DELAY_SECONDS (100) must not exceed LAKEHOUSE_WATERMARK_MAX_DELAY_SECONDS (50)",
        ),
        (
            {"LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS": "localhost"},
            "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS must be host:port[,host:port…], got 'localhost'",
        ),
        (
            {"LAKEHOUSE_KAFKA_TOPIC": "bad topic"},
            "LAKEHOUSE_KAFKA_TOPIC must be a Kafka topic name such as 'events', got 'bad topic'",
        ),
        (
            {"LAKEHOUSE_KAFKA_STARTING_OFFSETS": "newest"},
            "LAKEHOUSE_KAFKA_STARTING_OFFSETS must be earliest, latest or Spark's JSON offsets, got 'newest'",
        ),
    ],
)
def test_the_error_lines_read_as_before(env: dict[str, str], message: str) -> None:
    assert refusal(env) == message


def test_unset_or_blank_variables_keep_the_defaults() -> None:
    defaults = Settings.from_env({})
    assert defaults == Settings()
    assert Settings.from_env(dict.fromkeys(VARIABLES - {"LAKEHOUSE_JVM_CLASS_ARCHIVE"}, "  ")) == defaults
    assert defaults.home == DEFAULT_HOME
    assert defaults.gold_outputs == frozenset(GOLD_OUTPUTS)
    assert defaults.windows == WindowSettings(
        minutes=5,
        hopping_size_minutes=60,
        hopping_slide_minutes=5,
        session_gap_minutes=30,
        global_trigger_count=100,
        firing_trigger="early",
        accumulation="accumulating",
        allowed_lateness_seconds=60,
    )
    assert defaults.watermarks == WatermarkSettings(
        delay_seconds=120,
        policy="fixed",
        percentile=0.99,
        horizon_seconds=3600,
        min_delay_seconds=10,
        max_delay_seconds=900,
        idle_seconds=0,
        idle_max_advance_seconds=3600,
    )
    assert defaults.streams == StreamSettings("landing", 2, 50, 1_048_576, 10)
    assert defaults.spark == SparkSettings(
        4, "4g", False, DEFAULT_JARS_DIR, DEFAULT_CLASS_ARCHIVE, "", False, "local[*]", "127.0.0.1", 2, "1g"
    )
    assert defaults.cluster == ClusterSettings(7077, 8080, 2, 2, "2g", 90)
    assert defaults.schedules == ScheduleSettings("*/15 * * * *", "7 * * * *", date(2024, 1, 1), 168)
    assert defaults.kafka == KafkaSettings(
        "127.0.0.1:9092", "events", 3, "earliest", 200_000, 60, DEFAULT_KAFKA_BROKER_JARS_DIR, ()
    )
    assert defaults.quality == QualitySettings(
        Decimal("-1000000.00"), Decimal("1000000.00"), 300, (), 900, 0.05, 0.05, False, "0 * * * *"
    )


def test_the_time_spans() -> None:
    settings = read(WINDOW_MINUTES="15", ALLOWED_LATENESS_SECONDS="90", WATERMARK_DELAY_SECONDS="30")
    assert settings.windows.length == timedelta(minutes=15)
    assert settings.windows.allowed_lateness == timedelta(seconds=90)
    assert settings.watermarks.delay == timedelta(seconds=30)


@pytest.mark.parametrize(
    ("window", "slide", "size"),
    [(1, 5, 60), (2, 2, 60), (5, 5, 60), (10, 10, 60), (15, 15, 60), (45, 45, 90), (60, 60, 60), (90, 90, 90)],
)
def test_unset_hopping_windows_follow_a_longer_tumbling_window(window: int, slide: int, size: int) -> None:
    """Slide: 5 minutes when the window divides it, else the window; size: the hour rounded up to the slide."""
    windows = read(WINDOW_MINUTES=str(window)).windows
    assert (windows.hopping_slide_minutes, windows.hopping_size_minutes) == (slide, size)


def test_set_hopping_windows_are_kept() -> None:
    windows = read(WINDOW_MINUTES="15", HOPPING_SLIDE_MINUTES="30", HOPPING_SIZE_MINUTES="120").windows
    assert (windows.hopping_slide_minutes, windows.hopping_size_minutes) == (30, 120)
    assert read(WINDOW_MINUTES="15", HOPPING_SIZE_MINUTES="30").windows.hopping_slide_minutes == 15


def test_kafka_client_options_come_from_their_prefix_and_are_never_shown() -> None:
    kafka = Settings.from_env(
        {
            "LAKEHOUSE_KAFKA_OPTION_SASL_MECHANISM": "PLAIN",
            "LAKEHOUSE_KAFKA_OPTION_SECURITY_PROTOCOL": "SASL_SSL",
            "LAKEHOUSE_KAFKA_OPTION_": "ignored",
        }
    ).kafka
    assert kafka.options == (("sasl.mechanism", "PLAIN"), ("security.protocol", "SASL_SSL"))
    assert kafka.redacted == {"sasl.mechanism": "***", "security.protocol": "***"}
    assert "SASL_SSL" not in repr(kafka)


def test_the_broker_listens_on_the_first_bootstrap_server() -> None:
    assert read(KAFKA_BOOTSTRAP_SERVERS="[::1]:9093,b:2").kafka.broker_address == ("::1", 9093)


def test_keeps_names_only_known_gold_outputs() -> None:
    settings = read(GOLD_OUTPUTS="sessions")
    assert settings.keeps("sessions") and not settings.keeps("hopping")
    with pytest.raises(KeyError):
        settings.keeps("tumbling")


def test_the_home_s_folders(tmp_path: Path) -> None:
    settings = read(HOME=str(tmp_path / "home"))
    settings.ensure_home()
    assert all(folder.is_dir() for folder in (settings.landing_dir, settings.tables_dir, settings.checkpoints_dir))
    assert settings.reports_dir.is_dir()
    assert settings.dagster_home == settings.home / "dagster" and settings.logs_dir == settings.home / "logs"
    assert settings.kafka_dir == settings.home / "kafka"


def test_an_unusable_home_stops_with_one_line() -> None:
    with pytest.raises(SettingsError, match=r"^LAKEHOUSE_HOME=/dev/null/lakehouse is not usable: "):
        read(HOME="/dev/null/lakehouse").ensure_home()


DEFAULTS = Settings()

# A group, a change ``replace`` would make, the variable its error line names.
INVALID_CHANGES = [
    (DEFAULTS, {"gold_outputs": frozenset({"tumbling"})}, "LAKEHOUSE_GOLD_OUTPUTS"),
    (DEFAULTS, {"gold_outputs": {"sessions"}}, "LAKEHOUSE_GOLD_OUTPUTS"),
    (DEFAULTS, {"home": "relative/home"}, "LAKEHOUSE_HOME"),
    (DEFAULTS, {"pipeline_names": "readings"}, "LAKEHOUSE_PIPELINES"),
    (DEFAULTS, {"pipelines_dir": "specs"}, "LAKEHOUSE_PIPELINES_DIR"),
    (DEFAULTS.windows, {"minutes": 0}, "LAKEHOUSE_WINDOW_MINUTES"),
    (DEFAULTS.windows, {"minutes": 7}, "LAKEHOUSE_WINDOW_MINUTES"),
    (DEFAULTS.windows, {"minutes": "5"}, "LAKEHOUSE_WINDOW_MINUTES"),
    (DEFAULTS.windows, {"minutes": True}, "LAKEHOUSE_WINDOW_MINUTES"),
    (DEFAULTS.windows, {"minutes": 15}, "LAKEHOUSE_HOPPING_SLIDE_MINUTES"),
    (DEFAULTS.windows, {"hopping_size_minutes": 62}, "LAKEHOUSE_HOPPING_SIZE_MINUTES"),
    (DEFAULTS.windows, {"hopping_slide_minutes": 35, "hopping_size_minutes": 70}, "LAKEHOUSE_HOPPING_SIZE_MINUTES"),
    (DEFAULTS.windows, {"session_gap_minutes": -30}, "LAKEHOUSE_SESSION_GAP_MINUTES"),
    (DEFAULTS.windows, {"global_trigger_count": 0}, "LAKEHOUSE_GLOBAL_TRIGGER_COUNT"),
    (DEFAULTS.windows, {"firing_trigger": "late"}, "LAKEHOUSE_FIRING_TRIGGER"),
    (DEFAULTS.windows, {"accumulation": "sum"}, "LAKEHOUSE_ACCUMULATION"),
    (DEFAULTS.windows, {"allowed_lateness_seconds": -1}, "LAKEHOUSE_ALLOWED_LATENESS_SECONDS"),
    (DEFAULTS.watermarks, {"delay_seconds": -5}, "LAKEHOUSE_WATERMARK_DELAY_SECONDS"),
    (DEFAULTS.watermarks, {"policy": "smart"}, "LAKEHOUSE_WATERMARK_POLICY"),
    (DEFAULTS.watermarks, {"percentile": 1.5}, "LAKEHOUSE_WATERMARK_PERCENTILE"),
    (DEFAULTS.watermarks, {"horizon_seconds": 0}, "LAKEHOUSE_WATERMARK_HORIZON_SECONDS"),
    (DEFAULTS.watermarks, {"min_delay_seconds": 901}, "LAKEHOUSE_WATERMARK_MIN_DELAY_SECONDS"),
    (DEFAULTS.watermarks, {"max_delay_seconds": 5}, "LAKEHOUSE_WATERMARK_MIN_DELAY_SECONDS"),
    (DEFAULTS.watermarks, {"idle_seconds": -1}, "LAKEHOUSE_WATERMARK_IDLE_SECONDS"),
    (DEFAULTS.watermarks, {"idle_max_advance_seconds": 1.5}, "LAKEHOUSE_WATERMARK_IDLE_MAX_ADVANCE_SECONDS"),
    (DEFAULTS.streams, {"source": "s3"}, "LAKEHOUSE_SOURCE"),
    (DEFAULTS.streams, {"trigger_interval_seconds": 0}, "LAKEHOUSE_TRIGGER_INTERVAL_SECONDS"),
    (DEFAULTS.streams, {"max_files_per_trigger": 0}, "LAKEHOUSE_MAX_FILES_PER_TRIGGER"),
    (DEFAULTS.streams, {"max_line_bytes": -1}, "LAKEHOUSE_MAX_LINE_BYTES"),
    (DEFAULTS.streams, {"progress_flush_seconds": 0}, "LAKEHOUSE_PROGRESS_FLUSH_SECONDS"),
    (DEFAULTS.streams, {"followers_niceness": 20}, "LAKEHOUSE_FOLLOWERS_NICENESS"),
    (DEFAULTS.streams, {"warmup": "yes"}, "LAKEHOUSE_STREAM_WARMUP"),
    (DEFAULTS.spark, {"shuffle_partitions": 0}, "LAKEHOUSE_SHUFFLE_PARTITIONS"),
    (DEFAULTS.spark, {"state_partitions": -1}, "LAKEHOUSE_STATE_PARTITIONS"),
    (DEFAULTS.spark, {"driver_memory": "lots"}, "LAKEHOUSE_DRIVER_MEMORY"),
    (DEFAULTS.spark, {"ui": "yes"}, "LAKEHOUSE_SPARK_UI"),
    (DEFAULTS.spark, {"jars_dir": "jars"}, "LAKEHOUSE_JARS_DIR"),
    (DEFAULTS.spark, {"class_archive": "a.jsa"}, "LAKEHOUSE_JVM_CLASS_ARCHIVE"),
    (DEFAULTS.spark, {"jvm_options": ["-Xss4m"]}, "LAKEHOUSE_JVM_OPTIONS"),
    (DEFAULTS.spark, {"verbose": 1}, "LAKEHOUSE_VERBOSE"),
    (DEFAULTS.spark, {"master": "yarn"}, "LAKEHOUSE_SPARK_MASTER"),
    (DEFAULTS.spark, {"driver_host": ""}, "LAKEHOUSE_SPARK_DRIVER_HOST"),
    (DEFAULTS.spark, {"cores_max": 0}, "LAKEHOUSE_SPARK_CORES_MAX"),
    (DEFAULTS.spark, {"executor_memory": 1}, "LAKEHOUSE_EXECUTOR_MEMORY"),
    (DEFAULTS.spark, {"executor_jvm_options": ["-Xss4m"]}, "LAKEHOUSE_EXECUTOR_JVM_OPTIONS"),
    (DEFAULTS.cluster, {"port": 70000}, "LAKEHOUSE_CLUSTER_PORT"),
    (DEFAULTS.cluster, {"ui_port": "8080"}, "LAKEHOUSE_CLUSTER_UI_PORT"),
    (DEFAULTS.cluster, {"workers": 0}, "LAKEHOUSE_CLUSTER_WORKERS"),
    (DEFAULTS.cluster, {"worker_cores": True}, "LAKEHOUSE_CLUSTER_WORKER_CORES"),
    (DEFAULTS.cluster, {"worker_memory": "2"}, "LAKEHOUSE_CLUSTER_WORKER_MEMORY"),
    (DEFAULTS.cluster, {"start_timeout_seconds": -5}, "LAKEHOUSE_CLUSTER_START_TIMEOUT_SECONDS"),
    (DEFAULTS.dagster, {"storage": "postgresql"}, "LAKEHOUSE_DAGSTER_STORAGE"),
    (DEFAULTS.dagster, {"pg_host": ""}, "LAKEHOUSE_DAGSTER_PG_HOST"),
    (DEFAULTS.dagster, {"pg_port": 0}, "LAKEHOUSE_DAGSTER_PG_PORT"),
    (DEFAULTS.dagster, {"pg_database": "1db"}, "LAKEHOUSE_DAGSTER_PG_DATABASE"),
    (DEFAULTS.dagster, {"pg_user": None}, "LAKEHOUSE_DAGSTER_PG_USER"),
    (DEFAULTS.dagster, {"pg_dir": "pg"}, "LAKEHOUSE_DAGSTER_PG_DIR"),
    (DEFAULTS.storage, {"uri": "file:///tmp"}, "LAKEHOUSE_STORAGE_URI"),
    (DEFAULTS.storage, {"s3_endpoint": "minio:9000"}, "LAKEHOUSE_S3_ENDPOINT"),
    (DEFAULTS.storage, {"s3_region": ""}, "LAKEHOUSE_S3_REGION"),
    (DEFAULTS.storage, {"lease_seconds": 0}, "LAKEHOUSE_LOCK_LEASE_SECONDS"),
    (DEFAULTS.schedules, {"reconcile_cron": "hourly"}, "LAKEHOUSE_RECONCILE_CRON"),
    (DEFAULTS.schedules, {"maintenance_cron": "0 3 * * MON"}, "LAKEHOUSE_MAINTENANCE_CRON"),
    (DEFAULTS.schedules, {"sweep_start_date": "2024-01-01"}, "LAKEHOUSE_SWEEP_START_DATE"),
    (DEFAULTS.schedules, {"vacuum_retention_hours": -1}, "LAKEHOUSE_VACUUM_RETENTION_HOURS"),
    (DEFAULTS.schedules, {"gold_freshness_seconds": 0}, "LAKEHOUSE_GOLD_FRESHNESS_SECONDS"),
    (DEFAULTS.kafka, {"bootstrap_servers": "localhost"}, "LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS"),
    (DEFAULTS.kafka, {"topic": "bad topic"}, "LAKEHOUSE_KAFKA_TOPIC"),
    (DEFAULTS.kafka, {"partitions": 0}, "LAKEHOUSE_KAFKA_PARTITIONS"),
    (DEFAULTS.kafka, {"starting_offsets": "newest"}, "LAKEHOUSE_KAFKA_STARTING_OFFSETS"),
    (DEFAULTS.kafka, {"max_offsets_per_trigger": 0}, "LAKEHOUSE_KAFKA_MAX_OFFSETS_PER_TRIGGER"),
    (DEFAULTS.kafka, {"broker_timeout_seconds": 0}, "LAKEHOUSE_KAFKA_BROKER_TIMEOUT_SECONDS"),
    (DEFAULTS.kafka, {"broker_jars_dir": None}, "LAKEHOUSE_KAFKA_BROKER_JARS_DIR"),
    (DEFAULTS, {"fraud_amount_limit": Decimal("Infinity")}, "LAKEHOUSE_FRAUD_AMOUNT_LIMIT"),
    (DEFAULTS.quality, {"amount_min": Decimal("NaN")}, "LAKEHOUSE_DQ_AMOUNT_MIN"),
    (DEFAULTS.quality, {"amount_min": Decimal("2000000")}, "LAKEHOUSE_DQ_AMOUNT_MIN"),
    (DEFAULTS.quality, {"amount_max": 5}, "LAKEHOUSE_DQ_AMOUNT_MAX"),
    (DEFAULTS.quality, {"future_tolerance_seconds": -1}, "LAKEHOUSE_DQ_FUTURE_TOLERANCE_SECONDS"),
    (DEFAULTS.quality, {"event_types": ("purchase", "")}, "LAKEHOUSE_DQ_EVENT_TYPES"),
    (DEFAULTS.quality, {"event_types": "purchase"}, "LAKEHOUSE_DQ_EVENT_TYPES"),
    (DEFAULTS.quality, {"freshness_seconds": 0}, "LAKEHOUSE_DQ_FRESHNESS_SECONDS"),
    (DEFAULTS.quality, {"max_late_rate": -0.1}, "LAKEHOUSE_DQ_MAX_LATE_RATE"),
    (DEFAULTS.quality, {"max_quarantine_rate": 2}, "LAKEHOUSE_DQ_MAX_QUARANTINE_RATE"),
    (DEFAULTS.quality, {"warnings_block": "no"}, "LAKEHOUSE_DQ_WARNINGS_BLOCK"),
    (DEFAULTS.quality, {"cron": "every hour"}, "LAKEHOUSE_DQ_CRON"),
]


@pytest.mark.parametrize(("group", "changes", "name"), INVALID_CHANGES)
def test_replace_checks_the_group_again(group: Any, changes: dict[str, Any], name: str) -> None:
    """What ``from_env`` refuses, building a group directly (``dataclasses.replace``) refuses too."""
    with pytest.raises(SettingsError) as caught:
        replace(group, **changes)
    assert str(caught.value).startswith(f"{name} "), caught.value
    assert "\n" not in str(caught.value)


def test_every_field_is_checked_on_construction() -> None:
    changed = {(type(group), field) for group, changes, _ in INVALID_CHANGES for field in changes}
    checked = {(group, f.name) for group in GROUPS for f in fields(group) if "env" in f.metadata}
    assert checked <= changed


def test_replace_with_valid_values_builds_new_settings() -> None:
    settings = replace(DEFAULTS, streams=replace(DEFAULTS.streams, trigger_interval_seconds=1))
    assert settings.streams.trigger_interval_seconds == 1 and settings.windows == DEFAULTS.windows
    windows = replace(DEFAULTS.windows, minutes=15, hopping_slide_minutes=15)
    assert (windows.minutes, windows.hopping_size_minutes) == (15, 60)
    assert replace(DEFAULTS.watermarks, min_delay_seconds=900).min_delay_seconds == 900
    assert replace(DEFAULTS.spark, class_archive=None).class_archive is None


def test_a_message_for_a_value_built_in_python_shows_the_value() -> None:
    with pytest.raises(SettingsError, match=r"^LAKEHOUSE_WINDOW_MINUTES must be a positive whole number, got 0$"):
        WindowSettings(minutes=0)


def test_postgres_storage_needs_its_password_from_the_environment() -> None:
    message = refusal({"LAKEHOUSE_DAGSTER_STORAGE": "postgres"})
    assert message.startswith("LAKEHOUSE_DAGSTER_PG_PASSWORD must be set when LAKEHOUSE_DAGSTER_STORAGE=postgres")
    env = {"LAKEHOUSE_DAGSTER_STORAGE": "postgres", "LAKEHOUSE_DAGSTER_PG_PASSWORD": "not-shown"}
    settings = Settings.from_env(env)
    assert settings.dagster.storage == "postgres"
    assert "not-shown" not in repr(settings)


def test_on_object_storage_tables_checkpoints_and_landing_move_and_the_rest_stays_home() -> None:
    settings = Settings.from_env({"LAKEHOUSE_HOME": "/tmp/h", "LAKEHOUSE_STORAGE_URI": "s3://lake/prod"})
    assert [str(settings.tables_dir), str(settings.checkpoints_dir), str(settings.landing_dir)] == [
        "s3://lake/prod/tables",
        "s3://lake/prod/checkpoints",
        "s3://lake/prod/landing",
    ]
    assert settings.reports_dir == Path("/tmp/h/reports") and settings.logs_dir == Path("/tmp/h/logs")
    assert Settings.from_env({"LAKEHOUSE_HOME": "/tmp/h"}).tables_dir == Path("/tmp/h/tables")
