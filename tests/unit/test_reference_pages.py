"""The docs site's generated reference pages (``cli.reference``) are up to date and say what the code says."""

import re
from pathlib import Path

import pytest

from cli import reference
from warehouse.settings import REPO_ROOT

PAGES = (reference.COMMANDS_PAGE, reference.SETTINGS_PAGE, reference.TABLES_PAGE, reference.BENCHMARKS_PAGE)


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return reference.pages()


def section(text: str, heading: str) -> str:
    """The text under ``heading`` (a whole heading line) up to the next heading of the same level or higher."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    assert heading in lines, f"no heading {heading!r}"
    start = lines.index(heading) + 1
    end = next(
        (i for i in range(start, len(lines)) if re.match(rf"#{{1,{level}}} ", lines[i])),
        len(lines),
    )
    return "\n".join(lines[start:end])


def test_every_page_is_generated(generated: dict[str, str]) -> None:
    assert tuple(generated) == PAGES
    for path, text in generated.items():
        assert text.startswith(reference.HEADER + "\n"), path


@pytest.mark.parametrize("path", PAGES)
def test_page_on_disk_is_the_generated_one(generated: dict[str, str], path: str) -> None:
    on_disk = REPO_ROOT / path
    assert on_disk.is_file(), f"{path} is missing: run `{reference.COMMAND}` to generate it"
    assert on_disk.read_text(encoding="utf-8") == generated[path], (
        f"{path} is stale: run `{reference.COMMAND}` to regenerate it"
    )


def test_pages_do_not_depend_on_the_environment(
    generated: dict[str, str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The tests' own environment (tests/conftest.py selects one pipeline) or a user's changes nothing."""
    monkeypatch.setenv("LAKEHOUSE_PIPELINES", "readings")
    monkeypatch.setenv("LAKEHOUSE_WINDOW_MINUTES", "10")
    monkeypatch.setenv("LAKEHOUSE_GOLD_OUTPUTS", "none")
    monkeypatch.setenv("LAKEHOUSE_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "40")
    assert reference.pages() == generated


def test_pages_hold_no_machine_path(generated: dict[str, str]) -> None:
    for path, text in generated.items():
        assert str(REPO_ROOT) not in text, path
        if len(Path.home().parts) > 1:
            assert not re.search(re.escape(str(Path.home())) + r"(/|\b)", text), path


def test_commands_page_has_every_command_and_its_options(generated: dict[str, str]) -> None:
    text = generated[reference.COMMANDS_PAGE]
    run = section(text, "### `lakehouse run`")
    assert "lakehouse run [OPTIONS]" in run
    assert re.search(r"^\| `--once` \| flag \|", run, re.MULTILINE)
    assert "`--pipeline`, `-p`" in run
    for group, commands in {
        "kafka": "up down status",
        "cluster": "up down status",
        "postgres": "up down status",
    }.items():
        assert f"### `lakehouse {group}`" in text
        for command in commands.split():
            assert f"#### `lakehouse {group} {command}`" in text
    assert "#### `lakehouse pipeline new`" in text
    assert "| `TABLE` | text | required |" in section(text, "### `lakehouse show`")


def test_settings_page_has_defaults_rules_and_comments(generated: dict[str, str]) -> None:
    text = generated[reference.SETTINGS_PAGE]
    (row,) = [line for line in text.splitlines() if line.startswith("| `LAKEHOUSE_WINDOW_MINUTES` |")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1:4] == ["whole number", "`5` *(spec)*", "must be a positive whole number"]
    assert "| `LAKEHOUSE_JARS_DIR` | path | `<repo>/.cache/jars` |" in text
    # A ``#:`` comment above a field is its description.
    assert "run in a thread of their own at this added CPU niceness" in section(text, "## Streams (`StreamSettings`)")
    assert "`LAKEHOUSE_DAGSTER_PG_PASSWORD`" in section(text, "## Other variables")


def test_tables_page_has_both_pipelines_and_the_shared_tables(generated: dict[str, str]) -> None:
    text = generated[reference.TABLES_PAGE]
    spend = section(text, "### `gold.user_spend_5m`")
    assert re.search(r"^\| `window_start` \| `timestamp` \| no \|", spend, re.MULTILINE)
    assert "key `user_id`, `window_start`" in spend
    assert "### `gold.readings_1m`" in section(text, "## Pipeline `readings`")
    ops = section(text, "## Operations tables (`ops`)")
    assert "`ops.readings_stream_progress` (readings)" in section(ops, "### `ops.stream_progress`")
    assert "### `ops.watermarks`" not in section(text, "## Pipeline `purchases`")


def test_benchmarks_page_shows_the_summary_and_every_plot(generated: dict[str, str]) -> None:
    text = generated[reference.BENCHMARKS_PAGE]
    summary = (REPO_ROOT / "bench" / "results" / "SUMMARY.md").read_text(encoding="utf-8")
    first_row = next(line for line in summary.splitlines() if line.startswith("| ") and "---" not in line)
    assert first_row in text
    plots = sorted(p.name for p in (REPO_ROOT / "bench" / "results").glob("*.png"))
    assert re.findall(r"!\[[^\]]*\]\(benchmarks/([^)]+)\)", text) == plots
