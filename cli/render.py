"""How the ``lakehouse`` commands look on a terminal: Rich tables and text from plain data.

Every function takes what a command read (stream states, stage reports, commits, a validation summary, …) and
returns a renderable or prints to the console it is given; none reads a table or starts Spark. A table's
headers are never cut: where the full layout is wider than the console, a narrower one is chosen (fewer or
merged columns, or one block per stream), and only values wrap.
"""

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table
from rich.text import Text

VERDICT_STYLE = {"passed": "green", "failed": "bold red", "warning": "yellow", "skipped": "dim"}


def natural_width(console: Console, renderable: RenderableType) -> int:
    """Columns the renderable takes when nothing wraps."""
    return Measurement.get(console, console.options.update_width(10_000), renderable).maximum


def ago(instant: str | None, now: float | None = None) -> str:
    """``42s ago``, ``3m ago``, ``5h ago`` for an ISO instant; ``never`` for none."""
    if not instant:
        return "never"
    seconds = max(0.0, (time.time() if now is None else now) - datetime.fromisoformat(instant).timestamp())
    if seconds < 120:
        return f"{seconds:.0f}s ago"
    return f"{seconds / 60:.0f}m ago" if seconds < 7200 else f"{seconds / 3600:.0f}h ago"


def utc(moment: datetime) -> str:
    """``2024-01-01 10:00:00`` in UTC, with milliseconds or microseconds only when there are any."""
    moment = moment.astimezone(UTC) if moment.tzinfo else moment
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    if moment.microsecond % 1000:
        return f"{text}.{moment.microsecond:06d}"
    return f"{text}.{moment.microsecond // 1000:03d}" if moment.microsecond else text


def cell(value: Any) -> Text:
    """A value as printed: times in UTC (``2024-01-01 10:00:00``), exact decimals, ``null`` dimmed."""
    if value is None:
        return Text("null", style="dim")
    if isinstance(value, datetime):
        return Text(utc(value))
    if isinstance(value, date):
        return Text(value.isoformat())
    if isinstance(value, Decimal):
        return Text(format(value, "f"))
    if isinstance(value, bool):
        return Text(str(value).lower())
    return Text(str(value))


def commit_time(moment: datetime | None) -> Text:
    """A commit's time in UTC, always to the millisecond (Delta's precision), so the column lines up."""
    if moment is None:
        return cell(None)
    return Text(f"{utc(moment.replace(microsecond=0))}.{moment.microsecond // 1000:03d}")


def rows_text(rows: Mapping[str, int]) -> Text:
    """What a commit did to rows: ``2 inserted, 1 updated``; ``-`` when Delta recorded nothing."""
    if not rows:
        return Text("-", style="dim")
    return Text(", ".join(f"{n:,} {label}" for label, n in rows.items() if n) or "0")


# --- status -------------------------------------------------------------------------------------------------

STATUS_HEADERS = ("stream", "state", "backlog (lag)", "last batch", "rows", "rows/s", "batch s", "watermark")


def _state(stream: Any) -> str:
    return "[green]running[/]" if stream.running else "[dim]stopped[/]"


def _backlog(stream: Any) -> str:
    if not stream.backlog:
        return "[dim]none[/]"
    return f"{stream.backlog:,} {stream.backlog_unit} ({stream.lag_seconds:,.0f}s)"


def _watermark(last: Mapping[str, Any]) -> str:
    return (last.get("watermark") or "")[5:16].replace("T", " ")


def _status_table(streams: Sequence[Any], title: str, now: float | None) -> Table:
    table = Table(title=title)
    for header in STATUS_HEADERS:
        table.add_column(header, no_wrap=True)
    for stream in streams:
        last = stream.last_batch or {}
        table.add_row(
            stream.stream,
            _state(stream),
            _backlog(stream),
            f"#{last['batch_id']} {ago(last.get('recorded_at'), now)}" if last else "never",
            f"{last.get('rows_in', 0):,}" if last else "",
            f"{last.get('processed_rows_per_second', 0):,.0f}" if last else "",
            f"{last.get('batch_seconds', 0):.1f}" if last else "",
            _watermark(last) if last else "",
        )
    return table


