"""Run the suites: validate, log every outcome to ``ops.dq_results``, write the HTML report.

The command line (``lakehouse validate``), the tests and the Dagster asset checks all call
:func:`run_suites`, so they validate the same way and leave the same trail.
"""

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from pyspark.sql import SparkSession

from expectations.report import write_report
from expectations.suites import SUITES
from expectations.validation import SuiteResult, to_json
from warehouse.catalog import OPS_DQ_RESULTS, all_tables, catalog_name, kept_tables
from warehouse.delta import append_once
from warehouse.settings import Settings
from warehouse.tables import ensure_tables


@dataclass
class ValidationRun:
    """One validation of some suites: when, what came out, where the report is."""

    run_id: str
    started_at: datetime
    results: list[SuiteResult]
    report_path: Path

    @property
    def blocking_failed(self) -> bool:
        return any(r.blocking_failures for r in self.results)

    def summary(self) -> dict:
        """The one-screen summary as plain data (``lakehouse validate --json``)."""
        return {
            "run_id": self.run_id,
            "started_at": self.started_at.isoformat(),
            "passed": not self.blocking_failed,
            "report": str(self.report_path),
            "suites": [
                {
                    "suite": r.suite,
                    "table": r.table_name,
                    "verdict": r.verdict,
                    "expectations_evaluated": len(r.outcomes),
                    "expectations_failed": len(r.failed),
                    "blocking_failed": len(r.blocking_failures),
                    "unexpected_count": r.unexpected_count,
                    "worst_offenders": r.examples,
                    "failed_expectations": [
                        {"expectation": o.expectation, "column": o.column, "description": o.description}
                        for o in r.failed
                    ],
                    "figures": r.figures,
                    "skipped": r.skipped,
                    "seconds": r.seconds,
                }
                for r in self.results
            ],
        }


def suite_names() -> list[str]:
    return list(SUITES)


def run_suites(
    spark: SparkSession, settings: Settings, names: Sequence[str] | None = None, run_id: str | None = None
) -> ValidationRun:
    """Validate the named suites (all by default), in pipeline order; log and report them."""
    unknown = [n for n in names or [] if n not in SUITES]
    if unknown:
        raise KeyError(f"unknown suite {unknown[0]!r}; known suites: {', '.join(SUITES)}")
    settings.ensure_home()
    ensure_tables(spark, settings, kept_tables(settings))
    chosen = [n for n in SUITES if names is None or n in names]
    run = ValidationRun(
        run_id=run_id or uuid.uuid4().hex,
        started_at=datetime.now(UTC),
        results=[SUITES[name].run(spark, settings) for name in chosen],
        report_path=Path(),
    )
    run.report_path = write_report(settings, run.run_id, run.started_at, run.results)
    record(spark, settings, run)
    return run


def run_pipeline_suites(
    spark: SparkSession, views: Sequence[Settings], names: Sequence[str] | None = None, run_id: str | None = None
) -> ValidationRun:
    """Each pipeline's suites (all by default) in one run and one report, a section per pipeline (another
    pipeline's suites carry its name); each pipeline's outcomes are logged in its own ``ops.dq_results``."""
    if len(views) == 1 and views[0].pipeline is None:
        return run_suites(spark, views[0], names, run_id)
    unknown = [n for n in names or [] if n not in SUITES]
    if unknown:
        raise KeyError(f"unknown suite {unknown[0]!r}; known suites: {', '.join(SUITES)}")
    chosen = [n for n in SUITES if names is None or n in names]
    run_id = run_id or uuid.uuid4().hex
    started = datetime.now(UTC)
    each: list[tuple[Settings, list[SuiteResult]]] = []
    for view in views:
        view.ensure_home()
        ensure_tables(spark, view, kept_tables(view))
        each.append((view, [SUITES[name].run(spark, view) for name in chosen]))
    shown = []
    for view, results in each:
        named = {table.name: catalog_name(view, table) for table in all_tables(view)}
        for result in results:
            if view.pipeline is not None:
                table = named.get(result.table_name, result.table_name)
                result = replace(result, suite=f"{view.spec.name}: {result.suite}", table_name=table)
            shown.append(result)
    root = views[0].root()
    run = ValidationRun(run_id, started, shown, write_report(root, run_id, started, shown))
    for view, results in each:
        record(spark, view, ValidationRun(run_id, started, results, run.report_path))
    return run


def record(spark: SparkSession, settings: Settings, run: ValidationRun) -> None:
    """Append one ``ops.dq_results`` row per outcome, once per run (a retried write adds nothing)."""
    rows = [
        (
            run.run_id,
            run.started_at,
            outcome.suite,
            result.table_name,
            outcome.expectation,
            outcome.column,
            outcome.description,
            outcome.severity,
            outcome.success,
            to_json(outcome.observed_value) if outcome.observed_value is not None else None,
            outcome.element_count,
            outcome.unexpected_count,
            to_json(list(outcome.examples)),
            str(run.report_path),
        )
        for result in run.results
        for outcome in result.outcomes
    ]
    if rows:
        frame = spark.createDataFrame(rows, OPS_DQ_RESULTS.schema)
        suites = "+".join(r.suite for r in run.results)
        append_once(frame, settings, OPS_DQ_RESULTS, f"lakehouse:validate:{run.run_id}:{suites}", 0)
