"""Great Expectations, run one way: an in-memory context that validates Spark DataFrames.

No files are written by GX, usage statistics and progress bars are off, and every result is turned into
plain records (:class:`Outcome`, :class:`SuiteResult`) that the report, the ``ops.dq_results`` log, the
command line and the Dagster checks all read. GX is imported on first use (it costs seconds).
"""

import json
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from functools import cache
from typing import Any

from pyspark.sql import DataFrame

#: How many offending rows each expectation brings back as examples.
EXAMPLES = 5

CRITICAL = "critical"
WARNING = "warning"


@dataclass(frozen=True)
class Outcome:
    """One expectation evaluated once: did it hold, what was seen, and a few offending keys."""

    suite: str
    expectation: str
    column: str | None
    description: str
    severity: str
    success: bool
    observed_value: Any = None
    element_count: int | None = None
    unexpected_count: int | None = None
    examples: tuple[str, ...] = ()
    error: str | None = None


@dataclass
class SuiteResult:
    """Every outcome of one suite over one snapshot of the tables, with the snapshot's own figures
    (rows checked, lines or windows still in flight, the versions read)."""

    suite: str
    table_name: str
    outcomes: list[Outcome] = field(default_factory=list)
    figures: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    #: Why the suite could not run on a consistent snapshot now (not a failure; the next run will).
    skipped: str | None = None

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.success]

    @property
    def blocking_failures(self) -> list[Outcome]:
        return [o for o in self.failed if o.severity == CRITICAL]

    @property
    def warnings(self) -> list[Outcome]:
        return [o for o in self.failed if o.severity != CRITICAL]

    @property
    def success(self) -> bool:
        return not self.failed

    @property
    def unexpected_count(self) -> int:
        return sum(o.unexpected_count or 0 for o in self.failed)

    @property
    def examples(self) -> list[str]:
        """The worst offenders: examples of the failed expectations, blocking ones first."""
        ordered = self.blocking_failures + self.warnings
        return [example for outcome in ordered for example in outcome.examples][:EXAMPLES]

    @property
    def verdict(self) -> str:
        if self.skipped:
            return "skipped"
        if self.blocking_failures:
            return "failed"
        return "warning" if self.warnings else "passed"


@contextmanager
def timed(result: SuiteResult) -> Iterator[SuiteResult]:
    started = time.monotonic()
    try:
        yield result
    finally:
        result.seconds = round(time.monotonic() - started, 3)


@cache
def _context() -> Any:
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx
    from great_expectations.data_context.types.base import (
        DataContextConfig,
        InMemoryStoreBackendDefaults,
        ProgressBarsConfig,
    )

    config = DataContextConfig(
        store_backend_defaults=InMemoryStoreBackendDefaults(),
        progress_bars=ProgressBarsConfig(globally=False, metric_calculations=False),
        analytics_enabled=False,
    )
    return gx.get_context(project_config=config, mode="ephemeral")


@cache
def _source() -> Any:
    return _context().data_sources.add_spark(name="lakehouse")


@cache
def _batch_definition(name: str) -> Any:
    asset = _source().add_dataframe_asset(name=name)
    return asset.add_batch_definition_whole_dataframe("snapshot")


def gx_expectations() -> Any:
    """The ``great_expectations.expectations`` module (imported on first use)."""
    _context()
    import great_expectations.expectations as gxe

    return gxe


def validate(
    frame: DataFrame, suite: str, part: str, expectations: Sequence[Any], keys: Sequence[str]
) -> list[Outcome]:
    """Validate ``frame`` against ``expectations`` with GX; offending rows are named by their ``keys``.

    The frame is cached for the validation: GX computes each expectation's metrics as its own Spark
    queries over it.
    """
    definition = _batch_definition(f"{suite}:{part}")
    frame = frame.persist()
    try:
        batch = definition.get_batch(batch_parameters={"dataframe": frame})
        # Counts first (cheap); the offending keys only for what failed (a second pass over those).
        results = _run(batch, suite, part, expectations, {"result_format": "BASIC", "partial_unexpected_count": 0})
        failed = [i for i, r in enumerate(results) if not r.success and "unexpected_count" in (r.result or {})]
        if failed:
            detailed = _run(
                batch,
                suite,
                part,
                [expectations[i] for i in failed],
                {
                    "result_format": "SUMMARY",
                    "partial_unexpected_count": EXAMPLES * 4,
                    "unexpected_index_column_names": list(keys),
                },
            )
            for i, r in zip(failed, detailed, strict=True):
                results[i] = r
    finally:
        frame.unpersist()
    return [_outcome(suite, r, keys) for r in results]


def _run(batch: Any, suite: str, part: str, expectations: Sequence[Any], result_format: dict) -> list[Any]:
    import great_expectations as gx

    checked = gx.ExpectationSuite(name=f"{suite}:{part}", expectations=list(expectations))
    return list(batch.validate(checked, result_format=result_format).results)


def _outcome(suite: str, result: Any, keys: Sequence[str]) -> Outcome:
    config = result.expectation_config
    kwargs = config.kwargs
    column = kwargs.get("column") or ", ".join(c for c in (kwargs.get("column_A"), kwargs.get("column_B")) if c)
    details = result.result or {}
    error = None
    info = result.exception_info or {}
    if info.get("raised_exception"):
        error = str(info.get("exception_message") or "the expectation raised an error")
    observed = details.get("observed_value")
    if observed is None and "unexpected_percent" in details:
        observed = {"unexpected_percent": round(float(details["unexpected_percent"] or 0.0), 6)}
    return Outcome(
        suite=suite,
        expectation=config.type,
        column=column or None,
        description=config.description or config.type.replace("_", " "),
        severity=str(getattr(config.severity, "value", config.severity) or CRITICAL),
        success=bool(result.success),
        observed_value=_plain(observed),
        element_count=details.get("element_count"),
        unexpected_count=details.get("unexpected_count"),
        examples=_examples(details.get("partial_unexpected_index_list") or [], keys),
        error=error,
    )


def _examples(rows: list[dict[str, Any]], keys: Sequence[str]) -> tuple[str, ...]:
    """``key=value`` text for each offending row, keys first, each row once."""
    seen: list[str] = []
    for row in rows:
        ordered = [k for k in keys if k in row] + [k for k in row if k not in keys]
        text = " ".join(f"{k}={_text(row[k])}" for k in ordered)
        if text not in seen:
            seen.append(text)
        if len(seen) == EXAMPLES:
            break
    return tuple(seen)


def _text(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    return "null" if value is None else str(value)


def _plain(value: Any) -> Any:
    """A JSON-safe copy of an observed value (decimals and times as text)."""
    return json.loads(json.dumps(value, default=_json_default)) if value is not None else None


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)


def to_json(value: Any) -> str:
    return json.dumps(value, default=_json_default, sort_keys=True)
