"""The data-quality results as plain records, their summary and the HTML report, without Spark or GX.

``expectations/validation.py`` turns GX's results into :class:`Outcome` and :class:`SuiteResult`;
``expectations/runner.py``'s :class:`ValidationRun` sums them up (``lakehouse validate --json``) and
``expectations/report.py`` renders them. Everything here is built by hand; the figures are worked out
from the rules: a failed critical expectation blocks (verdict ``failed``), a failed warning only warns,
a skipped suite is ``skipped``, worst offenders are the failed expectations' examples, blocking first.
"""

import json
import re
from datetime import UTC, date, datetime
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path
from types import SimpleNamespace

import pytest

from expectations.report import render, reports_dir, write_report
from expectations.runner import ValidationRun
from expectations.validation import (
    CRITICAL,
    EXAMPLES,
    WARNING,
    Outcome,
    SuiteResult,
    _examples,
    _outcome,
    _plain,
    timed,
    to_json,
)
from warehouse.settings import Settings

SCRIPT = "<script>alert(1)</script>"
STARTED = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC)


def outcome(
    expectation: str,
    severity: str = CRITICAL,
    success: bool = True,
    unexpected: int | None = None,
    rows: int | None = None,
    examples: tuple[str, ...] = (),
    suite: str = "silver.events",
    **more: object,
) -> Outcome:
    return Outcome(
        suite=suite,
        expectation=expectation,
        column=more.pop("column", "event_id"),
        description=more.pop("description", expectation.replace("_", " ")),
        severity=severity,
        success=success,
        element_count=rows,
        unexpected_count=unexpected,
        examples=examples,
        **more,
    )


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    """Settings of a scratch home (not tests/conftest.py's ``settings``, which starts Spark)."""
    return Settings.from_env({"LAKEHOUSE_HOME": str(tmp_path / "home")})


def passing() -> SuiteResult:
    return SuiteResult(
        "bronze",
        "bronze.events",
        [outcome("expect_column_values_to_not_be_null", unexpected=0, rows=40)],
        figures={"rows": 40},
        seconds=1.25,
    )


def failing() -> SuiteResult:
    """Two failed criticals (5 and 2 unexpected), one failed warning (7), one passed (its count ignored)."""
    return SuiteResult(
        "silver",
        "silver.events",
        [
            outcome("expect_late_rate_below", WARNING, False, 7, 100, ("event_id=w1", "event_id=w2")),
            outcome("expect_column_values_to_be_unique", CRITICAL, False, 5, 100, ("event_id=c1", "event_id=c2")),
            outcome("expect_column_values_to_be_between", CRITICAL, True, 0, 100),
            outcome("expect_amounts_exact", CRITICAL, False, 2, 100, ("event_id=c3", "event_id=c4", "event_id=c5")),
        ],
        figures={"events": 100, "late_share": 0.0712345},
        seconds=2.5,
    )


def warning_only() -> SuiteResult:
    return SuiteResult(
        "freshness",
        "gold.user_spend_5m",
        [
            outcome("expect_fresh", WARNING, False, None, None),
            outcome("expect_quarantine_rate_below", WARNING, True),
        ],
    )


def skipped() -> SuiteResult:
    return SuiteResult("completeness", "gold.user_spend_5m", skipped="gold is being written; next run will check")


# --- SuiteResult ----------------------------------------------------------------------------------------


def test_verdicts() -> None:
    assert passing().verdict == "passed" and passing().success
    assert failing().verdict == "failed" and not failing().success
    assert warning_only().verdict == "warning" and not warning_only().success
    assert skipped().verdict == "skipped"
    # A suite without any outcome passes; skipped wins over failures.
    assert SuiteResult("empty", "t").verdict == "passed"
    assert SuiteResult("s", "t", [outcome("e", success=False)], skipped="why").verdict == "skipped"


def test_failed_blocking_and_warnings_split_the_failures() -> None:
    result = failing()
    assert [o.expectation for o in result.failed] == [
        "expect_late_rate_below",
        "expect_column_values_to_be_unique",
        "expect_amounts_exact",
    ]
    assert [o.expectation for o in result.blocking_failures] == [
        "expect_column_values_to_be_unique",
        "expect_amounts_exact",
    ]
    assert [o.expectation for o in result.warnings] == ["expect_late_rate_below"]


