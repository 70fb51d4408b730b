"""The ``lakehouse`` command line: the same transforms the Dagster assets run, from a terminal."""

import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from cli import generate, pipelines, render, servers
from cli.common import console, date_range, one_pipeline, pipeline_views, print_json, rehearsal_lines, rehearsal_volume
from cli.common import fails_in_one_line as _fails_in_one_line
from cli.common import home_settings as _settings
from warehouse.settings import Settings

#: ``--pipeline``: which declared pipelines a command acts on (repeatable; default every one selected).
Pipelines = Annotated[
    list[str] | None,
    typer.Option(
        "--pipeline", "-p", help="A declared pipeline (repeatable); default: every one LAKEHOUSE_PIPELINES selects."
    ),
]
#: ``--pipeline`` where a command acts on exactly one.
OnePipeline = Annotated[
    str | None,
    typer.Option("--pipeline", "-p", help="The declared pipeline (default: the first, purchases, when selected)."),
]

#: ``lakehouse --help`` groups the commands: what a user runs every day, what an operator runs, the local servers.
EVERYDAY, OPERATING, LOCAL_SERVICES = "Everyday", "Operating", "Local services"

app = typer.Typer(
    name="lakehouse",
    help="A Kappa-style streaming lakehouse: landing → bronze → silver → gold in Delta Lake.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


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


@app.command(rich_help_panel=EVERYDAY)
@_fails_in_one_line
def ingest(
    files: Annotated[list[Path], typer.Argument(help="JSON Lines files to place into the landing zone.")],
    pipeline: OnePipeline = None,
    wait: Annotated[
        float,
        typer.Option(
            help="Hand the files to a running `run --continuous`: wait up to this many seconds for its stream to be "
            "up, land them, then for each to reach gold, and say how long each took.",
            min=0,
        ),
    ] = 0.0,
) -> None:
    """Place JSON Lines files into a pipeline's landing zone atomically (a reader never sees half a file)."""
    from runtime.progress import await_in_gold, await_landing_stream
    from runtime.sources.landing import ingest_file

    settings = one_pipeline(_settings(), pipeline, "ingest lands files in")
    if wait:
        await_landing_stream(settings, wait)
    settings.ensure_home()
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        raise FileNotFoundError(f"no such file: {', '.join(missing)}")
    irregular = [str(f) for f in files if not f.is_file()]  # a folder, a FIFO, a device: never read
    if irregular:
        raise ValueError(f"not a regular file: {', '.join(irregular)}")
    for source in files:
        placed = ingest_file(settings, source)
        landed_at = time.time()
        console.print(f"landed {source} → {placed.name}", highlight=False, soft_wrap=True)
        if wait:
            seconds = await_in_gold(settings, placed.name, landed_at, wait)
            shown = f"{settings.spec.name}: {source.name}"
            line = f"{shown} in gold {seconds:.1f} s after landing (one micro-batch)"
            console.print(line, highlight=False, soft_wrap=True)


app.command(rich_help_panel=EVERYDAY)(generate.generate)


@app.command(rich_help_panel=EVERYDAY)
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
    pipeline: Pipelines = None,
) -> None:
    """Run each pipeline's streams source → bronze → silver → gold, once (availableNow) or continuously."""
    if once == continuous:
        raise typer.BadParameter("choose exactly one of --once or --continuous")
    started = time.monotonic()
    from cli import handed
    from runtime.pipelines import run_all_continuous, run_all_once, source_of
    from runtime.stages import source_stage, stages
    from warehouse.locks import ensure_free
    from warehouse.session import spark_session

    settings = _settings()
    views = pipeline_views(settings, pipeline)
    for view in views:
        chosen = source_of(view, source)
        source_stage(chosen)  # an unknown source stops here, before Spark starts
        view.ensure_home()
        ensure_free(view, stages(view, chosen).names)
        if chosen == "kafka":
            from runtime.sources.kafka_client import check_reachable

            check_reachable(view)
    names = ", ".join(f"{view.spec.name} ({source_of(view, source)})" for view in views)
    with console.status("starting Spark"):
        spark = spark_session(settings)
    if once:
        with console.status(f"processing what has arrived: {names}"):
            reports = run_all_once(spark, views, source)
    else:
        console.print(
            f"running continuously: {names} (bronze, silver, gold in one micro-batch, a trigger every "
            f"{settings.streams.trigger_interval_seconds}s); Ctrl-C or SIGTERM stops cleanly"
        )
        reports = run_all_continuous(
            spark, views, source, on_notice=lambda line: sys.stderr.write(f"lakehouse: {line}\n"),
            warmup_lines=rehearsal_lines(views[0]), warmup_volume=lambda: rehearsal_volume(views[0]),
            handlers=handed.HANDLERS,
        )  # fmt: skip
    render.print_reports(console, reports, "run", views[0].spec.name, time.monotonic() - started)


