"""Settings: where the lakehouse lives and the event-time parameters every stream shares.

Everything is read from the environment (``LAKEHOUSE_*``). The settings come in small frozen groups
(``windows``, ``watermarks``, ``streams``, ``spark``, ``cluster``, ``dagster``, ``schedules``, ``kafka``,
``quality``) under :class:`Settings`; each field names its variable and its kind (``warehouse.setting_kinds``),
which say how the variable is read and which values it allows. Every group checks itself when it is built, from
the environment or by ``dataclasses.replace``: a bad value stops with one readable line naming the variable
(:class:`SettingsError`).
"""

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import date, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any, Self

from warehouse.pipelines import (
    FIRST_PIPELINE,
    PipelineSpec,
    declared_outputs,
    declared_pipelines,
    landing_folder,
    quality_fields,
    watermark_fields,
    window_fields,
)
from warehouse.setting_groups import (
    ClusterSettings,
    DagsterSettings,
    StorageSettings,
)
from warehouse.setting_kinds import (
    BOOLEAN,
    CRON,
    DATE,
    DECIMAL,
    HOST,
    MEMORY,
    NAMES,
    NICENESS,
    NON_NEGATIVE_INT,
    OFFSETS,
    OPTIONAL_PATH,
    PATH,
    PIPELINE_NAMES,
    POSITIVE_INT,
    RATE,
    SERVERS,
    SPARK_MASTER,
    TEXT,
    TOPIC,
    Group,
    Kind,
    SettingsError,
    choice,
    names,
    read,
    var,
)

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_HOME = REPO_ROOT / ".lakehouse"
DEFAULT_JARS_DIR = REPO_ROOT / ".cache" / "jars"
DEFAULT_KAFKA_BROKER_JARS_DIR = REPO_ROOT / ".cache" / "kafka-broker"
#: The driver JVM's class-data archive, built by the set-up (scripts/class_archive.py).
DEFAULT_CLASS_ARCHIVE = REPO_ROOT / ".cache" / "jvm" / "spark-classes.jsa"
#: ``LAKEHOUSE_KAFKA_OPTION_<NAME>`` passes ``kafka.<name>`` (lower case, ``_`` → ``.``) to every Kafka client.
KAFKA_OPTION_PREFIX = "LAKEHOUSE_KAFKA_OPTION_"
FIRING_TRIGGERS = ("early", "watermark")
ACCUMULATION_MODES = ("accumulating", "discarding", "retracting")
#: The gold outputs beyond ``user_spend_5m`` (and its corrections and late events), each a table kept by the
#: streams: hopping windows, sessions, global windows, the firings log, orders ⋈ payments, fraud alerts and
#: unique URLs. ``LAKEHOUSE_GOLD_OUTPUTS`` picks some; a table left out is not written, not rebuilt by a
#: replay, and not an asset, so none of its cost is paid.
GOLD_OUTPUTS = ("hopping", "sessions", "global", "firings", "order_payments", "fraud_alerts", "unique_urls")
DAY_MINUTES = 24 * 60


def _gold_outputs(text: str) -> frozenset[str]:
    if text in {"all", "none"}:
        return frozenset(GOLD_OUTPUTS if text == "all" else ())
    chosen = frozenset(names(text))
    if chosen - set(GOLD_OUTPUTS):
        raise ValueError(text)
    return chosen


GOLD_OUTPUT_NAMES = Kind(
    _gold_outputs,
    lambda v: isinstance(v, frozenset) and v <= set(GOLD_OUTPUTS),
    f"be all, none or a comma-separated list of {', '.join(GOLD_OUTPUTS)}",
    shown=str.strip,
)