def test_unexpected_count_sums_the_failed_expectations_only() -> None:
    assert failing().unexpected_count == 7 + 5 + 2
    assert warning_only().unexpected_count == 0  # a failure without a count counts 0
    passed_with_rows = SuiteResult("s", "t", [outcome("e", success=True, unexpected=3)])
    assert passed_with_rows.unexpected_count == 0  # under a "mostly", a passing expectation may have some


def test_worst_offenders_are_blocking_first_and_at_most_five() -> None:
    assert EXAMPLES == 5
    # Criticals in their order (c1, c2, then c3 c4 c5), then the warning's, cut at five.
    assert failing().examples == ["event_id=c1", "event_id=c2", "event_id=c3", "event_id=c4", "event_id=c5"]
    few = SuiteResult(
        "s",
        "t",
        [outcome("w", WARNING, False, examples=("w1",)), outcome("c", CRITICAL, False, examples=("c1",))],
    )
    assert few.examples == ["c1", "w1"]
    assert passing().examples == []


def test_timed_records_the_seconds_even_when_the_suite_raises() -> None:
    result = SuiteResult("s", "t")
    with pytest.raises(RuntimeError), timed(result):
        raise RuntimeError("boom")
    assert 0 <= result.seconds < 5


# --- ValidationRun.summary ------------------------------------------------------------------------------


def run_of(*results: SuiteResult) -> ValidationRun:
    return ValidationRun("a1b2c3d4e5f6", STARTED, list(results), Path("/reports/r.html"))


def test_summary_shape_and_figures() -> None:
    summary = run_of(passing(), failing(), skipped()).summary()
    assert json.loads(json.dumps(summary)) == summary  # plain data, as --json prints it
    assert set(summary) == {"run_id", "started_at", "passed", "report", "suites"}
    assert summary["run_id"] == "a1b2c3d4e5f6"
    assert summary["started_at"] == "2024-05-06T07:08:09+00:00"
    assert summary["passed"] is False
    assert summary["report"] == "/reports/r.html"
    bronze, silver, completeness = summary["suites"]
    assert bronze == {
        "suite": "bronze",
        "table": "bronze.events",
        "verdict": "passed",
        "expectations_evaluated": 1,
        "expectations_failed": 0,
        "blocking_failed": 0,
        "unexpected_count": 0,
        "worst_offenders": [],
        "failed_expectations": [],
        "figures": {"rows": 40},
        "skipped": None,
        "seconds": 1.25,
    }
    assert silver["verdict"] == "failed"
    assert (silver["expectations_evaluated"], silver["expectations_failed"], silver["blocking_failed"]) == (4, 3, 2)
    assert silver["unexpected_count"] == 14
    assert silver["worst_offenders"] == ["event_id=c1", "event_id=c2", "event_id=c3", "event_id=c4", "event_id=c5"]
    assert silver["failed_expectations"][0] == {
        "expectation": "expect_late_rate_below",
        "column": "event_id",
        "description": "expect late rate below",
    }
    assert len(silver["failed_expectations"]) == 3
    assert completeness["verdict"] == "skipped"
    assert completeness["skipped"] == "gold is being written; next run will check"


def test_a_run_passes_unless_a_critical_expectation_failed() -> None:
    assert run_of(passing(), warning_only(), skipped()).summary()["passed"] is True
    assert not run_of(passing(), warning_only()).blocking_failed
    assert run_of(failing()).blocking_failed
    assert run_of().summary() == {
        "run_id": "a1b2c3d4e5f6",
        "started_at": "2024-05-06T07:08:09+00:00",
        "passed": True,
        "report": "/reports/r.html",
        "suites": [],
    }


# --- from GX results to records (duck-typed GX objects) ------------------------------------------------


def gx_result(type_: str, kwargs: dict, success: bool, result: dict, **config: object) -> SimpleNamespace:
    expectation_config = SimpleNamespace(
        type=type_, kwargs=kwargs, description=config.get("description"), severity=config.get("severity")
    )
    return SimpleNamespace(
        expectation_config=expectation_config,
        success=success,
        result=result,
        exception_info=config.get("exception_info"),
    )