@app.command(rich_help_panel=EVERYDAY)
@_fails_in_one_line
def status(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per stream, then exit.")] = False,
    watch: Annotated[
        bool | None,
        typer.Option("--watch/--once", help="Keep the view live (default on a terminal) or print it once."),
    ] = None,
    interval: Annotated[float, typer.Option(help="Seconds between refreshes of the live view.")] = 2.0,
    caught_up: Annotated[
        float,
        typer.Option(
            "--wait-caught-up",
            help="First wait up to this many seconds until every running stream has read all its input (after "
            "the last file: a stream fed all the time never is); exit 1 naming those behind.",
            min=0,
        ),
    ] = 0.0,
    pipeline: Pipelines = None,
) -> None:
    """Each stream's state, backlog and lag, newest batch, rates and watermark (no Spark is started)."""
    from runtime.pipelines import await_caught_up, status_all

    views = pipeline_views(_settings(), pipeline)
    if caught_up:
        with console.status("waiting for every running stream to catch up"):
            await_caught_up(views, caught_up)
        watch = False if watch is None else watch
    if as_json:
        print_json([s.to_json() for s in status_all(views)])
        return
    if watch is None:
        watch = console.is_terminal
    if not watch:
        console.print(render.status_view(status_all(views), console.width, console))
        return
    from rich.live import Live

    def view() -> Any:
        return render.status_view(status_all(views), console.width, console)

    with Live(view(), console=console, refresh_per_second=4) as live:
        while True:
            time.sleep(max(interval, 0.2))
            live.update(view())


@_fails_in_one_line
def maintain(
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object per table only.")] = False,
    pipeline: Pipelines = None,
) -> None:
    """Compact every table (gold Z-ordered by its keys), VACUUM old unreferenced files, checkpoint the logs."""
    from warehouse.catalog import all_tables
    from warehouse.maintenance import maintain_tables
    from warehouse.session import spark_session

    settings = _settings()
    with console.status("starting Spark"):
        spark = spark_session(settings)
    results = []
    with console.status("compacting, vacuuming, checkpointing"):
        for view in pipeline_views(settings, pipeline):
            results += maintain_tables(spark, view, all_tables(view))
    if as_json:
        print_json([r.to_json() for r in results])
        return
    console.print(render.maintenance_table(results))
    console.print(
        f"VACUUM kept files unreferenced for less than {settings.schedules.vacuum_retention_hours} h", highlight=False
    )


@app.command(rich_help_panel=OPERATING)
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
    wait: Annotated[
        float,
        typer.Option(help="Seconds to wait for a reconcile already running (a Dagster run's) before refusing.", min=0),
    ] = 0.0,
    own_spark: Annotated[
        bool, typer.Option(help="Start a Spark of its own even beside a running `run --continuous` (which does it).")
    ] = False,
    pipeline: Pipelines = None,
) -> None:
    """Fold late events into gold (only the affected windows); with dates, repair every window of them."""
    from runtime.checkpoints import RECONCILE_STAGE
    from runtime.handover import hand_over, reports_of
    from runtime.pipelines import reconcile_all
    from warehouse.locks import ensure_free
    from warehouse.session import spark_session

    started = time.monotonic()
    dates = date_range(from_date, to_date, date or [])
    settings = _settings()
    views = pipeline_views(settings, pipeline)
    for view in views:
        view.ensure_home()
        if not wait:
            ensure_free(view, [RECONCILE_STAGE])
    # Beside a running `run --continuous`, its followers' warm JVM does it (runtime.handover).
    asked = {"dates": [day.isoformat() for day in dates], "wait": wait}
    with console.status("reconciling gold with silver, in the running stream's process"):
        handed = None if own_spark else hand_over(settings, "reconcile", asked, [view.spec.name for view in views])
    reports = None if handed is None else reports_of(handed)
    if reports is None:
        with console.status("starting Spark"):
            spark = spark_session(settings)
        with console.status("reconciling gold with silver"):
            reports = reconcile_all(spark, views, dates, wait_seconds=wait)
    else:
        console.print("done by the running `lakehouse run --continuous`, between its followers' turns")
    render.print_reports(console, reports, "reconcile", views[0].spec.name, time.monotonic() - started)


