"""Settings: where the lakehouse lives and the event-time parameters every stream shares.

Everything is read from the environment (``LAKEHOUSE_*``) and validated once; a bad value stops with
one readable line naming the variable (:class:`SettingsError`).
"""

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, timedelta
from decimal import Decimal, InvalidOperation
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_HOME = REPO_ROOT / ".lakehouse"
DEFAULT_JARS_DIR = REPO_ROOT / ".cache" / "jars"
DEFAULT_KAFKA_BROKER_JARS_DIR = REPO_ROOT / ".cache" / "kafka-broker"
#: The driver JVM's class-data archive, built by the set-up (scripts/class_archive.py).
DEFAULT_CLASS_ARCHIVE = REPO_ROOT / ".cache" / "jvm" / "spark-classes.jsa"


class SettingsError(ValueError):
    """A setting is missing or invalid; the message is one line naming the setting."""


@dataclass(frozen=True)
class QualitySettings:
    """Thresholds of the data-quality suites (``LAKEHOUSE_DQ_*``).

    The amount bounds, the future tolerance and the event types are rules of ``silver.events`` (blocking);
    freshness, late rate and quarantine rate only warn unless ``warnings_block`` is set.
    """

    amount_min: Decimal = Decimal("-1000000.00")
    amount_max: Decimal = Decimal("1000000.00")
    future_tolerance_seconds: int = 300
    event_types: tuple[str, ...] = ()
    freshness_seconds: int = 900
    max_late_rate: float = 0.05
    max_quarantine_rate: float = 0.05
    warnings_block: bool = False
    cron: str = "0 * * * *"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "QualitySettings":
        quality = cls(
            amount_min=_decimal(env, "LAKEHOUSE_DQ_AMOUNT_MIN", cls.amount_min),
            amount_max=_decimal(env, "LAKEHOUSE_DQ_AMOUNT_MAX", cls.amount_max),
            future_tolerance_seconds=_non_negative_int(
                env, "LAKEHOUSE_DQ_FUTURE_TOLERANCE_SECONDS", cls.future_tolerance_seconds
            ),
            event_types=_names(env, "LAKEHOUSE_DQ_EVENT_TYPES"),
            freshness_seconds=_positive_int(env, "LAKEHOUSE_DQ_FRESHNESS_SECONDS", cls.freshness_seconds),
            max_late_rate=_rate(env, "LAKEHOUSE_DQ_MAX_LATE_RATE", cls.max_late_rate),
            max_quarantine_rate=_rate(env, "LAKEHOUSE_DQ_MAX_QUARANTINE_RATE", cls.max_quarantine_rate),
            warnings_block=_boolean(env, "LAKEHOUSE_DQ_WARNINGS_BLOCK", cls.warnings_block),
            cron=_cron(env, "LAKEHOUSE_DQ_CRON", cls.cron),
        )
        if quality.amount_min > quality.amount_max:
            raise SettingsError(
                f"LAKEHOUSE_DQ_AMOUNT_MIN ({quality.amount_min}) must not exceed LAKEHOUSE_DQ_AMOUNT_MAX "
                f"({quality.amount_max})"
            )
        return quality


