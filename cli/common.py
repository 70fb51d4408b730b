"""What every ``lakehouse`` command shares: the consoles, one-line failures, the checked settings."""

import json
import sys
from collections.abc import Callable
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


def home_settings() -> Settings:
    settings = Settings.from_env()
    settings.ensure_home()
    return settings


def print_json(value: Any) -> None:
    """``--json``: the value alone on stdout, indented, so it pipes to ``jq``."""
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")