def _status_blocks(streams: Sequence[Any], title: str, now: float | None) -> Table:
    """One block per stream: its name, then state and backlog, then its newest batch (and watermark)."""
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, title_justify="left")
    table.add_column("stream", no_wrap=True, style="bold")
    table.add_column("state · backlog (lag) · last batch", overflow="fold")
    for stream in streams:
        last = stream.last_batch or {}
        backlog = f"backlog {_backlog(stream)}" if stream.backlog else "[dim]no backlog[/]"
        lines = [f"{_state(stream)} · {backlog}"]
        if last:
            # A figure and its unit never part: the rate goes with the watermark, on a line of its own.
            lines.append(
                f"batch #{last['batch_id']} {ago(last.get('recorded_at'), now)}: {last.get('rows_in', 0):,} rows "
                f"in {last.get('batch_seconds', 0):.1f}s"
            )
            facts = [f"{last.get('processed_rows_per_second', 0):,.0f} rows/s"]
            lines.append(" · ".join(facts + ([f"watermark {_watermark(last)}"] if _watermark(last) else [])))
        else:
            lines.append("no batch yet")
        table.add_row(stream.stream, "\n".join(lines))
    return table


def status_view(
    streams: Sequence[Any], width: int, console: Console | None = None, now: float | None = None
) -> RenderableType:
    """``lakehouse status``: one row per stream when that fits ``width``, else one block per stream."""
    moment = datetime.now().astimezone() if now is None else datetime.fromtimestamp(now).astimezone()
    title = f"streams · {moment:%H:%M:%S}"
    table = _status_table(streams, title, now)
    if natural_width(console or Console(width=width), table) <= width:
        return table
    return _status_blocks(streams, title, now)


# --- runs, maintenance, validation ----------------------------------------------------------------------------


#: The figures a user looks for first, in this order, summed over a pipeline's streams for its headline.
HEADLINE = (
    "events", "late", "quarantined", "duplicates", "conflicting", "windows_changed", "windows_revised",
    "late_events", "keys_recomputed", "keys_changed",
)  # fmt: skip
#: Figures a headline or the seconds column already says, or that mean nothing to a reader.
_NOT_SHOWN = {"watermark", "seconds", "input_left"}  # input_left: runtime.progress.INPUT_LEFT


def print_reports(console: Console, reports: Sequence[Any], verb: str, first: str, seconds: float) -> None:
    """What a run, reconcile or replay did, for a terminal of 80 columns and a log alike: per pipeline one
    headline of the figures a user cares about (events, late, quarantined, windows changed); then per stream
    its batches and seconds and its other figures, grouped (rows, seconds by step, latency, watermark) and
    wrapped between figures, never inside one. ``first`` names the pipeline whose streams carry no prefix."""
    width = max(60, console.width)
    groups: dict[str, list[Any]] = {}
    for report in reports:
        pipeline, _, _ = report.name.rpartition(":")
        groups.setdefault(pipeline or first, []).append(report)
    for pipeline, members in groups.items():
        totals = {key: sum(r.figures.get(key, 0) for r in members) for key in HEADLINE}
        shown = [_figure(key, value) for key, value in totals.items() if any(key in r.figures for r in members)]
        busy = any(value for r in members for key, value in r.figures.items() if key not in _NOT_SHOWN)
        headline = ", ".join(shown) if shown else ("done" if busy else "nothing new")
        _say(console, f"{pipeline}: {headline}", width)
        for report in members:
            name = report.name.rpartition(":")[2]
            batches = f"{report.batches} batch{'es' if report.batches != 1 else ''}"
            parts = _grouped({k: v for k, v in report.figures.items() if k not in _NOT_SHOWN and k not in HEADLINE})
            if report.figures.get("input_left"):
                parts.append("input left for the next run")
            elif not report.batches and not parts:
                parts = ["nothing new"]
            _say(console, f"  {name}: {batches}, {report.seconds:.1f} s" + "".join(f"; {p}" for p in parts), width)
    _say(console, f"{verb}: done in {seconds:.1f} s", width)