@dataclass(frozen=True)
class WindowSettings(Group):
    """The gold windows and their firings.

    Gold windows are tumbling ``minutes`` long and aligned to the UTC epoch; a window is closed (final) once the
    watermark (:class:`WatermarkSettings`) has passed ``window_end + allowed_lateness``.
    """

    minutes: int = field(default=5, metadata=var("LAKEHOUSE_WINDOW_MINUTES", POSITIVE_INT))
    #: Hopping windows (``gold.user_spend_<size>_hopping``): ``hopping_size_minutes`` long, a new one every
    #: ``hopping_slide_minutes``; sums of whole tumbling windows, so the slide is a multiple of them. Unset, they
    #: follow a longer tumbling window (slide = it, size = the hour rounded up to it): see :meth:`from_env`.
    hopping_size_minutes: int = field(default=60, metadata=var("LAKEHOUSE_HOPPING_SIZE_MINUTES", POSITIVE_INT))
    hopping_slide_minutes: int = field(default=5, metadata=var("LAKEHOUSE_HOPPING_SLIDE_MINUTES", POSITIVE_INT))
    #: Session windows (``gold.user_sessions``): events at most this far apart form one session.
    session_gap_minutes: int = field(default=30, metadata=var("LAKEHOUSE_SESSION_GAP_MINUTES", POSITIVE_INT))
    #: Global windows (``gold.user_spend_global``): per user, one window over all of time whose count trigger
    #: fires every ``global_trigger_count`` events.
    global_trigger_count: int = field(default=100, metadata=var("LAKEHOUSE_GLOBAL_TRIGGER_COUNT", POSITIVE_INT))
    #: What ``gold.user_spend_<n>m_firings`` emits: ``early`` (every micro-batch that changes a window, partial
    #: results marked non-final, at the streams' trigger cadence) or ``watermark`` (one on-time result when the
    #: watermark closes the window, then late firings); each firing as ``accumulating`` (the window's value),
    #: ``discarding`` (only the change since the previous firing) or ``retracting`` (the previous value
    #: retracted, then the new one).
    firing_trigger: str = field(default="early", metadata=var("LAKEHOUSE_FIRING_TRIGGER", choice(FIRING_TRIGGERS)))
    accumulation: str = field(
        default="accumulating", metadata=var("LAKEHOUSE_ACCUMULATION", choice(ACCUMULATION_MODES))
    )
    allowed_lateness_seconds: int = field(
        default=60, metadata=var("LAKEHOUSE_ALLOWED_LATENESS_SECONDS", NON_NEGATIVE_INT)
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if DAY_MINUTES % self.minutes:
            raise SettingsError(
                f"LAKEHOUSE_WINDOW_MINUTES must divide a day (1440 minutes) so windows align to UTC days, "
                f"got {self.minutes}"
            )
        if self.hopping_slide_minutes % self.minutes:
            raise SettingsError(
                f"LAKEHOUSE_HOPPING_SLIDE_MINUTES must be a multiple of LAKEHOUSE_WINDOW_MINUTES "
                f"({self.minutes}): hopping windows are sums of tumbling ones, got {self.hopping_slide_minutes}"
            )
        if self.hopping_size_minutes % self.hopping_slide_minutes or DAY_MINUTES % self.hopping_slide_minutes:
            raise SettingsError(
                f"LAKEHOUSE_HOPPING_SIZE_MINUTES must be a multiple of LAKEHOUSE_HOPPING_SLIDE_MINUTES "
                f"({self.hopping_slide_minutes}), which must divide a day, got {self.hopping_size_minutes}"
            )

    @classmethod
    def from_env(cls, env: Mapping[str, str], declared: Mapping[str, Any] | None = None) -> Self:
        """Read the variables; unset ones keep the ``declared`` values (a spec's), else the defaults."""
        declared = dict(declared or {})
        minutes = read(env, "LAKEHOUSE_WINDOW_MINUTES", POSITIVE_INT, declared.get("minutes", cls.minutes))
        # Unset, the hopping windows follow a longer tumbling window: slide = it, size = the hour rounded up.
        slide = declared.get("hopping_slide_minutes", cls.hopping_slide_minutes)
        slide = slide if slide % minutes == 0 else minutes
        size = -(-declared.get("hopping_size_minutes", cls.hopping_size_minutes) // slide) * slide
        declared.update(minutes=minutes, hopping_slide_minutes=slide, hopping_size_minutes=size)
        return cls(**cls._read_fields(env, **declared))

    @property
    def length(self) -> timedelta:
        """How long a tumbling window is."""
        return timedelta(minutes=self.minutes)

    @property
    def allowed_lateness(self) -> timedelta:
        return timedelta(seconds=self.allowed_lateness_seconds)


@dataclass(frozen=True)
class WatermarkSettings(Group):
    """How the windowing stream's watermark moves (``LAKEHOUSE_WATERMARK_*``).

    - ``policy="fixed"``: watermark = max event time seen - ``delay_seconds``.
    - ``policy="adaptive"``: the delay is the ``percentile`` of observed event-time lag (how far behind
      the max event time seen before its batch an event arrives) over the batches whose max event time
      lies within ``horizon_seconds`` of the newest, clamped to ``[min_delay_seconds,
      max_delay_seconds]``; the fixed delay applies until a batch has been observed.
    - ``idle_seconds`` > 0 (opt-in, with either policy): once no event has reached the stream for that
      long in processing time, the watermark moves on with processing time (one second per second past
      the idle time), at most ``idle_max_advance_seconds`` beyond where events left it, so the last
      windows still close.

    The watermark never moves back, whatever the policy.
    """

    delay_seconds: int = field(default=120, metadata=var("LAKEHOUSE_WATERMARK_DELAY_SECONDS", NON_NEGATIVE_INT))
    policy: str = field(default="fixed", metadata=var("LAKEHOUSE_WATERMARK_POLICY", choice(("fixed", "adaptive"))))
    percentile: float = field(default=0.99, metadata=var("LAKEHOUSE_WATERMARK_PERCENTILE", RATE))
    horizon_seconds: int = field(default=3600, metadata=var("LAKEHOUSE_WATERMARK_HORIZON_SECONDS", POSITIVE_INT))
    min_delay_seconds: int = field(default=10, metadata=var("LAKEHOUSE_WATERMARK_MIN_DELAY_SECONDS", NON_NEGATIVE_INT))
    max_delay_seconds: int = field(default=900, metadata=var("LAKEHOUSE_WATERMARK_MAX_DELAY_SECONDS", NON_NEGATIVE_INT))
    idle_seconds: int = field(default=0, metadata=var("LAKEHOUSE_WATERMARK_IDLE_SECONDS", NON_NEGATIVE_INT))
    idle_max_advance_seconds: int = field(
        default=3600, metadata=var("LAKEHOUSE_WATERMARK_IDLE_MAX_ADVANCE_SECONDS", NON_NEGATIVE_INT)
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.min_delay_seconds > self.max_delay_seconds:
            raise SettingsError(
                f"LAKEHOUSE_WATERMARK_MIN_DELAY_SECONDS ({self.min_delay_seconds}) must not exceed "
                f"LAKEHOUSE_WATERMARK_MAX_DELAY_SECONDS ({self.max_delay_seconds})"
            )

    @property
    def delay(self) -> timedelta:
        """The fixed delay (``delay_seconds``)."""
        return timedelta(seconds=self.delay_seconds)


@dataclass(frozen=True)
class StreamSettings(Group):
    """Where the streams read and at what cadence."""

    #: Where ``run`` reads bronze's lines by default: ``landing`` or ``kafka``.
    source: str = field(default="landing", metadata=var("LAKEHOUSE_SOURCE", choice(("landing", "kafka"))))
    trigger_interval_seconds: int = field(default=2, metadata=var("LAKEHOUSE_TRIGGER_INTERVAL_SECONDS", POSITIVE_INT))
    max_files_per_trigger: int = field(default=50, metadata=var("LAKEHOUSE_MAX_FILES_PER_TRIGGER", POSITIVE_INT))
    #: A received line longer than this many bytes is kept in bronze and quarantined (``line_too_long``)
    #: without being parsed: what one line may cost the parser is bounded.
    max_line_bytes: int = field(default=1_048_576, metadata=var("LAKEHOUSE_MAX_LINE_BYTES", POSITIVE_INT))
    #: Stream progress rows are appended to ops.stream_progress at most this often (and when a run ends).
    progress_flush_seconds: int = field(default=10, metadata=var("LAKEHOUSE_PROGRESS_FLUSH_SECONDS", POSITIVE_INT))
    #: A continuous run's followers (fraud alerts, the join, derived windows, distinct URLs) run in a thread of
    #: their own at this added CPU niceness, with the JVM threads that do their work (``nice``; 0: the same
    #: priority as the critical path's).
    followers_niceness: int = field(default=19, metadata=var("LAKEHOUSE_FOLLOWERS_NICENESS", NICENESS))
    #: A continuous run that starts with nothing waiting first carries a few generated lines through a scratch
    #: home (``runtime.warmup``), then, until a line arrives, a busy run's volume of them (40,000) and its
    #: followers over all of them there, so its first real micro-batches find Spark's plans compiled and its row
    #: loops hot instead of paying a cold JVM's (two to three times warm).
    warmup: bool = field(default=True, metadata=var("LAKEHOUSE_STREAM_WARMUP", BOOLEAN))


@dataclass(frozen=True)
class SparkSettings(Group):
    """The Spark session and its driver JVM; on a standalone cluster (``master`` ``spark://…``) also what
    each application asks of it."""

    shuffle_partitions: int = field(default=4, metadata=var("LAKEHOUSE_SHUFFLE_PARTITIONS", POSITIVE_INT))
    driver_memory: str = field(default="4g", metadata=var("LAKEHOUSE_DRIVER_MEMORY", MEMORY))
    ui: bool = field(default=False, metadata=var("LAKEHOUSE_SPARK_UI", BOOLEAN))
    jars_dir: Path = field(default=DEFAULT_JARS_DIR, metadata=var("LAKEHOUSE_JARS_DIR", PATH))
    #: The driver JVM starts from this class-data archive when it exists (None: never).
    class_archive: Path | None = field(
        default=DEFAULT_CLASS_ARCHIVE, metadata=var("LAKEHOUSE_JVM_CLASS_ARCHIVE", OPTIONAL_PATH)
    )
    #: Extra options for the driver JVM, e.g. ``-Xss4m``.
    jvm_options: str = field(default="", metadata=var("LAKEHOUSE_JVM_OPTIONS", TEXT))
    #: Spark's own log lines go to ``home/logs/spark.log``; verbose keeps them on the terminal too.
    verbose: bool = field(default=False, metadata=var("LAKEHOUSE_VERBOSE", BOOLEAN))
    master: str = field(default="local[*]", metadata=var("LAKEHOUSE_SPARK_MASTER", SPARK_MASTER))
    #: Where the driver listens and executors reach it: loopback unless the cluster spans hosts.
    driver_host: str = field(default="127.0.0.1", metadata=var("LAKEHOUSE_SPARK_DRIVER_HOST", HOST))
    #: On a cluster, the cores one application takes at most, so a continuous run, a reconcile and a Dagster
    #: run find cores beside each other (Spark's default is every core).
    cores_max: int = field(default=2, metadata=var("LAKEHOUSE_SPARK_CORES_MAX", POSITIVE_INT))
    executor_memory: str = field(default="1g", metadata=var("LAKEHOUSE_EXECUTOR_MEMORY", MEMORY))
    #: Extra options for each executor's JVM on a cluster, e.g. ``-XX:+UseParallelGC``.
    executor_jvm_options: str = field(default="", metadata=var("LAKEHOUSE_EXECUTOR_JVM_OPTIONS", TEXT))
    #: The state partitions of a stream that keeps Spark state (fraud alerts, distinct URLs, the join), fixed
    #: when its checkpoint is made (a checkpoint keeps its count). Each run loads and commits every
    #: partition's stores, a fixed cost per partition; raise it on a cluster whose cores the state's rows
    #: would keep busy.
    state_partitions: int = field(default=1, metadata=var("LAKEHOUSE_STATE_PARTITIONS", POSITIVE_INT))


@dataclass(frozen=True)
class ScheduleSettings(Group):
    """The Dagster schedules: reconciliation, and maintenance (OPTIMIZE small files, VACUUM files unreferenced
    for ``vacuum_retention_hours``); the daily sweep's partitions start at ``sweep_start_date``. Gold's
    freshness policy in Dagster fails an asset not materialized for ``gold_freshness_seconds``."""

    reconcile_cron: str = field(default="*/15 * * * *", metadata=var("LAKEHOUSE_RECONCILE_CRON", CRON))
    maintenance_cron: str = field(default="7 * * * *", metadata=var("LAKEHOUSE_MAINTENANCE_CRON", CRON))
    sweep_start_date: date = field(default=date(2024, 1, 1), metadata=var("LAKEHOUSE_SWEEP_START_DATE", DATE))
    vacuum_retention_hours: int = field(default=168, metadata=var("LAKEHOUSE_VACUUM_RETENTION_HOURS", NON_NEGATIVE_INT))
    gold_freshness_seconds: int = field(default=300, metadata=var("LAKEHOUSE_GOLD_FRESHNESS_SECONDS", POSITIVE_INT))


@dataclass(frozen=True)
class KafkaSettings(Group):
    """Where the Kafka source reads and the local broker listens (``LAKEHOUSE_KAFKA_*``).

    ``options`` are client settings for an external cluster (SASL, TLS, …) taken only from the
    environment; they may hold secrets, so nothing prints them (``redacted``).
    """

    bootstrap_servers: str = field(default="127.0.0.1:9092", metadata=var("LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS", SERVERS))
    topic: str = field(default="events", metadata=var("LAKEHOUSE_KAFKA_TOPIC", TOPIC))
    partitions: int = field(default=3, metadata=var("LAKEHOUSE_KAFKA_PARTITIONS", POSITIVE_INT))
    starting_offsets: str = field(default="earliest", metadata=var("LAKEHOUSE_KAFKA_STARTING_OFFSETS", OFFSETS))
    max_offsets_per_trigger: int = field(
        default=200_000, metadata=var("LAKEHOUSE_KAFKA_MAX_OFFSETS_PER_TRIGGER", POSITIVE_INT)
    )
    broker_timeout_seconds: int = field(
        default=60, metadata=var("LAKEHOUSE_KAFKA_BROKER_TIMEOUT_SECONDS", POSITIVE_INT)
    )
    broker_jars_dir: Path = field(
        default=DEFAULT_KAFKA_BROKER_JARS_DIR, metadata=var("LAKEHOUSE_KAFKA_BROKER_JARS_DIR", PATH)
    )
    options: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Self:
        options = tuple(
            sorted(
                (name[len(KAFKA_OPTION_PREFIX) :].lower().replace("_", "."), value)
                for name, value in env.items()
                if name.startswith(KAFKA_OPTION_PREFIX) and len(name) > len(KAFKA_OPTION_PREFIX)
            )
        )
        return cls(**cls._read_fields(env), options=options)

    @property
    def redacted(self) -> dict[str, str]:
        """The client options with their values hidden: what logs and metadata may show."""
        return {name: "***" for name, _ in self.options}

    @property
    def broker_address(self) -> tuple[str, int]:
        """(host, port) of the first bootstrap server: where ``lakehouse kafka up`` listens."""
        host, _, port = self.bootstrap_servers.split(",")[0].rpartition(":")
        return host.strip("[]"), int(port)


@dataclass(frozen=True)
class QualitySettings(Group):
    """Thresholds of the data-quality suites (``LAKEHOUSE_DQ_*``).

    The amount bounds, the future tolerance and the event types are rules of ``silver.events`` (blocking);
    freshness, late rate and quarantine rate only warn unless ``warnings_block`` is set.
    """

    amount_min: Decimal = field(default=Decimal("-1000000.00"), metadata=var("LAKEHOUSE_DQ_AMOUNT_MIN", DECIMAL))
    amount_max: Decimal = field(default=Decimal("1000000.00"), metadata=var("LAKEHOUSE_DQ_AMOUNT_MAX", DECIMAL))
    future_tolerance_seconds: int = field(
        default=300, metadata=var("LAKEHOUSE_DQ_FUTURE_TOLERANCE_SECONDS", NON_NEGATIVE_INT)
    )
    event_types: tuple[str, ...] = field(default=(), metadata=var("LAKEHOUSE_DQ_EVENT_TYPES", NAMES))
    freshness_seconds: int = field(default=900, metadata=var("LAKEHOUSE_DQ_FRESHNESS_SECONDS", POSITIVE_INT))
    max_late_rate: float = field(default=0.05, metadata=var("LAKEHOUSE_DQ_MAX_LATE_RATE", RATE))
    max_quarantine_rate: float = field(default=0.05, metadata=var("LAKEHOUSE_DQ_MAX_QUARANTINE_RATE", RATE))
    warnings_block: bool = field(default=False, metadata=var("LAKEHOUSE_DQ_WARNINGS_BLOCK", BOOLEAN))
    cron: str = field(default="0 * * * *", metadata=var("LAKEHOUSE_DQ_CRON", CRON))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.amount_min > self.amount_max:
            raise SettingsError(
                f"LAKEHOUSE_DQ_AMOUNT_MIN ({self.amount_min}) must not exceed LAKEHOUSE_DQ_AMOUNT_MAX "
                f"({self.amount_max})"
            )


@dataclass(frozen=True)
class Settings(Group):
    """The lakehouse's configuration: its home, the gold outputs kept, and the groups.

    Its own ``__post_init__`` (the fields' checks) is all it needs: no rule spans two groups.
    """

    home: Path = field(default=DEFAULT_HOME, metadata=var("LAKEHOUSE_HOME", PATH))
    #: A folder of pipeline specs (``*.yaml``) declared beside the project's ``pipelines/``.
    pipelines_dir: Path | None = field(default=None, metadata=var("LAKEHOUSE_PIPELINES_DIR", OPTIONAL_PATH))
    #: Which declared pipelines the home runs (``all``, or a comma-separated list of their names).
    pipeline_names: tuple[str, ...] = field(default=(), metadata=var("LAKEHOUSE_PIPELINES", PIPELINE_NAMES))
    #: Which of :data:`GOLD_OUTPUTS` the streams keep (``all``, ``none`` or a comma-separated list).
    gold_outputs: frozenset[str] = field(
        default=frozenset(GOLD_OUTPUTS), metadata=var("LAKEHOUSE_GOLD_OUTPUTS", GOLD_OUTPUT_NAMES)
    )
    #: ``gold.fraud_alerts``' rule that needs no state: a purchase of at least this amount is an alert in the
    #: micro-batch that carries it to silver, without waiting for the stateful rules' stream.
    fraud_amount_limit: Decimal = field(
        default=Decimal("10000.00"), metadata=var("LAKEHOUSE_FRAUD_AMOUNT_LIMIT", DECIMAL)
    )
    windows: WindowSettings = field(default_factory=WindowSettings)
    watermarks: WatermarkSettings = field(default_factory=WatermarkSettings)
    streams: StreamSettings = field(default_factory=StreamSettings)
    spark: SparkSettings = field(default_factory=SparkSettings)
    cluster: ClusterSettings = field(default_factory=ClusterSettings)
    dagster: DagsterSettings = field(default_factory=DagsterSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    #: Tables read from another lakehouse's place instead of this one's: ``(table name, location)`` pairs. A
    #: replay's staging streams read the live bronze this way (not a setting: made by ``under``'s callers).
    links: tuple[tuple[str, Any], ...] = field(default=(), repr=False)
    schedules: ScheduleSettings = field(default_factory=ScheduleSettings)
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    quality: QualitySettings = field(default_factory=QualitySettings)
    #: The declared pipeline these settings are for (None: the first, ``purchases``); see :meth:`for_pipeline`.
    pipeline: PipelineSpec | None = field(default=None, repr=False)
    #: The whole lakehouse's settings when these are one pipeline's view of it (None: these are).
    root_settings: "Settings | None" = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Self:
        """Read and check every ``LAKEHOUSE_*`` variable (``os.environ`` by default); unset ones keep their
        defaults, or what the first pipeline's spec declares (its windows, watermark and quality)."""
        env = os.environ if env is None else env
        own = cls._read_fields(env)
        specs = declared_pipelines(own["pipelines_dir"])
        unknown = [name for name in own["pipeline_names"] if name not in specs]
        if unknown:
            raise SettingsError(
                f"LAKEHOUSE_PIPELINES names no declared pipeline {unknown[0]!r} (declared: {', '.join(specs)})"
            )
        first = specs[FIRST_PIPELINE]
        if "LAKEHOUSE_GOLD_OUTPUTS" not in env:
            own["gold_outputs"] = declared_outputs(first)
        return cls(
            **own,
            windows=WindowSettings.from_env(env, window_fields(first)),
            watermarks=WatermarkSettings.from_env_declared(env, watermark_fields(first)),
            streams=StreamSettings.from_env(env),
            spark=SparkSettings.from_env(env),
            cluster=ClusterSettings.from_env(env),
            dagster=DagsterSettings.from_env(env),
            storage=StorageSettings.from_env(env),
            schedules=ScheduleSettings.from_env(env),
            kafka=KafkaSettings.from_env(env),
            quality=QualitySettings.from_env_declared(env, quality_fields(first)),
        )

    @property
    def spec(self) -> PipelineSpec:
        """The declared pipeline these settings are for."""
        return self.pipeline if self.pipeline is not None else declared_pipelines(self.pipelines_dir)[FIRST_PIPELINE]

    def declared(self) -> dict[str, PipelineSpec]:
        """Every declared pipeline by name, the first one first."""
        return declared_pipelines(self.pipelines_dir)

    def pipelines(self, names: tuple[str, ...] | list[str] = ()) -> list[Self]:
        """Each pipeline's view (:meth:`for_pipeline`): those named, else those ``LAKEHOUSE_PIPELINES``
        selects (every declared one by default). An unknown name stops with one line naming the choices."""
        root = self.root()
        specs = root.declared()
        for name in names:
            if name not in specs:
                raise SettingsError(f"--pipeline must be one of {', '.join(specs)}, got {name!r}")
        chosen = names or root.pipeline_names or tuple(specs)
        return [root.for_pipeline(spec) for name, spec in specs.items() if name in chosen]

    def root(self) -> Self:
        """The settings of the whole lakehouse (which are also the first pipeline's)."""
        return self if self.root_settings is None else self.root_settings

    def for_pipeline(self, spec: PipelineSpec | str) -> Self:
        """These settings for one declared pipeline: the first keeps the home as it is (its tables, landing
        folder and checkpoints where they always were); any other lives in ``pipelines/<name>/`` of the home
        (on object storage, of the storage URI), with its own tables, checkpoints, locks and landing folder,
        and its spec's windows, watermark, quality thresholds, source and outputs."""
        if isinstance(spec, str):
            specs = self.declared()
            if spec not in specs:
                raise SettingsError(f"--pipeline must be one of {', '.join(specs)}, got {spec!r}")
            spec = specs[spec]
        if self.root_settings is not None:
            return self.root_settings.for_pipeline(spec)
        if spec.is_first:
            return self
        view = self.under("pipelines", spec.name)
        links: tuple[tuple[str, Any], ...] = ()
        if spec.source.landing is not None:
            links = (("landing", self.data_root() / landing_folder(spec)),)
        return replace(
            view,
            pipeline=spec,
            root_settings=self,
            links=links,
            gold_outputs=declared_outputs(spec),
            windows=WindowSettings(**window_fields(spec)),
            watermarks=replace(self.watermarks, **watermark_fields(spec)),
            quality=replace(self.quality, **quality_fields(spec), event_types=()),
            kafka=replace(self.kafka, topic=spec.source.topic or spec.name),
            streams=replace(self.streams, source=spec.source.default),
        )

    def under(self, *parts: str) -> Self:
        """The same settings for a lakehouse nested in this one (a replay's staging): its home under this
        home, and its data under this data root (on object storage, under the storage URI)."""
        storage = self.storage
        if storage.on_object_storage:
            storage = replace(storage, uri="/".join([storage.uri, *parts]))
        return replace(self, home=self.home.joinpath(*parts), storage=storage, links=())

    def linked(self, table_name: str) -> Any:
        """Where ``table_name`` is read from when it is linked (``links``), else None."""
        return dict(self.links).get(table_name)

    def keeps(self, output: str) -> bool:
        """Whether the streams keep this gold output (one of :data:`GOLD_OUTPUTS`)."""
        if output not in GOLD_OUTPUTS:
            raise KeyError(f"{output!r} is not one of {', '.join(GOLD_OUTPUTS)}")
        return output in self.gold_outputs

    @property
    def landing_dir(self) -> Any:
        """The landing zone: a ``Path`` in the home, or a ``UPath`` on object storage (``warehouse.storage``);
        a replay's staging links the live one (``links``) to re-read it."""
        return self.linked("landing") or self.data_root() / "landing"

    @property
    def tables_dir(self) -> Any:
        """The Delta tables' root, in the home or on object storage."""
        return self.data_root() / "tables"

    @property
    def checkpoints_dir(self) -> Any:
        """The streams' checkpoints, in the home or on object storage."""
        return self.data_root() / "checkpoints"

    def data_root(self) -> Any:
        """The folder of ``tables/``, ``checkpoints/`` and ``landing/``: the home (a ``Path``), or the storage
        URI (a ``UPath``); ``warehouse.storage`` works on either."""
        return self.storage.location() if self.storage.on_object_storage else self.home

    @property
    def lakehouse_home(self) -> Path:
        """The whole lakehouse's home (a pipeline's view keeps its own data in ``pipelines/<name>/`` of it)."""
        return self.root().home

    @property
    def reports_dir(self) -> Path:
        return self.lakehouse_home / "reports"

    @property
    def dagster_home(self) -> Path:
        return self.lakehouse_home / "dagster"

    @property
    def logs_dir(self) -> Path:
        return self.lakehouse_home / "logs"

    @property
    def cluster_dir(self) -> Path:
        """The local standalone cluster's pids, logs and workers' scratch (``lakehouse cluster``)."""
        return self.lakehouse_home / "cluster"

    @property
    def postgres_dir(self) -> Path:
        """The local PostgreSQL's data and log (``lakehouse postgres``)."""
        return self.dagster.pg_dir or self.lakehouse_home / "postgres"

    @property
    def kafka_dir(self) -> Path:
        """The local broker's config, data (its log segments) and logs."""
        return self.lakehouse_home / "kafka"

    def ensure_home(self) -> None:
        """Create the home's folders (and, on object storage, check the storage answers and takes a write),
        failing with one line naming the setting."""
        local = [self.reports_dir]
        if not self.storage.on_object_storage:
            local += [self.landing_dir, self.tables_dir, self.checkpoints_dir]
        try:
            for folder in local:
                folder.mkdir(parents=True, exist_ok=True)
            probe = self.home / ".write-probe"
            probe.write_text("ok")
            probe.unlink()
        except OSError as error:
            reason = error.strerror or str(error)
            raise SettingsError(f"LAKEHOUSE_HOME={self.home} is not usable: {reason}") from None
        if self.storage.on_object_storage:
            probe = self.data_root() / ".write-probe"
            try:
                probe.write_text("ok")
                probe.unlink()
            except Exception as error:  # botocore's and s3fs's errors share no base class but Exception
                reason = " ".join(str(error).split())[:300] or type(error).__name__
                raise SettingsError(f"LAKEHOUSE_STORAGE_URI={self.storage.uri} is not usable: {reason}") from None
