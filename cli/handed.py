"""Work the CLI hands to a running `lakehouse run --continuous` beyond the runtime's own reconciles: a
validation (``lakehouse validate``), done in the run's followers' thread with its warm JVM.

``run --continuous`` gives its followers' thread these handlers by name (``runtime.handover``); the runtime's
floor never imports the expectations, so the suites are imported here, and only when a validation is asked
for: a run that is never handed one never loads Great Expectations.
"""

from collections.abc import Sequence
from typing import Any

from pyspark.sql import SparkSession

from cli.common import console
from runtime.handover import Handler, hand_over
from warehouse.settings import Settings

VALIDATE = "validate"


def validate_handed(spark: SparkSession, views: list[Settings], request: dict[str, Any]) -> dict[str, Any]:
    """The named pipelines' suites (all, or those ``request["suites"]`` names): the validation's summary, as
    ``lakehouse validate --json`` prints it (its run also logged to ops.dq_results and its report written)."""
    from expectations.runner import run_pipeline_suites

    return {"summary": run_pipeline_suites(spark, views, request.get("suites") or None).summary()}


#: What `lakehouse run --continuous` serves besides reconciles, by kind.
HANDLERS: dict[str, Handler] = {VALIDATE: validate_handed}


def validation(
    settings: Settings, views: Sequence[Settings], suites: list[str] | None, own_spark: bool
) -> tuple[dict[str, Any], bool]:
    """``lakehouse validate``'s work: handed to a running continuous run of every one of ``views`` (unless
    ``own_spark``), else done here with a Spark of its own. The summary, and whether it was handed."""
    with console.status("validating, in the running stream's process"):
        asked = {"suites": suites or []}
        handed = None if own_spark else hand_over(settings, VALIDATE, asked, [view.spec.name for view in views])
    if handed is not None:
        return handed["summary"], True
    from warehouse.session import spark_session

    with console.status("starting Spark"):
        spark = spark_session(settings)
    with console.status("validating"):
        return validate_handed(spark, list(views), asked)["summary"], False