def _figure(key: str, value: float) -> str:
    return f"{value:,.0f} {key.replace('_', ' ')}"


def _grouped(figures: Mapping[str, float]) -> list[str]:
    """A stream's figures as a reader takes them in: rows first, then seconds by step, latency, watermark."""
    latency = [f"{k.removeprefix('latency_').removesuffix('_seconds')} {v:,.0f}" for k, v in figures.items()
               if k.startswith("latency_")]  # fmt: skip
    watermark = [f"{k.removeprefix('watermark_').removesuffix('_seconds')} {v:,.0f}" for k, v in figures.items()
                 if k.startswith("watermark_")]  # fmt: skip
    steps = [f"{k.removesuffix('_seconds')} {v:,.0f}" for k, v in figures.items()
             if k.endswith("_seconds") and not k.startswith(("latency_", "watermark_"))]  # fmt: skip
    rest = [f"{k.replace('_', ' ')} {v:,.0f}" for k, v in figures.items()
            if not k.endswith("_seconds") and not k.startswith(("latency_", "watermark_"))]  # fmt: skip
    return [
        part
        for part in (
            ", ".join(rest),
            "seconds: " + ", ".join(steps) if steps else "",
            "latency s: " + ", ".join(latency) if latency else "",
            "watermark s: " + ", ".join(watermark) if watermark else "",
        )
        if part
    ]


def _say(console: Console, line: str, width: int) -> None:
    """One line, wrapped at the console's width between figures (after a ``,`` or ``;``) with the rest indented:
    never a figure or a name split across lines, and no ellipsis."""
    indent = " " * (len(line) - len(line.lstrip()) + 4)
    pieces = re.findall(r".+?(?:[,;] |$)", line.strip())
    current = line[: len(line) - len(line.lstrip())]
    for piece in pieces:
        if current.strip() and cell_len(current + piece.rstrip()) > width:
            console.print(current.rstrip(), highlight=False, markup=False, soft_wrap=True)
            current = indent
        current += piece
    console.print(current.rstrip(), highlight=False, markup=False, soft_wrap=True)


def maintenance_table(results: Iterable[Any]) -> Table:
    table = Table("table", "live files", "files on disk", "seconds", title="maintenance")
    for r in results:
        seconds = r.optimize_seconds + r.vacuum_seconds + r.checkpoint_seconds
        table.add_row(
            r.table,
            f"{r.live_files_before:,} → {r.live_files_after:,}",
            f"{r.files_on_disk_before:,} → {r.files_on_disk_after:,}",
            f"{seconds:.1f}",
        )
    return table


def validation_table(summary: Mapping[str, Any]) -> Table:
    """The data-quality summary (``ValidationRun.summary()``): one row per suite."""
    table = Table(title="data quality")
    for header in ("suite", "verdict", "expectations"):
        table.add_column(header, no_wrap=True)
    table.add_column("worst offenders", overflow="fold")
    for entry in summary["suites"]:
        verdict = entry["verdict"]
        held = entry["expectations_evaluated"] - entry["expectations_failed"]
        counts = f"{held}/{entry['expectations_evaluated']} held"
        if entry["skipped"]:
            offenders = entry["skipped"]
        elif entry["failed_expectations"]:
            failed = "; ".join(f["description"] for f in entry["failed_expectations"])
            offenders = "\n".join([f"{failed} ({entry['unexpected_count']:,} rows)", *entry["worst_offenders"]])
        else:
            offenders = ""
        table.add_row(entry["suite"], f"[{VERDICT_STYLE[verdict]}]{verdict}[/]", counts, Text(offenders))
    return table