@dataclass(frozen=True)
class WatermarkSettings:
    """How the windowing stream's watermark moves (``LAKEHOUSE_WATERMARK_*``); the fixed delay itself is
    ``Settings.watermark_delay_seconds``.

    - ``policy="fixed"``: watermark = max event time seen - the fixed delay.
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

    policy: str = "fixed"
    percentile: float = 0.99
    horizon_seconds: int = 3600
    min_delay_seconds: int = 10
    max_delay_seconds: int = 900
    idle_seconds: int = 0
    idle_max_advance_seconds: int = 3600

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "WatermarkSettings":
        marks = cls(
            policy=_choice(env, "LAKEHOUSE_WATERMARK_POLICY", cls.policy, ("fixed", "adaptive")),
            percentile=_rate(env, "LAKEHOUSE_WATERMARK_PERCENTILE", cls.percentile),
            horizon_seconds=_positive_int(env, "LAKEHOUSE_WATERMARK_HORIZON_SECONDS", cls.horizon_seconds),
            min_delay_seconds=_non_negative_int(env, "LAKEHOUSE_WATERMARK_MIN_DELAY_SECONDS", cls.min_delay_seconds),
            max_delay_seconds=_non_negative_int(env, "LAKEHOUSE_WATERMARK_MAX_DELAY_SECONDS", cls.max_delay_seconds),
            idle_seconds=_non_negative_int(env, "LAKEHOUSE_WATERMARK_IDLE_SECONDS", cls.idle_seconds),
            idle_max_advance_seconds=_non_negative_int(
                env, "LAKEHOUSE_WATERMARK_IDLE_MAX_ADVANCE_SECONDS", cls.idle_max_advance_seconds
            ),
        )
        if marks.min_delay_seconds > marks.max_delay_seconds:
            raise SettingsError(
                f"LAKEHOUSE_WATERMARK_MIN_DELAY_SECONDS ({marks.min_delay_seconds}) must not exceed "
                f"LAKEHOUSE_WATERMARK_MAX_DELAY_SECONDS ({marks.max_delay_seconds})"
            )
        return marks


#: ``LAKEHOUSE_KAFKA_OPTION_<NAME>`` passes ``kafka.<name>`` (lower case, ``_`` → ``.``) to every Kafka client.
KAFKA_OPTION_PREFIX = "LAKEHOUSE_KAFKA_OPTION_"


@dataclass(frozen=True)
class KafkaSettings:
    """Where the Kafka source reads and the local broker listens (``LAKEHOUSE_KAFKA_*``).

    ``options`` are client settings for an external cluster (SASL, TLS, …) taken only from the
    environment; they may hold secrets, so nothing prints them (``redacted``).
    """

    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = "events"
    partitions: int = 3
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int = 200_000
    broker_timeout_seconds: int = 60
    broker_jars_dir: Path = DEFAULT_KAFKA_BROKER_JARS_DIR
    options: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "KafkaSettings":
        bootstrap = (env.get("LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS") or cls.bootstrap_servers).strip()
        if not all(re.fullmatch(r"[A-Za-z0-9_.\-\[\]:]+:\d{1,5}", server) for server in bootstrap.split(",")):
            raise SettingsError(f"LAKEHOUSE_KAFKA_BOOTSTRAP_SERVERS must be host:port[,host:port…], got {bootstrap!r}")
        topic = (env.get("LAKEHOUSE_KAFKA_TOPIC") or cls.topic).strip()
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,249}", topic):
            raise SettingsError(f"LAKEHOUSE_KAFKA_TOPIC must be a Kafka topic name such as 'events', got {topic!r}")
        starting = (env.get("LAKEHOUSE_KAFKA_STARTING_OFFSETS") or cls.starting_offsets).strip()
        if starting not in {"earliest", "latest"} and not starting.startswith("{"):
            raise SettingsError(
                f"LAKEHOUSE_KAFKA_STARTING_OFFSETS must be earliest, latest or Spark's JSON offsets, got {starting!r}"
            )
        options = tuple(
            sorted(
                (name[len(KAFKA_OPTION_PREFIX) :].lower().replace("_", "."), value)
                for name, value in env.items()
                if name.startswith(KAFKA_OPTION_PREFIX) and len(name) > len(KAFKA_OPTION_PREFIX)
            )
        )
        return cls(
            bootstrap_servers=bootstrap,
            topic=topic,
            partitions=_positive_int(env, "LAKEHOUSE_KAFKA_PARTITIONS", cls.partitions),
            starting_offsets=starting,
            max_offsets_per_trigger=_positive_int(
                env, "LAKEHOUSE_KAFKA_MAX_OFFSETS_PER_TRIGGER", cls.max_offsets_per_trigger
            ),
            broker_timeout_seconds=_positive_int(
                env, "LAKEHOUSE_KAFKA_BROKER_TIMEOUT_SECONDS", cls.broker_timeout_seconds
            ),
            broker_jars_dir=Path(env.get("LAKEHOUSE_KAFKA_BROKER_JARS_DIR") or DEFAULT_KAFKA_BROKER_JARS_DIR)
            .expanduser()
            .resolve(),
            options=options,
        )

    @property
    def redacted(self) -> dict[str, str]:
        """The client options with their values hidden: what logs and metadata may show."""
        return {name: "***" for name, _ in self.options}

    @property
    def broker_address(self) -> tuple[str, int]:
        """(host, port) of the first bootstrap server: where ``lakehouse kafka up`` listens."""
        host, _, port = self.bootstrap_servers.split(",")[0].rpartition(":")
        return host.strip("[]"), int(port)


FIRING_TRIGGERS = ("early", "watermark")
ACCUMULATION_MODES = ("accumulating", "discarding", "retracting")
#: The gold outputs beyond ``user_spend_5m`` (and its corrections and late events), each a table kept by the
#: streams: hopping windows, sessions, global windows, the firings log, orders ⋈ payments, fraud alerts and
#: unique URLs. ``LAKEHOUSE_GOLD_OUTPUTS`` picks some; a table left out is not written, not rebuilt by a
#: replay, and not an asset, so none of its cost is paid.
GOLD_OUTPUTS = ("hopping", "sessions", "global", "firings", "order_payments", "fraud_alerts", "unique_urls")


@dataclass(frozen=True)
class Settings:
    """The lakehouse's configuration.

    Time semantics (the seeds' canonical pipeline): gold windows are tumbling ``window`` long and aligned
    to the UTC epoch; the watermark is the maximum event time seen minus ``watermark_delay``; a window is
    closed (final) once the watermark has passed ``window_end + allowed_lateness``.
    """

    home: Path = DEFAULT_HOME
    window_minutes: int = 5
    #: Hopping windows (``gold.user_spend_<size>_hopping``): ``hopping_size_minutes`` long, a new one
    #: every ``hopping_slide_minutes``; sums of whole tumbling windows, so the slide is a multiple of them.
    hopping_size_minutes: int = 60
    hopping_slide_minutes: int = 5
    #: Session windows (``gold.user_sessions``): events at most this far apart form one session.
    session_gap_minutes: int = 30
    #: Global windows (``gold.user_spend_global``): per user, one window over all of time whose count
    #: trigger fires every ``global_trigger_count`` events.
    global_trigger_count: int = 100
    #: What ``gold.user_spend_<n>m_firings`` emits: ``early`` (every micro-batch that changes a window, partial
    #: results marked non-final, at the streams' trigger cadence) or ``watermark`` (one on-time result when the
    #: watermark closes the window, then late firings); each firing as ``accumulating`` (the window's value),
    #: ``discarding`` (only the change since the previous firing) or ``retracting`` (the previous value
    #: retracted, then the new one).
    firing_trigger: str = "early"
    accumulation: str = "accumulating"
    #: Which of :data:`GOLD_OUTPUTS` the streams keep (``LAKEHOUSE_GOLD_OUTPUTS``: ``all``, ``none`` or a
    #: comma-separated list).
    gold_outputs: frozenset[str] = frozenset(GOLD_OUTPUTS)
    watermark_delay_seconds: int = 120
    allowed_lateness_seconds: int = 60
    trigger_interval_seconds: int = 2
    max_files_per_trigger: int = 50
    #: A received line longer than this many bytes is kept in bronze and quarantined (``line_too_long``)
    #: without being parsed: what one line may cost the parser is bounded.
    max_line_bytes: int = 1_048_576
    shuffle_partitions: int = 4
    driver_memory: str = "4g"
    spark_ui: bool = False
    jars_dir: Path = DEFAULT_JARS_DIR
    #: The driver JVM starts from this class-data archive when it exists (None: never).
    class_archive: Path | None = DEFAULT_CLASS_ARCHIVE
    #: Extra options for the driver JVM (``LAKEHOUSE_JVM_OPTIONS``), e.g. ``-Xss4m``.
    jvm_options: str = ""
    reconcile_cron: str = "*/15 * * * *"
    #: Stream progress rows are appended to ops.stream_progress at most this often (and when a run ends).
    progress_flush_seconds: int = 10
    #: Spark's own log lines go to ``home/logs/spark.log``; verbose keeps them on the terminal too.
    verbose: bool = False
    #: Maintenance: OPTIMIZE small files, VACUUM files unreferenced for this long, on this schedule.
    vacuum_retention_hours: int = 168
    maintenance_cron: str = "7 * * * *"
    sweep_start_date: date = date(2024, 1, 1)
    quality: QualitySettings = field(default_factory=QualitySettings)
    #: Where ``run`` reads bronze's lines by default: ``landing`` or ``kafka``.
    source: str = "landing"
    kafka: KafkaSettings = field(default_factory=KafkaSettings)
    watermarks: WatermarkSettings = field(default_factory=WatermarkSettings)

    def keeps(self, output: str) -> bool:
        """Whether the streams keep this gold output (one of :data:`GOLD_OUTPUTS`)."""
        if output not in GOLD_OUTPUTS:
            raise KeyError(f"{output!r} is not one of {', '.join(GOLD_OUTPUTS)}")
        return output in self.gold_outputs

    @property
    def window(self) -> timedelta:
        return timedelta(minutes=self.window_minutes)

    @property
    def watermark_delay(self) -> timedelta:
        return timedelta(seconds=self.watermark_delay_seconds)

    @property
    def allowed_lateness(self) -> timedelta:
        return timedelta(seconds=self.allowed_lateness_seconds)

    @property
    def landing_dir(self) -> Path:
        return self.home / "landing"

    @property
    def tables_dir(self) -> Path:
        return self.home / "tables"

    @property
    def checkpoints_dir(self) -> Path:
        return self.home / "checkpoints"

    @property
    def reports_dir(self) -> Path:
        return self.home / "reports"

    @property
    def dagster_home(self) -> Path:
        return self.home / "dagster"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "Settings":
        """Read and validate every ``LAKEHOUSE_*`` variable; unset ones keep their defaults."""
        env = os.environ if env is None else env
        home = Path(env.get("LAKEHOUSE_HOME") or DEFAULT_HOME).expanduser().resolve()
        window = _positive_int(env, "LAKEHOUSE_WINDOW_MINUTES", cls.window_minutes)
        # Unset, the hopping windows follow a longer tumbling window: slide = it, size = the hour rounded up.
        slide = cls.hopping_slide_minutes if cls.hopping_slide_minutes % window == 0 else window
        size = -(-cls.hopping_size_minutes // slide) * slide
        settings = cls(
            home=home,
            window_minutes=_positive_int(env, "LAKEHOUSE_WINDOW_MINUTES", cls.window_minutes),
            hopping_size_minutes=_positive_int(env, "LAKEHOUSE_HOPPING_SIZE_MINUTES", size),
            hopping_slide_minutes=_positive_int(env, "LAKEHOUSE_HOPPING_SLIDE_MINUTES", slide),
            session_gap_minutes=_positive_int(env, "LAKEHOUSE_SESSION_GAP_MINUTES", cls.session_gap_minutes),
            global_trigger_count=_positive_int(env, "LAKEHOUSE_GLOBAL_TRIGGER_COUNT", cls.global_trigger_count),
            firing_trigger=_choice(env, "LAKEHOUSE_FIRING_TRIGGER", cls.firing_trigger, FIRING_TRIGGERS),
            accumulation=_choice(env, "LAKEHOUSE_ACCUMULATION", cls.accumulation, ACCUMULATION_MODES),
            gold_outputs=_gold_outputs(env, "LAKEHOUSE_GOLD_OUTPUTS"),
            watermark_delay_seconds=_non_negative_int(
                env, "LAKEHOUSE_WATERMARK_DELAY_SECONDS", cls.watermark_delay_seconds
            ),
            allowed_lateness_seconds=_non_negative_int(
                env, "LAKEHOUSE_ALLOWED_LATENESS_SECONDS", cls.allowed_lateness_seconds
            ),
            trigger_interval_seconds=_positive_int(
                env, "LAKEHOUSE_TRIGGER_INTERVAL_SECONDS", cls.trigger_interval_seconds
            ),
            max_files_per_trigger=_positive_int(env, "LAKEHOUSE_MAX_FILES_PER_TRIGGER", cls.max_files_per_trigger),
            max_line_bytes=_positive_int(env, "LAKEHOUSE_MAX_LINE_BYTES", cls.max_line_bytes),
            shuffle_partitions=_positive_int(env, "LAKEHOUSE_SHUFFLE_PARTITIONS", cls.shuffle_partitions),
            driver_memory=_memory(env, "LAKEHOUSE_DRIVER_MEMORY", cls.driver_memory),
            spark_ui=_boolean(env, "LAKEHOUSE_SPARK_UI", cls.spark_ui),
            jars_dir=Path(env.get("LAKEHOUSE_JARS_DIR") or DEFAULT_JARS_DIR).expanduser().resolve(),
            class_archive=_optional_path(env, "LAKEHOUSE_JVM_CLASS_ARCHIVE", DEFAULT_CLASS_ARCHIVE),
            jvm_options=(env.get("LAKEHOUSE_JVM_OPTIONS") or "").strip(),
            reconcile_cron=_cron(env, "LAKEHOUSE_RECONCILE_CRON", cls.reconcile_cron),
            progress_flush_seconds=_positive_int(env, "LAKEHOUSE_PROGRESS_FLUSH_SECONDS", cls.progress_flush_seconds),
            verbose=_boolean(env, "LAKEHOUSE_VERBOSE", cls.verbose),
            vacuum_retention_hours=_non_negative_int(
                env, "LAKEHOUSE_VACUUM_RETENTION_HOURS", cls.vacuum_retention_hours
            ),
            maintenance_cron=_cron(env, "LAKEHOUSE_MAINTENANCE_CRON", cls.maintenance_cron),
            sweep_start_date=_date(env, "LAKEHOUSE_SWEEP_START_DATE", cls.sweep_start_date),
            quality=QualitySettings.from_env(env),
            source=_choice(env, "LAKEHOUSE_SOURCE", cls.source, ("landing", "kafka")),
            kafka=KafkaSettings.from_env(env),
            watermarks=WatermarkSettings.from_env(env),
        )
        if (24 * 60) % settings.window_minutes:
            raise SettingsError(
                f"LAKEHOUSE_WINDOW_MINUTES must divide a day (1440 minutes) so windows align to UTC days, "
                f"got {settings.window_minutes}"
            )
        if settings.hopping_slide_minutes % settings.window_minutes:
            raise SettingsError(
                f"LAKEHOUSE_HOPPING_SLIDE_MINUTES must be a multiple of LAKEHOUSE_WINDOW_MINUTES "
                f"({settings.window_minutes}): hopping windows are sums of tumbling ones, got "
                f"{settings.hopping_slide_minutes}"
            )
        if settings.hopping_size_minutes % settings.hopping_slide_minutes or (24 * 60) % settings.hopping_slide_minutes:
            raise SettingsError(
                f"LAKEHOUSE_HOPPING_SIZE_MINUTES must be a multiple of LAKEHOUSE_HOPPING_SLIDE_MINUTES "
                f"({settings.hopping_slide_minutes}), which must divide a day, got {settings.hopping_size_minutes}"
            )
        return settings

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def kafka_dir(self) -> Path:
        """The local broker's config, data (its log segments) and logs."""
        return self.home / "kafka"

    def ensure_home(self) -> None:
        """Create the home's folders, failing with one line when the home is not writable."""
        try:
            for folder in (self.landing_dir, self.tables_dir, self.checkpoints_dir, self.reports_dir):
                folder.mkdir(parents=True, exist_ok=True)
            probe = self.home / ".write-probe"
            probe.write_text("ok")
            probe.unlink()
        except OSError as error:
            reason = error.strerror or str(error)
            raise SettingsError(f"LAKEHOUSE_HOME={self.home} is not usable: {reason}") from None


def _choice(env: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]) -> str:
    raw = (env.get(name) or default).strip()
    if raw not in choices:
        raise SettingsError(f"{name} must be one of {', '.join(choices)}, got {raw!r}")
    return raw