def test_an_outcome_from_a_failed_expectation_names_its_offending_rows_by_key() -> None:
    result = gx_result(
        "expect_column_values_to_be_unique",
        {"column": "event_id"},
        False,
        {
            "element_count": 10,
            "unexpected_count": 3,
            "unexpected_percent": 30.00000049,
            "partial_unexpected_index_list": [
                {"amount": Decimal("1.50"), "event_id": "e1"},
                {"event_id": "e1", "amount": Decimal("1.50")},  # the same row again: once
                {"event_id": "e2", "amount": None},
            ],
        },
        severity=SimpleNamespace(value="warning"),
    )
    got = _outcome("silver", result, ["event_id"])
    assert got == Outcome(
        suite="silver",
        expectation="expect_column_values_to_be_unique",
        column="event_id",
        description="expect column values to be unique",  # no description: the type, spaced
        severity="warning",
        success=False,
        observed_value={"unexpected_percent": 30.0},  # rounded to 6 places
        element_count=10,
        unexpected_count=3,
        examples=("event_id=e1 amount=1.50", "event_id=e2 amount=null"),
    )


def test_an_outcome_of_a_pair_of_columns_an_error_and_the_default_severity() -> None:
    result = gx_result(
        "expect_column_pair_values_a_to_be_greater_than_b",
        {"column_A": "window_end", "column_B": "window_start"},
        False,
        {"observed_value": {"at": datetime(2024, 1, 1, 10, 0), "total": Decimal("12.30")}},
        description="windows end after they start",
        exception_info={"raised_exception": True, "exception_message": None},
    )
    got = _outcome("gold", result, [])
    assert got.column == "window_end, window_start"
    assert got.description == "windows end after they start"
    assert got.severity == CRITICAL
    assert got.error == "the expectation raised an error"
    assert got.observed_value == {"at": "2024-01-01T10:00:00", "total": "12.30"}
    assert got.examples == ()


def test_examples_are_at_most_five_rows_keys_first() -> None:
    rows = [{"n": i, "event_id": f"e{i}"} for i in range(8)]
    assert _examples(rows, ["event_id"]) == tuple(f"event_id=e{i} n={i}" for i in range(5))
    moment = datetime(2024, 1, 1, 10, 0, 5)
    assert _examples([{"event_time": moment}], ["event_id"]) == ("event_time=2024-01-01 10:00:05",)


def test_json_of_observed_values_is_plain_and_sorted() -> None:
    value = {"b": Decimal("0.10"), "a": date(2024, 1, 2), "c": [datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)]}
    assert to_json(value) == '{"a": "2024-01-02", "b": "0.10", "c": ["2024-01-02T03:04:05+00:00"]}'
    assert _plain(value) == {"b": "0.10", "a": "2024-01-02", "c": ["2024-01-02T03:04:05+00:00"]}
    assert _plain(None) is None


# --- the HTML report ------------------------------------------------------------------------------------


class Page(HTMLParser):
    """The page's text, its script elements and the verdict spans (class, text) in document order."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.scripts = 0
        self.verdicts: list[tuple[str, str]] = []
        self.text: list[str] = []
        self._verdict: str | None = None
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "script":
            self.scripts += 1
        classes = (dict(attrs).get("class") or "").split()
        if tag == "span" and "verdict" in classes:
            self._verdict = next(c for c in classes if c != "verdict")

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._verdict is not None:
            self.verdicts.append((self._verdict, data))
            self._verdict = None


def hostile() -> SuiteResult:
    """Every text a table's content can reach (examples, observed values, figures, skip reasons) hostile."""
    return SuiteResult(
        "silver",
        "silver.events",
        [
            outcome(
                "expect_column_values_to_match_regex",
                CRITICAL,
                False,
                1,
                3,
                (f"event_id={SCRIPT}",),
                column=SCRIPT,
                description=SCRIPT,
                observed_value={"value": SCRIPT},
                error=SCRIPT,
            ),
        ],
        figures={SCRIPT: SCRIPT},
    )