def print_validation(console: Console, summary: Mapping[str, Any]) -> None:
    console.print(validation_table(summary))
    console.print(f"report: {summary['report']}", highlight=False, soft_wrap=True)


def print_replay(
    console: Console, result: Any, topic: str, pipeline: str, names: Mapping[str, str] | None = None
) -> None:
    """What a replay of ``pipeline`` (``runtime.replay.ReplayReport``) rebuilt, re-read and swapped in; ``names``
    maps a table's name in its pipeline to its catalog name."""
    names = names or {}
    print_reports(console, result.streams, "replay", pipeline, result.seconds)
    if result.kafka_offsets:
        ranges = ", ".join(f"{p}: {a:,}..{b - 1:,}" for p, (a, b) in sorted(result.kafka_offsets.items()))
        console.print(f"re-read topic {topic} (partition: offsets) {ranges}", highlight=False)
    if result.finished:
        tables = ", ".join(names.get(name, name) for name in result.finished)
        console.print(
            f"finished first the swap of {tables}, which a replay that died mid-swap left half done", highlight=False
        )
    for stream, batch in sorted(result.settled.items()):
        console.print(
            f"{stream}: batch {batch}, cut off after its bronze commit, recorded as done (its lines were rebuilt)",
            highlight=False,
        )
    swapped = ", ".join(f"{names.get(name, name)}={rows:,}" for name, rows in result.rows_swapped.items())
    console.print(f"swapped in one commit each: {swapped}", highlight=False)
    console.print(
        f"gold keys changed by the replay: {result.gold_keys_changed:,} (logged as cause=replay); "
        f"{result.seconds:.1f}s",
        highlight=False,
    )


def count_progress(console: Console, doing: str) -> Progress:
    """A bar of items done out of a known count (``generate``: lines written, messages sent)."""
    return Progress(TextColumn(doing), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console)