def _gold_outputs(env: Mapping[str, str], name: str) -> frozenset[str]:
    raw = (env.get(name) or "all").strip()
    if raw == "all":
        return frozenset(GOLD_OUTPUTS)
    if raw == "none":
        return frozenset()
    names = {part.strip() for part in raw.split(",") if part.strip()}
    unknown = sorted(names - set(GOLD_OUTPUTS))
    if unknown or not names:
        raise SettingsError(
            f"{name} must be all, none or a comma-separated list of {', '.join(GOLD_OUTPUTS)}, got {raw!r}"
        )
    return frozenset(names)


def _optional_path(env: Mapping[str, str], name: str, default: Path) -> Path | None:
    """A path setting; set to the empty string (or ``none``) it turns the feature off."""
    raw = env.get(name)
    if raw is None:
        return default
    if raw.strip().lower() in {"", "none", "off"}:
        return None
    return Path(raw.strip()).expanduser().resolve()


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    value = _int(env, name, default)
    if value <= 0:
        raise SettingsError(f"{name} must be a positive whole number, got {env.get(name)!r}")
    return value


def _non_negative_int(env: Mapping[str, str], name: str, default: int) -> int:
    value = _int(env, name, default)
    if value < 0:
        raise SettingsError(f"{name} must be zero or a positive whole number, got {env.get(name)!r}")
    return value


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return int(raw.strip())
    except ValueError:
        raise SettingsError(f"{name} must be a whole number, got {raw!r}") from None


