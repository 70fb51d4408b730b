"""The ``lakehouse`` command line: the same transforms the Dagster assets run, from a terminal."""

import json
import sys
from collections.abc import Callable
from datetime import datetime
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
    from transforms.landing import ingest_file

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
    events: Annotated[int, typer.Option(help="Valid events (first arrivals) to generate.")] = 5000,
    users: Annotated[int, typer.Option(help="Distinct users.")] = 50,
    skew: Annotated[float, typer.Option(help="Zipf exponent of user popularity (0 = uniform).")] = 1.1,
    rate: Annotated[float, typer.Option(help="Events per second of event time.")] = 20.0,
    disorder: Annotated[float, typer.Option(help="Bounded disorder: max seconds an event time moves back.")] = 30.0,
    duplicates: Annotated[float, typer.Option(help="Fraction of events redelivered (a fifth conflicting).")] = 0.05,
    late: Annotated[float, typer.Option(help="Fraction of events far behind the watermark.")] = 0.02,
    invalid: Annotated[float, typer.Option(help="Fraction of invalid lines mixed in.")] = 0.02,
    seed: Annotated[int, typer.Option(help="Random seed; the same seed gives the same lines.")] = 7,
    files: Annotated[int, typer.Option(help="Spread the lines over this many landing files.")] = 4,
    start: Annotated[
        datetime, typer.Option(help="Event time of the first event (UTC).", formats=["%Y-%m-%dT%H:%M:%S"])
    ] = datetime(2024, 1, 1),
) -> None:
    """Write a synthetic event stream into the landing zone (deterministic for a seed)."""
    from datetime import UTC

    from transforms.landing import place_in_landing
    from transforms.synthetic import StreamSpec, generate_lines

    settings = _settings()
    spec = StreamSpec(
        events=events,
        users=users,
        skew=skew,
        rate=rate,
        disorder_seconds=disorder,
        duplicate_fraction=duplicates,
        late_fraction=late,
        invalid_fraction=invalid,
        seed=seed,
        start=start.replace(tzinfo=UTC),
    )
    spec.validate()
    if files < 1:
        raise ValueError("--files must be at least 1")
    lines = list(generate_lines(spec))
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
                f"synthetic-seed{seed}-part{number:04d}.jsonl",
                lambda handle, chunk=chunk: handle.writelines(line + "\n" for line in chunk),
            )
            progress.advance(task, len(chunk))
    console.print(f"wrote {len(lines)} lines ({events} events) to {settings.landing_dir}", highlight=False)


@app.command()
@_fails_in_one_line
def run(
    once: Annotated[bool, typer.Option("--once", help="Process everything available now, then exit.")] = False,
    continuous: Annotated[bool, typer.Option("--continuous", help="Keep processing until SIGINT or SIGTERM.")] = False,
) -> None:
    """Run the streams landing → bronze → silver → gold, once (availableNow) or continuously."""
    if once == continuous:
        raise typer.BadParameter("choose exactly one of --once or --continuous")
    from transforms.streams import run_continuous, run_once
    from warehouse.session import spark_session

    settings = _settings()
    with console.status("starting Spark"):
        spark = spark_session(settings)
    if once:
        with console.status("processing what has arrived"):
            reports = run_once(spark, settings)
    else:
        console.print(
            f"running continuously every {settings.trigger_interval_seconds}s; Ctrl-C or SIGTERM stops cleanly"
        )
        reports = run_continuous(spark, settings)
    table = RichTable("stream", "batches", "seconds", "figures", title="run")
    for report in reports:
        figures = ", ".join(f"{k}={v:,.0f}" for k, v in report.figures.items() if k != "watermark")
        table.add_row(report.name, str(report.batches), f"{report.seconds:.1f}", figures)
    console.print(table)


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
    table = RichTable("name", "layer", "version", "rows", "path", title="catalog")
    for state in states:
        table.add_row(
            state.table.name,
            state.table.layer,
            "-" if state.version is None else str(state.version),
            "-" if state.rows is None else str(state.rows),
            state.path,
        )
    console.print(table)


@app.command()
@_fails_in_one_line
def show(
    table_name: Annotated[str, typer.Argument(metavar="TABLE", help="A table name such as gold.user_spend_5m.")],
    limit: Annotated[int, typer.Option(help="Rows to print.")] = 20,
) -> None:
    """Print the first rows of a table (ordered by its key when it has one)."""
    from warehouse.catalog import table_by_name
    from warehouse.inspect import read_rows

    settings = _settings()
    try:
        table = table_by_name(settings, table_name)
    except KeyError as error:
        raise ValueError(error.args[0]) from None
    columns, rows = read_rows(settings, table, limit)
    view = RichTable(*columns, title=table.name)
    for row in rows:
        view.add_row(*("" if v is None else str(v) for v in row))
    console.print(view)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