@app.command(rich_help_panel=OPERATING)
@_fails_in_one_line
def replay(
    from_version: Annotated[
        int | None, typer.Option(help="Rebuild from the lines of this bronze version on (default: all of bronze).")
    ] = None,
    source: Annotated[
        str,
        typer.Option(
            help="bronze: rebuild from bronze as it is; kafka: first re-read the topic from its earliest "
            "retained offsets into bronze (its rows of the topic replaced in one commit), then rebuild; "
            "landing: the same from the landing zone's files (the recovery of a lost or damaged checkpoint)."
        ),
    ] = "bronze",
    pipeline: OnePipeline = None,
    accept_rebuild: Annotated[
        bool,
        typer.Option(
            "--accept-rebuild",
            help="The spec changed its id, keys, event time or tumbling size: set every table but bronze aside "
            "(retired/) and build them anew under the new spec.",
        ),
    ] = False,
) -> None:
    """Rebuild one pipeline's silver, gold and ops tables from bronze with the same code, then swap them in.

    Kappa: the same streams over every line bronze holds; the result equals the live one. The other
    pipelines are not touched."""
    from runtime.checkpoints import KAFKA_STAGE, LANDING_STAGE, SILVER_STAGE
    from runtime.replay import check_replay_arguments, run_replay
    from warehouse.catalog import BRONZE_EVENTS
    from warehouse.inspect import table_state
    from warehouse.session import spark_session

    check_replay_arguments(source, from_version)  # one line (the wrapper's), before Spark starts
    settings = one_pipeline(_settings(), pipeline, "replay rebuilds")
    settings.ensure_home()
    total = table_state(settings, BRONZE_EVENTS).rows
    if source == "kafka":
        from runtime.sources.kafka_client import check_reachable, topics

        check_reachable(settings)
        (topic,) = [t for t in topics(settings) if t.name == settings.kafka.topic]
        total = topic.messages
    with console.status("starting Spark"):
        spark = spark_session(settings)
    started = time.monotonic()
    with render.lines_progress(console) as progress:
        first = {"kafka": "re-reading Kafka", "landing": "re-reading the landing zone"}.get(source, "replaying bronze")
        task = progress.add_task(first, total=total or None, rate=0.0)
        counted = {"kafka": KAFKA_STAGE, "landing": LANDING_STAGE}.get(source, SILVER_STAGE)

        def advance(report, batch: dict[str, float]) -> None:
            if report.name == counted:
                progress.advance(task, batch.get("rows_in", 0))
                done = progress.tasks[0].completed
                progress.update(task, rate=done / max(time.monotonic() - started, 1e-6))
            else:
                progress.update(task, description=f"replaying {report.name}")

        result = run_replay(spark, settings, from_version, advance, source, accept_rebuild)
    from warehouse.catalog import all_tables, catalog_name

    names = {table.name: catalog_name(settings, table) for table in all_tables(settings)}
    render.print_replay(console, result, settings.kafka.topic, settings.spec.name, names)


@app.command(rich_help_panel=OPERATING)
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
    own_spark: Annotated[
        bool, typer.Option(help="Start a Spark of its own even beside a running `run --continuous` (which does it).")
    ] = False,
    pipeline: Pipelines = None,
) -> None:
    """Run each pipeline's data-quality suites, write the HTML report; exit 1 when a blocking expectation fails."""
    from cli.handed import validation

    settings = _settings()
    summary, handed = validation(settings, pipeline_views(settings, pipeline), suite or None, own_spark)
    if as_json:
        print_json(summary)
    else:
        if handed:
            console.print("done by the running `lakehouse run --continuous`, between its followers' turns")
        render.print_validation(console, summary)
    if not summary["passed"]:
        failed = ", ".join(f"{s['suite']} ({s['blocking_failed']})" for s in summary["suites"] if s["blocking_failed"])
        report = summary["report"]
        sys.stderr.write(f"lakehouse: blocking data-quality expectations failed: {failed}; see {report}\n")
        raise typer.Exit(1)


