"""The data-quality report: one self-contained HTML page per validation run (styles inline, no CDN),
under ``LAKEHOUSE_HOME/reports/data-quality/``, plus ``latest.html``, a copy of the newest."""

import shutil
from datetime import datetime
from html import escape
from pathlib import Path
from typing import Any

from expectations.validation import SuiteResult, to_json
from warehouse.settings import Settings

_STYLE = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 72rem;
       color: #1d2433; padding: 0 1rem; }
h1 { font-size: 1.5rem; margin-bottom: .2rem; } h2 { font-size: 1.15rem; margin: 2rem 0 .4rem; }
.meta { color: #5b6478; } .verdict { font-weight: 600; padding: .1rem .5rem; border-radius: .3rem; }
.passed { background: #dff5e3; color: #145c26; } .failed { background: #fde2e1; color: #8a1c17; }
.warning { background: #fff1cc; color: #7a5300; } .skipped { background: #e8eaef; color: #3c4456; }
table { border-collapse: collapse; width: 100%; margin: .4rem 0 1rem; }
th, td { text-align: left; vertical-align: top; border-bottom: 1px solid #e3e6ec; padding: .35rem .5rem; }
th { background: #f4f5f8; font-weight: 600; } code { font-size: 12.5px; }
td.examples code { display: block; white-space: pre-wrap; word-break: break-all; }
"""


def reports_dir(settings: Settings) -> Path:
    return settings.reports_dir / "data-quality"


def write_report(settings: Settings, run_id: str, started_at: datetime, results: list[SuiteResult]) -> Path:
    """Write the run's page and refresh ``latest.html``; returns the run's page."""
    folder = reports_dir(settings)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = started_at.strftime("%Y%m%dT%H%M%S")
    label = "all" if len(results) > 1 else (results[0].suite if results else "none")
    path = folder / f"{stamp}-{label}-{run_id[:8]}.html"
    temp = folder / f".{path.name}.partial"
    temp.write_text(render(settings, run_id, started_at, results), encoding="utf-8")
    temp.replace(path)
    latest = folder / ".latest.html.partial"
    shutil.copyfile(path, latest)
    latest.replace(folder / "latest.html")
    return path


def render(settings: Settings, run_id: str, started_at: datetime, results: list[SuiteResult]) -> str:
    blocking = sum(len(r.blocking_failures) for r in results)
    overall = "failed" if blocking else ("warning" if any(r.warnings for r in results) else "passed")
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        "<title>Lakehouse data quality</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Data quality: <span class='verdict {overall}'>{overall}</span></h1>",
        f"<p class='meta'>Run {escape(run_id)} · started {escape(started_at.isoformat(timespec='seconds'))} · "
        f"home {escape(str(settings.home))}</p>",
        "<table><tr><th>suite</th><th>guards</th><th>verdict</th><th>expectations</th><th>failed</th>"
        "<th>unexpected rows</th><th>seconds</th></tr>",
    ]
    for r in results:
        parts.append(
            f"<tr><td><a href='#{escape(r.suite)}'>{escape(r.suite)}</a></td><td>{escape(r.table_name)}</td>"
            f"<td><span class='verdict {r.verdict}'>{r.verdict}</span></td><td>{len(r.outcomes)}</td>"
            f"<td>{len(r.failed)}</td><td>{r.unexpected_count}</td><td>{r.seconds:.1f}</td></tr>"
        )
    parts.append("</table>")
    for r in results:
        parts.append(_suite_section(r))
    parts.append(
        "<p class='meta'>Blocking (critical) failures make <code>lakehouse validate</code> exit 1 and stop "
        "downstream assets in Dagster; warnings are reported only. Every outcome is also in the table "
        "<code>ops.dq_results</code>.</p></body></html>"
    )
    return "\n".join(parts)


def _suite_section(result: SuiteResult) -> str:
    parts = [
        f"<h2 id='{escape(result.suite)}'>{escape(result.suite)} "
        f"<span class='verdict {result.verdict}'>{result.verdict}</span></h2>",
        f"<p class='meta'>guards {escape(result.table_name)}",
    ]
    if result.figures:
        figures = ", ".join(f"{escape(k)} {escape(_figure(v))}" for k, v in result.figures.items())
        parts.append(f" · {figures}")
    parts.append("</p>")
    if result.skipped:
        parts.append(f"<p>Skipped: {escape(result.skipped)}</p>")
        return "".join(parts)
    parts.append(
        "<table><tr><th>result</th><th>expectation</th><th>column</th><th>severity</th><th>observed</th>"
        "<th>unexpected / rows</th><th>examples</th></tr>"
    )
    for o in sorted(result.outcomes, key=lambda o: (o.success, o.severity != "critical")):
        verdict = "passed" if o.success else ("failed" if o.severity == "critical" else "warning")
        observed = "" if o.observed_value is None else to_json(o.observed_value)
        counts = "" if o.element_count is None else f"{o.unexpected_count or 0} / {o.element_count}"
        examples = "".join(f"<code>{escape(e)}</code>" for e in o.examples)
        error = f"<br><code>{escape(o.error)}</code>" if o.error else ""
        parts.append(
            f"<tr><td><span class='verdict {verdict}'>{verdict}</span></td>"
            f"<td>{escape(o.description)}<br><code>{escape(o.expectation)}</code>{error}</td>"
            f"<td>{escape(o.column or '')}</td><td>{escape(o.severity)}</td><td><code>{escape(observed)}</code></td>"
            f"<td>{counts}</td><td class='examples'>{examples}</td></tr>"
        )
    parts.append("</table>")
    return "".join(parts)


def _figure(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