def lines_progress(console: Console) -> Progress:
    """A replay's bar: its task's description, lines read and lines per second (a ``rate`` field)."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.completed:,.0f} lines · {task.fields[rate]:,.0f} lines/s"),
        TimeElapsedColumn(),
        console=console,
    )


# --- the catalog, rows and commits ----------------------------------------------------------------------------


def catalog_table(
    states: Sequence[Any], root: str, width: int, console: Console | None = None, title: str = "catalog"
) -> Table:
    """``lakehouse tables``, one pipeline's: paths relative to its ``root`` (the folder of its ``tables/``) and
    never broken, so each shows whole in 80 columns.

    The full table when it fits ``width``; else without the layer column (each name starts with its layer),
    bordered, then borderless; names fold only when even that is too wide.
    """
    prefix = root.rstrip("/") + "/"
    shown = [s.path.removeprefix(prefix) for s in states]
    rows = [
        (
            state.name or state.table.name,
            state.table.layer,
            "-" if state.version is None else str(state.version),
            "-" if state.rows is None else f"{state.rows:,}",
            path,
        )
        for state, path in zip(states, shown, strict=True)
    ]

    def layout(layer: bool, compact: bool) -> Table:
        options: dict[str, Any] = {}
        if compact:  # no borders, two spaces between columns
            options = {"box": box.SIMPLE_HEAD, "show_edge": False, "pad_edge": False, "collapse_padding": True}
        table = Table(title=title, caption=f"paths under {root}", **options)
        table.add_column("name", overflow="fold")
        for header in ("layer", "version") if layer else ("version",):
            table.add_column(header, no_wrap=True)
        table.add_column("rows", no_wrap=True, justify="right")
        table.add_column("path", no_wrap=True, min_width=max(map(len, shown), default=4))
        for name, kind, version, count, path in rows:
            table.add_row(name, *((kind, version) if layer else (version,)), count, path)
        return table

    candidates = [layout(layer=True, compact=False), layout(layer=False, compact=False)]
    candidates.append(layout(layer=False, compact=True))
    measure = console or Console(width=width)
    return next((t for t in candidates if natural_width(measure, t) <= width), candidates[-1])


def print_records(
    console: Console, columns: Sequence[str], rows: Sequence[Sequence[Text]], fold: frozenset[str] = frozenset()
) -> None:
    """Rows as a table when every value (but those in ``fold``) fits the console whole, else one block per row.

    No value is ever cut: key and time columns never wrap in the table, and a table too wide for the console
    becomes a vertical listing (``column  value`` per line) where long values fold onto further lines.
    """
    widths = [max([cell_len(c), *(row[i].cell_len for row in rows)]) for i, c in enumerate(columns)]
    needed = sum(min(w, 12) if c in fold else w for c, w in zip(columns, widths, strict=True))
    if needed + 3 * len(columns) + 1 <= console.width:
        view = Table(highlight=False)
        for column in columns:
            view.add_column(column, no_wrap=column not in fold, overflow="fold")
        for row in rows:
            view.add_row(*row)
        console.print(view)
        return
    for number, row in enumerate(rows, 1):
        console.rule(Text(f"row {number}"), align="left", style="dim")
        record = Table.grid(padding=(0, 2))
        record.add_column(no_wrap=True, style="bold")
        record.add_column(overflow="fold")
        for column, value in zip(columns, row, strict=True):
            record.add_row(Text(column), value)
        console.print(record)


def print_snapshot(console: Console, snapshot: Any, arrival_order: Iterable[str]) -> None:
    """``lakehouse show``: which version, the rows, and how they are sorted (``warehouse.inspect.Snapshot``)."""
    latest = "latest" if snapshot.version == snapshot.latest_version else f"latest is {snapshot.latest_version}"
    committed = "" if snapshot.committed_at is None else f", committed {utc(snapshot.committed_at)} UTC"
    console.print(Text(f"{snapshot.table.name} at version {snapshot.version} ({latest}){committed}"))
    print_records(console, snapshot.columns, [[cell(v) for v in row] for row in snapshot.rows])
    if snapshot.by_key:
        order = f"sorted by key {', '.join(snapshot.order_by)}"
    else:
        arrival = [c for c in snapshot.order_by if c in set(arrival_order)]
        order = f"sorted by {', '.join(arrival)}, then the other columns" if arrival else "sorted by every column"
    console.print(Text(f"{len(snapshot.rows):,} of {snapshot.total_rows:,} rows shown, {order}; times are UTC"))


HISTORY_HEADERS = ("version", "time (UTC)", "operation", "rows")


def history_rows(commits: Iterable[Any]) -> list[list[Text]]:
    """One row per commit (``warehouse.inspect.Commit``): version, time, operation, rows."""
    return [
        [
            Text(str(c.version)),
            commit_time(c.timestamp),
            Text(f"{c.operation} (overwrite)" if c.parameters.get("mode") == "Overwrite" else c.operation),
            rows_text(c.rows),
        ]
        for c in commits
    ]


def print_history(console: Console, table_name: str, commits: Sequence[Any], limit: int) -> None:
    console.print(Text(f"{table_name}: Delta commits, newest first"))
    print_records(console, HISTORY_HEADERS, history_rows(commits), fold=frozenset({"rows"}))
    newest = commits[0].version
    if len(commits) == limit and commits[-1].version > 0:
        console.print(Text(f"the {len(commits)} newest of {newest + 1} versions; --limit shows more"))


# --- Kafka ----------------------------------------------------------------------------------------------------


def kafka_table(topics: Iterable[Mapping[str, Any]]) -> Table:
    """Per topic partition: earliest and end offsets, messages retained (the ``topics`` of ``kafka status``)."""
    table = Table(title="Kafka")
    for header in ("topic", "partition", "earliest", "end", "messages"):
        table.add_column(header, no_wrap=header != "topic", overflow="fold")
    for topic in topics:
        for p in topic["partitions"]:
            retained = p["end"] - p["earliest"]
            table.add_row(topic["name"], str(p["partition"]), f"{p['earliest']:,}", f"{p['end']:,}", f"{retained:,}")
    return table


def kafka_report(kafka: Any, pid: int | None, topics: Sequence[Any] | None) -> dict[str, Any]:
    """``kafka status`` as plain data (its ``--json``): who answers at ``kafka.bootstrap_servers`` (the local
    broker's ``pid``, else an external one, else none when ``topics`` is None) and each topic's partitions."""
    return {
        "bootstrap_servers": kafka.bootstrap_servers,
        "broker": "local" if pid else ("external" if topics is not None else "down"),
        "pid": pid,
        "reachable": topics is not None,
        "topic": kafka.topic,
        "options": kafka.redacted,
        "topics": [
            {
                "name": topic.name,
                "messages": topic.messages,
                "partitions": [
                    {"partition": p.partition, "earliest": p.earliest, "end": p.latest} for p in topic.partitions
                ],
            }
            for topic in topics or []
        ],
    }


def print_kafka_status(console: Console, report: Mapping[str, Any]) -> None:
    """``lakehouse kafka status``: who answers at the bootstrap servers, then the topics' partitions."""
    where = {
        "local": f"this home's broker (pid {report['pid']})",
        "external": "an external broker",
        "down": "nothing answers",
    }
    console.print(f"{report['bootstrap_servers']}: {where[report['broker']]}", highlight=False)
    if not report["reachable"]:
        console.print("`lakehouse kafka up` starts the local broker", highlight=False)
        return
    console.print(kafka_table(report["topics"]))


def pipeline_record(settings: Any) -> dict[str, Any]:
    """One declared pipeline as ``pipelines --json`` prints it: the spec as declared, where its lines land,
    and its tables."""
    from warehouse.catalog import catalog_name, kept_tables
    from warehouse.pipelines import landing_folder

    spec = settings.spec
    return {
        **spec.declared(),
        "landing_folder": str(settings.landing_dir),
        "kafka_topic": settings.kafka.topic,
        "tables": [catalog_name(settings, table) for table in kept_tables(settings)],
        "source_folder": landing_folder(spec),
    }


def pipelines_table(records: Sequence[Mapping[str, Any]], selected: Sequence[str]) -> Table:
    """``lakehouse pipelines``: per declared pipeline, what a reader looks for first, a line each, so a folder's
    path stays whole in 80 columns (``--json`` has every table and field)."""
    caption = "LAKEHOUSE_PIPELINES runs " + (", ".join(selected) or "all")
    table = Table(
        title="declared pipelines", caption=caption, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
        collapse_padding=True,
    )  # fmt: skip
    table.add_column("name", no_wrap=True)
    table.add_column("declared")
    for record in records:
        windows = record["windows"]
        kinds = [f"tumbling {windows['tumbling']}"]
        if "hopping" in windows:
            kinds.append(f"hopping {windows['hopping']['size']}/{windows['hopping']['slide']}")
        if "sessions" in windows:
            kinds.append(f"sessions {windows['sessions']['gap']}")
        if "global" in windows:
            kinds.append(f"global every {windows['global']['every']}")
        source = f"{record['source_folder']}/"
        if record["source"]["default"] == "kafka" or "topic" in record["source"]:
            source += f" or Kafka topic {record['kafka_topic']}"
        time = record["time"]
        lines = [
            f"source     {source}",
            f"id → keys  {record['id']} → {', '.join(record['keys'])}",
            f"event time {time['field']} ({', '.join(time['formats'])})",
            *(f"{'windows' if i == 0 else '':<11}{', '.join(kinds[i : i + 2])}" for i in range(0, len(kinds), 2)),
        ]
        table.add_row(record["name"], "\n".join(lines))
    return table