@app.command(rich_help_panel=EVERYDAY)
@_fails_in_one_line
def tables(
    as_json: Annotated[bool, typer.Option("--json", help="Print only a JSON array, one object per table.")] = False,
    pipeline: Pipelines = None,
) -> None:
    """The catalog: every table's name, pipeline, layer, path, Delta version and row count."""
    from warehouse.inspect import catalog_states

    states = catalog_states(_settings(), tuple(pipeline or ()))
    if as_json:
        print_json([s.as_json() for s in states])
        return
    by_pipeline: dict[str, list] = {}
    for state in states:
        by_pipeline.setdefault(state.pipeline, []).append(state)
    for name, group in by_pipeline.items():
        root = group[0].path[: group[0].path.rindex("/tables/")]  # each pipeline's tables/ is in its own root
        console.print(render.catalog_table(group, root, console.width, console, title=f"{name} tables"))


def _missing(settings: Settings, table: Any) -> str:
    """Why a catalog table has no Delta table yet: not created yet, or left out by LAKEHOUSE_GOLD_OUTPUTS."""
    from warehouse.catalog import kept_tables

    if table.name not in {t.name for t in kept_tables(settings)}:
        return f"{table.name} is not kept: add it to LAKEHOUSE_GOLD_OUTPUTS (now {_outputs(settings)}) to keep it"
    return f"{table.name} does not exist yet; `lakehouse run --once` creates it"


def _outputs(settings: Settings) -> str:
    return ",".join(sorted(settings.gold_outputs)) or "none"


def _catalog_table(settings: Settings, name: str) -> tuple[Settings, Any]:
    """(the table's pipeline's settings, the table) for a catalog name; one line naming the known ones."""
    from warehouse.catalog import table_by_name

    try:
        return table_by_name(settings, name)
    except KeyError as error:
        raise ValueError(error.args[0]) from None


@app.command(rich_help_panel=EVERYDAY)
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
    from warehouse.inspect import ARRIVAL_ORDER, parse_as_of, read_snapshot

    if limit < 0:
        raise ValueError("--limit must be 0 or more")
    target = None if as_of is None else parse_as_of(as_of)
    settings, table = _catalog_table(_settings(), table_name)
    snapshot = read_snapshot(settings, table, limit, target)
    if snapshot is None:
        console.print(_missing(settings, table), markup=False, highlight=False)
        return
    render.print_snapshot(console, snapshot, ARRIVAL_ORDER)


@app.command(rich_help_panel=EVERYDAY)
@_fails_in_one_line
def history(
    table_name: Annotated[str, typer.Argument(metavar="TABLE", help="A table name such as gold.user_spend_5m.")],
    limit: Annotated[int, typer.Option(help="Newest commits to list.")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="Print only a JSON array, one object per commit.")] = False,
) -> None:
    """The table's Delta commits, newest first: version, time (UTC), operation and rows written or changed."""
    from warehouse.inspect import table_history

    if limit < 1:
        raise ValueError("--limit must be 1 or more")
    settings, table = _catalog_table(_settings(), table_name)
    commits = table_history(settings, table, limit)
    if as_json:
        print_json([c.as_json() for c in commits or []])
        return
    if commits is None:
        console.print(_missing(settings, table), markup=False, highlight=False)
        return
    render.print_history(console, table_name, commits, limit)


app.command("pipelines", rich_help_panel=EVERYDAY)(pipelines.pipelines)
app.command(rich_help_panel=OPERATING)(maintain)  # listed after the everyday repairs
app.add_typer(pipelines.pipeline_app, rich_help_panel=EVERYDAY)
for server_app in (servers.kafka_app, servers.cluster_app, servers.postgres_app):
    app.add_typer(server_app, rich_help_panel=LOCAL_SERVICES)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
