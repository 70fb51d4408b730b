"""The ``lakehouse`` command line: the same transforms the Dagster assets run, from a terminal."""

import json
import os
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import wraps
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from warehouse.settings import Settings

app = typer.Typer(
    name="lakehouse",
    help="A Kappa-style streaming lakehouse: landing → bronze → silver → gold in Delta Lake.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
errors = Console(stderr=True)


@app.callback()
def _options(
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Show Spark's own log lines on the terminal too.")
    ] = False,
) -> None:
    """A Kappa-style streaming lakehouse: landing → bronze → silver → gold in Delta Lake.

    Spark's own log lines go to LAKEHOUSE_HOME/logs/spark.log unless --verbose (or LAKEHOUSE_VERBOSE=1)."""
    if verbose:
        os.environ["LAKEHOUSE_VERBOSE"] = "1"


def _fails_in_one_line(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn any failure into one line on stderr and exit code 1 (Typer's own usage errors stay 2)."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except typer.Exit:
            raise
        except KeyboardInterrupt:
            errors.print("lakehouse: interrupted", highlight=False)
            raise typer.Exit(130) from None
        except Exception as error:  # the contract: one line, non-zero exit
            message = " ".join(str(error).split()) or type(error).__name__
            sys.stderr.write(f"lakehouse: {message[:500]}\n")
            raise typer.Exit(1) from None

    return wrapper


def _settings() -> Settings:
    settings = Settings.from_env()
    settings.ensure_home()
    return settings


@app.command()
@_fails_in_one_line
def ingest(
    files: Annotated[list[Path], typer.Argument(help="JSON Lines files to place into the landing zone.")],
) -> None:
    """Place JSON Lines files into the landing zone atomically (a reader never sees half a file)."""
    from runtime.sources.landing import ingest_file

    settings = _settings()
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"no such file: {', '.join(missing)}")
    for source in files:
        placed = ingest_file(settings, source)
        console.print(f"landed {source} → {placed.name}", highlight=False)


@app.command()
@_fails_in_one_line
def generate(
    events: Annotated[
        int, typer.Option(help="Valid events (first arrivals) to generate; --kind orders: orders.")
    ] = 5000,
    users: Annotated[int, typer.Option(help="Distinct users.")] = 50,
    skew: Annotated[float, typer.Option(help="Zipf exponent of user popularity (0 = uniform).")] = 1.1,
    rate: Annotated[
        float | None,
        typer.Option(help="Events per second of event time [default: 20; --kind orders: orders per second, 1]."),
    ] = None,
    disorder: Annotated[float, typer.Option(help="Bounded disorder: max seconds an event time moves back.")] = 30.0,
    duplicates: Annotated[float, typer.Option(help="Fraction of events redelivered (a fifth conflicting).")] = 0.05,
    late: Annotated[float, typer.Option(help="Fraction of events far behind the watermark.")] = 0.02,
    invalid: Annotated[float, typer.Option(help="Fraction of invalid lines mixed in.")] = 0.02,
    seed: Annotated[int, typer.Option(help="Random seed; the same seed gives the same lines.")] = 7,
    files: Annotated[int, typer.Option(help="Spread the lines over this many landing files.")] = 4,
    to: Annotated[str, typer.Option(help="landing (files in the landing zone) or kafka (the topic).")] = "landing",
    send_rate: Annotated[
        float, typer.Option(help="kafka: messages per second of wall-clock time (0 = as fast as it takes them).")
    ] = 0.0,
    start: Annotated[
        datetime, typer.Option(help="Event time of the first event (UTC).", formats=["%Y-%m-%dT%H:%M:%S"])
    ] = datetime(2024, 1, 1),
    kind: Annotated[
        str,
        typer.Option(
            help="events (purchases, clicks, refunds, views) or orders (orders and their payments, for "
            "gold.order_payments; --late and --invalid do not apply)."
        ),
    ] = "events",
    missing_payments: Annotated[float, typer.Option(help="--kind orders: fraction of orders never paid.")] = 0.1,
    outside_bound: Annotated[
        float,
        typer.Option(help="--kind orders: fraction of orders paid only outside [order, order + 15 min]."),
    ] = 0.05,
) -> None:
    """Write a synthetic event stream into the landing zone or a Kafka topic (deterministic for a seed)."""
    from datetime import UTC

    from devtools.synthetic import StreamSpec, generate_lines, generate_order_lines
    from runtime.sources.landing import place_in_landing

    if kind not in {"events", "orders"}:
        raise ValueError(f"--kind must be events or orders, got {kind!r}")
    settings = _settings()
    spec = StreamSpec(
        events=events,
        users=users,
        skew=skew,
        rate=rate if rate is not None else (1.0 if kind == "orders" else 20.0),
        disorder_seconds=disorder,
        duplicate_fraction=duplicates,
        late_fraction=late,
        invalid_fraction=invalid,
        seed=seed,
        start=start.replace(tzinfo=UTC),
        missing_payment_fraction=missing_payments,
        outside_bound_fraction=outside_bound,
    )
    spec.validate()
    if files < 1:
        raise ValueError("--files must be at least 1")
    if to not in {"landing", "kafka"}:
        raise ValueError(f"--to must be landing or kafka, got {to!r}")
    if send_rate < 0:
        raise ValueError("--send-rate must be 0 or more")
    lines = list(generate_order_lines(spec) if kind == "orders" else generate_lines(spec))
    what = f"{events} orders with their payments" if kind == "orders" else f"{events} events"
    if to == "kafka":
        from runtime.sources.kafka_client import produce_lines

        with Progress(
            TextColumn("sending"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as progress:
            task = progress.add_task("messages", total=len(lines))
            sent = produce_lines(settings, lines, send_rate, lambda n: progress.advance(task, n))
        console.print(
            f"sent {sent} messages ({what}) to {settings.kafka.topic} at {settings.kafka.bootstrap_servers}",
            highlight=False,
        )
        return
    per_file = -(-len(lines) // files) if lines else 0
    with Progress(
        TextColumn("generating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        task = progress.add_task("lines", total=len(lines))
        for number in range(files):
            chunk = lines[number * per_file : (number + 1) * per_file]
            if not chunk:
                break
            place_in_landing(
                settings,
                f"synthetic-{'orders-' if kind == 'orders' else ''}seed{seed}-part{number:04d}.jsonl",
                lambda handle, chunk=chunk: handle.writelines(line + "\n" for line in chunk),
            )
            progress.advance(task, len(chunk))
    console.print(f"wrote {len(lines)} lines ({what}) to {settings.landing_dir}", highlight=False)


@app.command()
@_fails_in_one_line
def run(
    once: Annotated[bool, typer.Option("--once", help="Process everything available now, then exit.")] = False,
    continuous: Annotated[bool, typer.Option("--continuous", help="Keep processing until SIGINT or SIGTERM.")] = False,
    source: Annotated[
        str | None,
        typer.Option(
            help="Where bronze reads: landing (the folder) or kafka (LAKEHOUSE_KAFKA_*); "
            "default LAKEHOUSE_SOURCE, else landing."
        ),
    ] = None,
) -> None:
    """Run the streams source → bronze → silver → gold, once (availableNow) or continuously."""
    if once == continuous:
        raise typer.BadParameter("choose exactly one of --once or --continuous")
    from runtime.runner import run_continuous, run_once
    from runtime.stages import source_stage, stages
    from warehouse.locks import ensure_free
    from warehouse.session import spark_session

    settings = _settings()
    source = source or settings.source
    source_stage(source)  # an unknown source stops here, before Spark starts
    ensure_free(settings, [stage.name for stage in stages(settings, source)])
    if source == "kafka":
        from runtime.sources.kafka_client import check_reachable

        check_reachable(settings)
    with console.status("starting Spark"):
        spark = spark_session(settings)
    if once:
        with console.status(f"processing what has arrived ({source})"):
            reports = run_once(spark, settings, source)
    else:
        console.print(
            f"running continuously from {source} (bronze, silver, gold in back-to-back cycles; idle checks every "
            f"{settings.trigger_interval_seconds}s); Ctrl-C or SIGTERM stops cleanly"
        )
        reports = run_continuous(
            spark, settings, source=source, on_notice=lambda line: sys.stderr.write(f"lakehouse: {line}\n")
        )
    table = RichTable("stream", "batches", "seconds", "figures", title="run")
    for report in reports:
        figures = ", ".join(f"{k}={v:,.0f}" for k, v in report.figures.items() if k != "watermark")
        table.add_row(report.name, str(report.batches), f"{report.seconds:.1f}", figures)
    console.print(table)


@app.command()
@_fails_in_one_line
def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per stream, then exit.")] = False,
    watch: Annotated[
        bool | None,
        typer.Option("--watch/--once", help="Keep the view live (default on a terminal) or print it once."),
    ] = None,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes of the live view.")] = 2.0,
) -> None:
    """Each stream's state, backlog and lag, newest batch, rates and watermark (no Spark is started)."""
    from runtime.runner import pipeline_status

    settings = _settings()
    if as_json:
        sys.stdout.write(json.dumps([s.to_json() for s in pipeline_status(settings)], indent=2) + "\n")
        return
    if watch is None:
        watch = console.is_terminal
    if not watch:
        console.print(_status_table(pipeline_status(settings)), width=max(console.width, 132))
        return
    from rich.live import Live

    with Live(_status_table(pipeline_status(settings)), console=console, refresh_per_second=4) as live:
        while True:
            time.sleep(max(interval, 0.2))
            live.update(_status_table(pipeline_status(settings)))


@app.command()
@_fails_in_one_line
def maintain(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per table only.")] = False,
) -> None:
    """Compact every table (gold Z-ordered by user_id), VACUUM old unreferenced files, checkpoint the logs."""
    from warehouse.catalog import all_tables
    from warehouse.maintenance import maintain_tables
    from warehouse.session import spark_session

    settings = _settings()
    with console.status("starting Spark"):
        spark = spark_session(settings)
    with console.status("compacting, vacuuming, checkpointing"):
        results = maintain_tables(spark, settings, all_tables(settings))
    if as_json:
        sys.stdout.write(json.dumps([r.to_json() for r in results], indent=2) + "\n")
        return
    table = RichTable("table", "live files", "files on disk", "seconds", title="maintenance")
    for r in results:
        seconds = r.optimize_seconds + r.vacuum_seconds + r.checkpoint_seconds
        table.add_row(
            r.table,
            f"{r.live_files_before:,} → {r.live_files_after:,}",
            f"{r.files_on_disk_before:,} → {r.files_on_disk_after:,}",
            f"{seconds:.1f}",
        )
    console.print(table)
    console.print(f"VACUUM kept files unreferenced for less than {settings.vacuum_retention_hours} h", highlight=False)


def _ago(instant: str | None) -> str:
    if not instant:
        return "never"
    seconds = max(0.0, time.time() - datetime.fromisoformat(instant).timestamp())
    return (
        f"{seconds:.0f}s ago"
        if seconds < 120
        else f"{seconds / 60:.0f}m ago"
        if seconds < 7200
        else f"{seconds / 3600:.0f}h ago"
    )


def _status_table(streams: list) -> RichTable:
    table = RichTable(title=f"streams · {datetime.now().astimezone():%H:%M:%S}")
    for column in ("stream", "state", "backlog (lag)", "last batch", "rows", "rows/s", "batch s", "watermark"):
        table.add_column(column, no_wrap=True)
    for stream in streams:
        last = stream.last_batch or {}
        backlog = (
            f"{stream.backlog:,} {stream.backlog_unit} ({stream.lag_seconds:,.0f}s)"
            if stream.backlog
            else "[dim]none[/]"
        )
        table.add_row(
            stream.stream,
            "[green]running[/]" if stream.running else "[dim]stopped[/]",
            backlog,
            f"#{last['batch_id']} {_ago(last.get('recorded_at'))}" if last else "never",
            f"{last.get('rows_in', 0):,}" if last else "",
            f"{last.get('processed_rows_per_second', 0):,.0f}" if last else "",
            f"{last.get('batch_seconds', 0):.1f}" if last else "",
            (last.get("watermark") or "")[5:16].replace("T", " ") if last else "",
        )
    return table


def _print_reports(reports: list, title: str) -> None:
    table = RichTable("step", "batches", "seconds", "figures", title=title)
    for report in reports:
        # The seconds column already says how long the step took.
        shown = {k: v for k, v in report.figures.items() if k not in ("watermark", "seconds")}
        figures = ", ".join(f"{k}={v:,.0f}" for k, v in shown.items())
        table.add_row(report.name, str(report.batches), f"{report.seconds:.1f}", figures or "nothing new")
    console.print(table)


def _date_range(first: datetime | None, last: datetime | None, dates: list[datetime]) -> list:
    chosen = {d.date() for d in dates}
    if (first is None) != (last is None):
        raise typer.BadParameter("--from-date and --to-date go together")
    if first is not None and last is not None:
        if last < first:
            raise typer.BadParameter("--to-date is before --from-date")
        day = first.date()
        while day <= last.date():
            chosen.add(day)
            day += timedelta(days=1)
    return sorted(chosen)


@app.command()
@_fails_in_one_line
def reconcile(
    date: Annotated[
        list[datetime] | None,
        typer.Option(
            "--date",
            help="Also recompute every window of this event date (repeatable).",
            formats=["%Y-%m-%d"],
            metavar="YYYY-MM-DD",
        ),
    ] = None,
    from_date: Annotated[
        datetime | None,
        typer.Option(help="First event date of a range to recompute.", formats=["%Y-%m-%d"], metavar="YYYY-MM-DD"),
    ] = None,
    to_date: Annotated[
        datetime | None,
        typer.Option(help="Last event date (inclusive) of the range.", formats=["%Y-%m-%d"], metavar="YYYY-MM-DD"),
    ] = None,
) -> None:
    """Fold late events into gold (only the affected windows); with dates, repair every window of them."""
    from runtime.checkpoints import RECONCILE_STAGE
    from runtime.runner import run_reconcile
    from warehouse.locks import ensure_free
    from warehouse.session import spark_session

    dates = _date_range(from_date, to_date, date or [])
    settings = _settings()
    ensure_free(settings, [RECONCILE_STAGE])
    with console.status("starting Spark"):
        spark = spark_session(settings)
    with console.status("reconciling gold with silver"):
        reports = run_reconcile(spark, settings, dates)
    _print_reports(reports, "reconcile")


@app.command()
@_fails_in_one_line
def replay(
    from_version: Annotated[
        int | None, typer.Option(help="Rebuild from the lines of this bronze version on (default: all of bronze).")
    ] = None,
    source: Annotated[
        str,
        typer.Option(
            help="bronze: rebuild from bronze as it is; kafka: first re-read the topic from its earliest "
            "retained offsets into bronze (its rows of the topic replaced in one commit), then rebuild."
        ),
    ] = "bronze",
) -> None:
    """Rebuild silver, gold and ops tables from bronze with the same streams, then swap them in (Kappa)."""
    from rich.progress import TaskProgressColumn

    from runtime.checkpoints import KAFKA_STAGE, SILVER_STAGE
    from runtime.replay import REPLAY_SOURCES, run_replay
    from warehouse.catalog import BRONZE_EVENTS
    from warehouse.inspect import table_state
    from warehouse.session import spark_session

    settings = _settings()
    if source not in REPLAY_SOURCES:
        raise typer.BadParameter(f"--source must be one of {', '.join(REPLAY_SOURCES)}, got {source!r}")
    if from_version is not None and from_version < 0:
        raise typer.BadParameter("--from-version must be a bronze version (0 or more)")
    if from_version is not None and source == "kafka":
        raise typer.BadParameter("--from-version is for a replay from bronze; --source kafka re-reads the whole topic")
    total = table_state(settings, BRONZE_EVENTS).rows
    if source == "kafka":
        from runtime.sources.kafka_client import check_reachable, topics

        check_reachable(settings)
        (topic,) = [t for t in topics(settings) if t.name == settings.kafka.topic]
        total = topic.messages
    with console.status("starting Spark"):
        spark = spark_session(settings)
    started = time.monotonic()
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.completed:,.0f} lines · {task.fields[rate]:,.0f} lines/s"),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        first = "re-reading Kafka" if source == "kafka" else "replaying bronze"
        task = progress.add_task(first, total=total or None, rate=0.0)
        counted = KAFKA_STAGE if source == "kafka" else SILVER_STAGE

        def advance(report, batch: dict[str, float]) -> None:
            if report.name == counted:
                progress.advance(task, batch.get("rows_in", 0))
                done = progress.tasks[0].completed
                progress.update(task, rate=done / max(time.monotonic() - started, 1e-6))
            else:
                progress.update(task, description=f"replaying {report.name}")

        result = run_replay(spark, settings, from_version, advance, source)
    _print_reports(result.streams, "replay")
    if result.kafka_offsets:
        ranges = ", ".join(f"{p}: {a:,}..{b - 1:,}" for p, (a, b) in sorted(result.kafka_offsets.items()))
        console.print(f"re-read topic {settings.kafka.topic} (partition: offsets) {ranges}", highlight=False)
    swapped = ", ".join(f"{name}={rows:,}" for name, rows in result.rows_swapped.items())
    console.print(f"swapped in one commit each: {swapped}", highlight=False)
    console.print(
        f"gold keys changed by the replay: {result.gold_keys_changed:,} (logged as cause=replay); "
        f"{result.seconds:.1f}s",
        highlight=False,
    )


@app.command()
@_fails_in_one_line
def validate(
    suite: Annotated[
        list[str] | None,
        typer.Option(
            "--suite",
            help="Run only this suite (repeatable): bronze.events, silver.events, conservation, "
            "completeness, freshness.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON only.")] = False,
) -> None:
    """Run the data-quality suites, write the HTML report; exit 1 when a blocking expectation fails."""
    from expectations.runner import run_suites
    from warehouse.session import spark_session

    settings = _settings()
    with console.status("starting Spark"):
        spark = spark_session(settings)
    with console.status("validating"):
        run = run_suites(spark, settings, suite or None)
    summary = run.summary()
    if as_json:
        sys.stdout.write(json.dumps(summary, indent=2, default=str) + "\n")
    else:
        _print_validation(summary)
    if run.blocking_failed:
        failed = ", ".join(f"{s['suite']} ({s['blocking_failed']})" for s in summary["suites"] if s["blocking_failed"])
        sys.stderr.write(f"lakehouse: blocking data-quality expectations failed: {failed}; see {run.report_path}\n")
        raise typer.Exit(1)


_VERDICT_STYLE = {"passed": "green", "failed": "bold red", "warning": "yellow", "skipped": "dim"}


def _print_validation(summary: dict) -> None:
    table = RichTable("suite", "verdict", "expectations", "worst offenders", title="data quality")
    for entry in summary["suites"]:
        verdict = entry["verdict"]
        counts = (
            f"{entry['expectations_evaluated'] - entry['expectations_failed']}/{entry['expectations_evaluated']} held"
        )
        if entry["skipped"]:
            offenders = entry["skipped"]
        elif entry["failed_expectations"]:
            failed = "; ".join(f["description"] for f in entry["failed_expectations"])
            offenders = "\n".join([f"{failed} ({entry['unexpected_count']:,} rows)", *entry["worst_offenders"]])
        else:
            offenders = ""
        table.add_row(entry["suite"], f"[{_VERDICT_STYLE[verdict]}]{verdict}[/]", counts, offenders)
    console.print(table)
    console.print(f"report: {summary['report']}", highlight=False, soft_wrap=True)


@app.command()
@_fails_in_one_line
def tables(
    as_json: Annotated[bool, typer.Option("--json", help="Print only a JSON array, one object per table.")] = False,
) -> None:
    """The catalog: every table's name, layer, path, Delta version and row count."""
    from warehouse.inspect import catalog_states

    states = catalog_states(_settings())
    if as_json:
        sys.stdout.write(json.dumps([s.as_json() for s in states], indent=2) + "\n")
        return
    home = _settings().home
    paths = [Path(s.path) for s in states]
    shown = [str(p.relative_to(home)) if p.is_relative_to(home) else str(p) for p in paths]
    table = RichTable(title="catalog", caption=f"paths under {home}")
    # Paths relative to the home and never broken, so an 80-column terminal shows each whole (names fold).
    table.add_column("name", overflow="fold")
    for column in ("layer", "version", "rows"):
        table.add_column(column)
    table.add_column("path", no_wrap=True, min_width=max(map(len, shown)))
    for state, path in zip(states, shown, strict=True):
        table.add_row(
            state.table.name,
            state.table.layer,
            "-" if state.version is None else str(state.version),
            "-" if state.rows is None else str(state.rows),
            path,
        )
    console.print(table)


def _missing(settings: Settings, table: Any) -> str:
    """Why a catalog table has no Delta table yet: not created yet, or left out by LAKEHOUSE_GOLD_OUTPUTS."""
    from warehouse.catalog import kept_tables

    if table.name not in {t.name for t in kept_tables(settings)}:
        return f"{table.name} is not kept: add it to LAKEHOUSE_GOLD_OUTPUTS (now {_outputs(settings)}) to keep it"
    return f"{table.name} does not exist yet; `lakehouse run --once` creates it"


def _outputs(settings: Settings) -> str:
    return ",".join(sorted(settings.gold_outputs)) or "none"


def _catalog_table(settings: Settings, name: str) -> Any:
    from warehouse.catalog import table_by_name

    try:
        return table_by_name(settings, name)
    except KeyError as error:
        raise ValueError(error.args[0]) from None


def _utc(moment: datetime) -> str:
    """``2024-01-01 10:00:00`` in UTC, with milliseconds or microseconds only when there are any."""
    from datetime import UTC

    moment = moment.astimezone(UTC) if moment.tzinfo else moment
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    if moment.microsecond % 1000:
        return f"{text}.{moment.microsecond:06d}"
    return f"{text}.{moment.microsecond // 1000:03d}" if moment.microsecond else text


def _cell(value: Any) -> Any:
    """A value as printed: times in UTC (``2024-01-01 10:00:00``), exact decimals, ``null`` dimmed."""
    from datetime import date
    from decimal import Decimal

    from rich.text import Text

    if value is None:
        return Text("null", style="dim")
    if isinstance(value, datetime):
        return Text(_utc(value))
    if isinstance(value, date):
        return Text(value.isoformat())
    if isinstance(value, Decimal):
        return Text(format(value, "f"))
    if isinstance(value, bool):
        return Text(str(value).lower())
    return Text(str(value))


def _print_records(columns: list[str], rows: list[list[Any]], fold: frozenset[str] = frozenset()) -> None:
    """Rows as a table when every value (but those in ``fold``) fits the terminal whole, else one block per row.

    No value is ever cut: key and time columns never wrap in the table, and a table too wide for the terminal
    becomes a vertical listing (``column  value`` per line) where long values fold onto further lines.
    """
    from rich.cells import cell_len
    from rich.text import Text

    widths = [max([cell_len(c), *(row[i].cell_len for row in rows)]) for i, c in enumerate(columns)]
    needed = sum(min(w, 12) if c in fold else w for c, w in zip(columns, widths, strict=True))
    if needed + 3 * len(columns) + 1 <= console.width:
        view = RichTable(highlight=False)
        for column in columns:
            view.add_column(column, no_wrap=column not in fold, overflow="fold")
        for row in rows:
            view.add_row(*row)
        console.print(view)
        return
    for number, row in enumerate(rows, 1):
        console.rule(Text(f"row {number}"), align="left", style="dim")
        record = RichTable.grid(padding=(0, 2))
        record.add_column(no_wrap=True, style="bold")
        record.add_column(overflow="fold")
        for column, value in zip(columns, row, strict=True):
            record.add_row(Text(column), value)
        console.print(record)


@app.command()
@_fails_in_one_line
def show(
    table_name: Annotated[str, typer.Argument(metavar="TABLE", help="A table name such as gold.user_spend_5m.")],
    limit: Annotated[int, typer.Option(help="Rows to print (0: only the counts).")] = 20,
    as_of: Annotated[
        str | None,
        typer.Option(
            "--as-of",
            metavar="VERSION|TIMESTAMP",
            help="Time travel: a Delta version (see `history`) or an ISO time such as 2024-01-01T10:00:00Z "
            "(UTC when it has no offset).",
        ),
    ] = None,
) -> None:
    """Print a table's rows sorted by its key (arrival order when it has none); --as-of reads an older version."""
    from rich.text import Text

    from warehouse.inspect import ARRIVAL_ORDER, parse_as_of, read_snapshot

    if limit < 0:
        raise ValueError("--limit must be 0 or more")
    target = None if as_of is None else parse_as_of(as_of)
    settings = _settings()
    table = _catalog_table(settings, table_name)
    snapshot = read_snapshot(settings, table, limit, target)
    if snapshot is None:
        console.print(Text(_missing(settings, table)))
        return
    latest = "latest" if snapshot.version == snapshot.latest_version else f"latest is {snapshot.latest_version}"
    committed = "" if snapshot.committed_at is None else f", committed {_utc(snapshot.committed_at)} UTC"
    console.print(Text(f"{table.name} at version {snapshot.version} ({latest}){committed}"))
    _print_records(snapshot.columns, [[_cell(v) for v in row] for row in snapshot.rows])
    if snapshot.by_key:
        order = f"sorted by key {', '.join(snapshot.order_by)}"
    else:
        arrival = [c for c in snapshot.order_by if c in ARRIVAL_ORDER]
        order = f"sorted by {', '.join(arrival)}, then the other columns" if arrival else "sorted by every column"
    console.print(Text(f"{len(snapshot.rows):,} of {snapshot.total_rows:,} rows shown, {order}; times are UTC"))


def _commit_time(moment: datetime | None) -> Any:
    """A commit's time in UTC, always to the millisecond (Delta's precision), so the column lines up."""
    from rich.text import Text

    if moment is None:
        return _cell(None)
    return Text(f"{_utc(moment.replace(microsecond=0))}.{moment.microsecond // 1000:03d}")


def _rows_text(rows: dict[str, int]) -> Any:
    from rich.text import Text

    if not rows:
        return Text("-", style="dim")
    return Text(", ".join(f"{n:,} {label}" for label, n in rows.items() if n) or "0")


@app.command()
@_fails_in_one_line
def history(
    table_name: Annotated[str, typer.Argument(metavar="TABLE", help="A table name such as gold.user_spend_5m.")],
    limit: Annotated[int, typer.Option(help="Newest commits to list.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print only a JSON array, one object per commit.")] = False,
) -> None:
    """The table's Delta commits, newest first: version, time (UTC), operation and rows written or changed."""
    from rich.text import Text

    from warehouse.inspect import table_history

    if limit < 1:
        raise ValueError("--limit must be 1 or more")
    settings = _settings()
    table = _catalog_table(settings, table_name)
    commits = table_history(settings, table, limit)
    if as_json:
        sys.stdout.write(json.dumps([c.as_json() for c in commits or []], indent=2) + "\n")
        return
    if commits is None:
        console.print(Text(_missing(settings, table)))
        return
    rows = [
        [
            Text(str(c.version)),
            _commit_time(c.timestamp),
            Text(f"{c.operation} (overwrite)" if c.parameters.get("mode") == "Overwrite" else c.operation),
            _rows_text(c.rows),
        ]
        for c in commits
    ]
    console.print(Text(f"{table.name}: Delta commits, newest first"))
    _print_records(["version", "time (UTC)", "operation", "rows"], rows, fold=frozenset({"rows"}))
    newest = commits[0].version
    if len(commits) == limit and commits[-1].version > 0:
        console.print(Text(f"the {len(commits)} newest of {newest + 1} versions; --limit shows more"))


kafka_app = typer.Typer(
    name="kafka",
    help="A local single-node Kafka broker (KRaft) on 127.0.0.1, its data and logs under LAKEHOUSE_HOME/kafka.",
    no_args_is_help=True,
)
app.add_typer(kafka_app)


@kafka_app.command("up")
@_fails_in_one_line
def kafka_up() -> None:
    """Start the broker (unless it runs), wait until it answers, create the topic if missing."""
    from devtools.broker import up

    settings = _settings()
    host, port = settings.kafka.broker_address
    with console.status(f"starting the Kafka broker on {host}:{port}"):
        started = up(settings)
    state = "started" if started else "already running"
    console.print(
        f"Kafka broker {state} on {host}:{port}; topic {settings.kafka.topic} ready "
        f"(data and logs in {settings.kafka_dir})",
        highlight=False,
    )


@kafka_app.command("down")
@_fails_in_one_line
def kafka_down() -> None:
    """Stop the broker cleanly; fine when none runs."""
    from devtools.broker import down

    settings = _settings()
    console.print("Kafka broker stopped" if down(settings) else "no Kafka broker was running", highlight=False)


@kafka_app.command("status")
@_fails_in_one_line
def kafka_status(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object only.")] = False,
) -> None:
    """The broker, its topics, partitions, end offsets and the lakehouse's lag per partition."""
    from devtools.broker import broker_pid
    from runtime.sources.kafka_client import topics

    settings = _settings()
    pid = broker_pid(settings)
    try:
        states = topics(settings, timeout=5)
        reachable = True
    except Exception:
        states, reachable = [], False
    report = {
        "bootstrap_servers": settings.kafka.bootstrap_servers,
        "broker": "local" if pid else ("external" if reachable else "down"),
        "pid": pid,
        "reachable": reachable,
        "topic": settings.kafka.topic,
        "options": settings.kafka.redacted,
        "topics": [
            {
                "name": state.name,
                "messages": state.messages,
                "partitions": [
                    {"partition": p.partition, "earliest": p.earliest, "end": p.latest} for p in state.partitions
                ],
            }
            for state in states
        ],
    }
    if as_json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        return
    where = {"local": f"this home's broker (pid {pid})", "external": "an external broker", "down": "nothing answers"}
    console.print(f"{settings.kafka.bootstrap_servers}: {where[report['broker']]}", highlight=False)
    if not reachable:
        console.print("`lakehouse kafka up` starts the local broker", highlight=False)
        return
    table = RichTable("topic", "partition", "earliest", "end", "messages", title="Kafka")
    for state in states:
        for p in state.partitions:
            retained = p.latest - p.earliest
            table.add_row(state.name, str(p.partition), f"{p.earliest:,}", f"{p.latest:,}", f"{retained:,}")
    console.print(table)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