def test_the_report_shows_text_never_markup(settings: Settings) -> None:
    page = render(settings, SCRIPT, STARTED, [hostile(), SuiteResult(SCRIPT, SCRIPT, skipped=SCRIPT)])
    parsed = Page(page)
    assert parsed.scripts == 0
    assert "<script" not in page.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    text = "".join(parsed.text)
    # As text: the run id (1); the skipped suite's name and table in the summary (2); silver's figure name and
    # value (2), description, error, column, observed value, example (5); the skipped suite's heading, table
    # and reason (3).
    assert text.count(SCRIPT) == 13


def test_the_report_has_the_overall_verdict_and_each_suite_s(settings: Settings) -> None:
    results = [passing(), failing(), warning_only(), skipped()]
    parsed = Page(render(settings, "run-1", STARTED, results))
    overall, *rest = parsed.verdicts
    assert overall == ("failed", "failed")
    # The summary table: one row per suite, in order.
    assert rest[:4] == [("passed", "passed"), ("failed", "failed"), ("warning", "warning"), ("skipped", "skipped")]
    section_verdicts = [v for v in rest[4:] if v[0] in {"passed", "failed", "warning", "skipped"}]
    # Each section heading carries its suite's verdict, followed by its outcome rows.
    assert section_verdicts == [
        ("passed", "passed"),  # bronze's heading
        ("passed", "passed"),  # its one outcome
        ("failed", "failed"),  # silver's heading, then its outcomes: failures first, criticals before warnings
        ("failed", "failed"),
        ("failed", "failed"),
        ("warning", "warning"),
        ("passed", "passed"),
        ("warning", "warning"),  # freshness's heading
        ("warning", "warning"),
        ("passed", "passed"),
        ("skipped", "skipped"),  # completeness's heading; no outcome table
    ]


def test_the_report_s_details(settings: Settings) -> None:
    page = render(settings, "run-1", STARTED, [failing(), skipped()])
    text = " ".join(Page(page).text)
    assert f"home {settings.home}" in text
    assert "started 2024-05-06T07:08:09+00:00" in text
    assert "5 / 100" in text and "7 / 100" in text  # unexpected / rows
    assert "late_share 0.07123" in text  # floats to 4 significant digits
    assert "events 100" in text
    assert "Skipped: gold is being written; next run will check" in text
    assert "<h2 id='silver'>" in page and "<a href='#silver'>silver</a>" in page
    # The overall verdict without blocking failures: warning, else passed.
    assert Page(render(settings, "r", STARTED, [passing(), warning_only()])).verdicts[0] == ("warning", "warning")
    assert Page(render(settings, "r", STARTED, [passing(), skipped()])).verdicts[0] == ("passed", "passed")
    assert Page(render(settings, "r", STARTED, [])).verdicts == [("passed", "passed")]


@pytest.mark.parametrize(
    ("results", "label"),
    [([passing(), failing()], "all"), ([failing()], "silver"), ([], "none")],
)
def test_write_report_names_the_page_and_refreshes_latest(
    settings: Settings, results: list[SuiteResult], label: str
) -> None:
    path = write_report(settings, "0123456789abcdef", STARTED, results)
    folder = reports_dir(settings)
    assert folder == settings.home / "reports" / "data-quality"
    assert path == folder / f"20240506T070809-{label}-01234567.html"
    assert path.read_text(encoding="utf-8") == render(settings, "0123456789abcdef", STARTED, results)
    assert (folder / "latest.html").read_bytes() == path.read_bytes()
    assert sorted(p.name for p in folder.iterdir()) == sorted([path.name, "latest.html"])  # no partial left


def test_latest_is_the_newest_page(settings: Settings) -> None:
    first = write_report(settings, "aaaaaaaa11", STARTED, [passing()])
    second = write_report(settings, "bbbbbbbb22", STARTED.replace(hour=9), [failing()])
    assert first != second and first.exists()
    latest = (reports_dir(settings) / "latest.html").read_text(encoding="utf-8")
    assert latest == second.read_text(encoding="utf-8")
    assert re.search(r"Run bbbbbbbb22", latest)
