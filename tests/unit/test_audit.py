"""``make audit``'s offline matcher: OSV advisories (PyPA's format) against the locked set, worked out by
hand from OSV's rules: a version listed outright is affected; an ECOSYSTEM range opens at ``introduced``,
closes at ``fixed`` (exclusive) or after ``last_affected``; withdrawn advisories and other packages are not."""

from pathlib import Path

import pytest
import yaml

from devtools import audit
from devtools.audit import affects, canonical, locked, offline


def record(identifier: str, package: str, *events: dict, versions: tuple[str, ...] = (), **more: object) -> dict:
    ranges = [{"type": "ECOSYSTEM", "events": list(events)}] if events else []
    entry = {"package": {"name": package, "ecosystem": "PyPI"}, "ranges": ranges, "versions": list(versions)}
    return {"id": identifier, "summary": f"{identifier} summary", "affected": [entry], **more}


@pytest.mark.parametrize(
    ("events", "version", "expected"),
    [
        (({"introduced": "0"}, {"fixed": "2.31.0"}), "2.30.9", True),
        (({"introduced": "0"}, {"fixed": "2.31.0"}), "2.31.0", False),
        (({"introduced": "2.3.0"}, {"fixed": "2.31.0"}), "2.2.9", False),
        (({"introduced": "1.0"}, {"last_affected": "1.4"}), "1.4", True),
        (({"introduced": "1.0"}, {"last_affected": "1.4"}), "1.4.1", False),
        (({"introduced": "1.0"}, {"fixed": "1.2"}, {"introduced": "2.0"}), "3.0", True),
        (({"introduced": "1.0"}, {"fixed": "1.2"}, {"introduced": "2.0"}), "1.5", False),
    ],
)
def test_ecosystem_ranges(events: tuple[dict, ...], version: str, expected: bool) -> None:
    assert affects(record("X", "p", *events)["affected"][0], version) is expected


def test_listed_versions_and_git_ranges() -> None:
    listed = record("X", "p", versions=("0.9",))["affected"][0]
    assert affects(listed, "0.9") and not affects(listed, "0.9.1")
    git_only = {"ranges": [{"type": "GIT", "events": [{"introduced": "0"}, {"fixed": "abc123"}]}]}
    assert not affects(git_only, "1.0"), "a commit range says nothing about a release"


@pytest.fixture
def database(tmp_path: Path) -> Path:
    advisories = {
        "Requests": [record("PYSEC-1", "requests", {"introduced": "2.3.0"}, {"fixed": "2.31.0"})],
        "jinja2": [
            record("PYSEC-2", "Jinja2", {"introduced": "0"}, {"fixed": "3.1.3"}),
            record("PYSEC-3", "jinja2", {"introduced": "0"}, withdrawn="2024-01-01T00:00:00Z"),
        ],
        "six": [record("PYSEC-4", "six", {"introduced": "0"}, {"fixed": "1.0"})],
    }
    for package, records in advisories.items():
        folder = tmp_path / "db" / "vulns" / package
        folder.mkdir(parents=True)
        for entry in records:
            (folder / f"{entry['id']}.yaml").write_text(yaml.safe_dump(entry))
    return tmp_path / "db"


def test_the_locked_set_against_a_database(database: Path, tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text("# comment\nrequests==2.30.0\nJinja2==3.1.2\nsix==1.17.0\nurllib3==2.8.0\n")
    pins = locked(lock)
    assert pins == {"requests": "2.30.0", "jinja2": "3.1.2", "six": "1.17.0", "urllib3": "2.8.0"}
    found = offline(pins, database)
    assert [(f.package, f.advisory, f.fixed) for f in found] == [
        ("jinja2", "PYSEC-2", ("3.1.3",)),
        ("requests", "PYSEC-1", ("2.31.0",)),
    ]


def test_an_unpinned_line_and_a_missing_database_are_one_line(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text("requests>=2\n")
    with pytest.raises(SystemExit, match="'requests>=2' is not pinned with =="):
        locked(lock)
    with pytest.raises(SystemExit, match="no advisory database at"):
        offline({"requests": "2.30.0"}, tmp_path / "nowhere")


def test_accepted_advisories_are_reported_but_do_not_fail(
    database: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text("requests==2.30.0\n")
    accepted = tmp_path / "security.md"
    monkeypatch.setattr(audit, "ACCEPTED", accepted)
    monkeypatch.setattr("sys.argv", ["audit", "--advisories", str(database), "--lock", str(lock)])
    with pytest.raises(SystemExit) as exit_:
        audit.main()
    assert exit_.value.code == 1 and "OPEN     requests==2.30.0  PYSEC-1  fixed in 2.31.0" in capsys.readouterr().out
    accepted.write_text("# Security\n\n## Accepted advisories\n\n- **PYSEC-1** (requests): no proxy is used.\n")
    with pytest.raises(SystemExit) as exit_:
        audit.main()
    assert exit_.value.code == 0 and "accepted requests==2.30.0" in capsys.readouterr().out


def test_the_project_lock_is_complete_and_pinned() -> None:
    pins = locked()
    for package in ("pyspark", "delta-spark", "dagster", "great-expectations", "deltalake", "s3fs"):
        assert canonical(package) in pins, package
