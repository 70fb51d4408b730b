"""What every ``lakehouse`` command shares: the consoles, one-line failures, the checked settings."""

import json
import os
import sys
from collections.abc import Callable
from datetime import date, datetime, timedelta
from functools import wraps
from typing import Any

import typer
from rich.console import Console

from warehouse.settings import Settings

console = Console()
errors = Console(stderr=True)


def fails_in_one_line(command: Callable[..., Any]) -> Callable[..., Any]:
    """Turn any failure into one line on stderr and exit code 1 (Typer's own usage errors stay 2)."""

    @wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        native_output_to_log()
        try:
            return command(*args, **kwargs)
        except typer.Exit:
            raise
        except KeyboardInterrupt:
            errors.print("lakehouse: interrupted", highlight=False)
            raise typer.Exit(130) from None
        except Exception as error:  # the contract: one line, non-zero exit
            from runtime.faults import explain  # the faults it knows, in words with their recovery

            sys.stderr.write(f"lakehouse: {explain(error)[:500]}\n")
            raise typer.Exit(1) from None

    return wrapper


def native_output_to_log() -> None:
    """Send what native code writes straight to the process's stderr (the JVM's stray lines, a Rust panic
    of delta-rs's writer on a full disk, with its backtrace) to ``LAKEHOUSE_HOME/logs/native.log``, and keep
    the terminal's stderr for the lakehouse's own lines: a failure stays one line.

    Only in a command's own process (a test's in-process runner swaps ``sys.stderr`` and keeps it), not with
    ``--verbose``, and not when the log cannot be opened (a bad home is then told by the command itself)."""
    if sys.stderr is not sys.__stderr__ or os.environ.get("LAKEHOUSE_VERBOSE") == "1":
        return
    try:
        logs = Settings.from_env().home / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        log = os.open(logs / "native.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except Exception:
        return
    terminal = os.dup(2)
    os.dup2(log, 2)
    os.close(log)
    sys.stderr = os.fdopen(terminal, "w", buffering=1, encoding="utf-8", errors="backslashreplace")


def home_settings() -> Settings:
    settings = Settings.from_env()
    settings.ensure_home()
    return settings


def print_json(value: Any) -> None:
    """``--json``: the value alone on stdout, indented, so it pipes to ``jq``."""
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def pipeline_views(settings: Settings, names: list[str] | None) -> list[Settings]:
    """The named pipelines' settings (``--pipeline``, repeatable), else those ``LAKEHOUSE_PIPELINES`` selects."""
    return settings.pipelines(tuple(names or ()))


def one_pipeline(settings: Settings, name: str | None, doing: str) -> Settings:
    """The one pipeline a command acts on: ``--pipeline``, else the first declared one when it is selected
    (the contract's bare ``ingest`` and ``replay`` act on the purchases stream, as they always did), else
    the only one selected; else one line naming the choices."""
    views = settings.pipelines(() if name is None else (name,))
    if len(views) > 1 and views[0].pipeline is None:
        return views[0]
    if len(views) > 1:
        choices = ", ".join(view.spec.name for view in views)
        raise ValueError(f"{doing} one pipeline: pass --pipeline with one of {choices}")
    return views[0]


def rehearsal_lines(settings: Settings) -> list[str]:
    """Valid, duplicate and invalid lines of the pipeline's spec, for a continuous run's warm-up
    (``runtime.warmup``)."""
    from devtools.spec_lines import SpecStream, spec_lines

    few = SpecStream(events=20, keys=3, duplicate_fraction=0.2, late_fraction=0.0, invalid_fraction=0.2, seed=1)
    return list(spec_lines(settings.spec, few))


def rehearsal_volume(settings: Settings) -> list[str]:
    """Valid lines of the pipeline's spec, as many as a busy run's first batches carry (10,000 events a
    second, two batches of about two seconds each), for the warm-up's second part (``runtime.warmup``)."""
    from devtools.spec_lines import SpecStream, spec_lines

    busy = SpecStream(
        events=40_000, keys=200, rate=1000.0, duplicate_fraction=0.0, late_fraction=0.0, invalid_fraction=0.0, seed=2
    )
    return list(spec_lines(settings.spec, busy))


def date_range(first: datetime | None, last: datetime | None, dates: list[datetime]) -> list[date]:
    """The event dates ``--date`` and ``--from-date``/``--to-date`` name, sorted, each once."""
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