def _boolean(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name} must be true or false, got {raw!r}")


def _memory(env: Mapping[str, str], name: str, default: str) -> str:
    raw = (env.get(name) or default).strip().lower()
    if not raw[:-1].isdigit() or raw[-1] not in "mg":
        raise SettingsError(f"{name} must look like 512m or 4g, got {raw!r}")
    return raw


def _cron(env: Mapping[str, str], name: str, default: str) -> str:
    raw = (env.get(name) or default).strip()
    fields = raw.split()
    if len(fields) != 5 or not all(re.fullmatch(r"[0-9*/,-]+", f) for f in fields):
        raise SettingsError(f"{name} must be a five-field cron expression such as '*/15 * * * *', got {raw!r}")
    return " ".join(fields)


def _date(env: Mapping[str, str], name: str, default: date) -> date:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return date.fromisoformat(raw.strip())
    except ValueError:
        raise SettingsError(f"{name} must be a date like 2024-01-01, got {raw!r}") from None


def _decimal(env: Mapping[str, str], name: str, default: Decimal) -> Decimal:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = Decimal(raw.strip())
    except InvalidOperation:
        raise SettingsError(f"{name} must be a decimal number such as 1000000.00, got {raw!r}") from None
    if not value.is_finite():
        raise SettingsError(f"{name} must be a finite decimal number, got {raw!r}")
    return value


def _rate(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw.strip())
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 1.0:
        raise SettingsError(f"{name} must be a fraction between 0 and 1 such as 0.05, got {raw!r}")
    return value


def _names(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    raw = env.get(name) or ""
    names = tuple(part.strip() for part in raw.split(",") if part.strip())
    if raw.strip() and not names:
        raise SettingsError(f"{name} must be a comma-separated list such as 'purchase,click', got {raw!r}")
    return names
