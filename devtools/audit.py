"""``make audit``: known vulnerabilities in the locked set (``requirements.lock``, what set-up installs).

Two ways, one report:
- online, ``pip-audit`` (PyPA's auditor, installed once into a venv of its own under ``.cache``, so its
  dependencies never mix with the project's) against PyPI's advisories;
- offline, ``--advisories PATH``: a checkout of an advisory database in OSV's format (PyPA's
  ``advisory-database``, whose ``vulns/<package>/*.yaml`` hold each advisory's affected versions and ranges),
  for machines that reach PyPI's packages but not its advisory service.

Exit status 1 when a locked package is affected by an advisory not accepted in ``docs/security.md``'s
"Accepted advisories" list; every finding is printed either way.
"""

import argparse
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from packaging.version import InvalidVersion, Version

from warehouse.settings import REPO_ROOT

LOCK = REPO_ROOT / "requirements.lock"
ACCEPTED = REPO_ROOT / "docs" / "security.md"
AUDIT_VENV = REPO_ROOT / ".cache" / "audit-venv"
PIP_AUDIT = "pip-audit==2.10.1"


@dataclass(frozen=True)
class Finding:
    package: str
    version: str
    advisory: str
    fixed: tuple[str, ...]
    summary: str


def canonical(name: str) -> str:
    """PyPI's normalized project name (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def locked(lock: Path = LOCK) -> dict[str, str]:
    """The locked set: canonical package name → its pinned version."""
    pins = {}
    for line in lock.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            if not version:
                raise SystemExit(f"audit: {lock.name}: '{line}' is not pinned with ==")
            pins[canonical(name)] = version.strip()
    return pins


def affects(affected: dict, version: str) -> bool:
    """Whether one OSV ``affected`` entry covers ``version``: listed outright, or inside an ECOSYSTEM range
    (events in order: ``introduced`` opens, ``fixed`` closes before, ``last_affected`` closes after)."""
    if version in {str(v) for v in affected.get("versions", [])}:
        return True
    try:
        current = Version(version)
    except InvalidVersion:
        return False
    for span in affected.get("ranges", []):
        if span.get("type") != "ECOSYSTEM":
            continue
        inside = False
        for event in span.get("events", []):
            (kind, bound), *_ = event.items()
            point = Version("0") if str(bound) == "0" else Version(str(bound))
            if kind == "introduced" and current >= point:
                inside = True
            elif (kind == "fixed" and current >= point) or (kind == "last_affected" and current > point):
                inside = False
        if inside:
            return True
    return False


def offline(pins: dict[str, str], database: Path) -> list[Finding]:
    """Match the locked set against an OSV database checkout (``vulns/<package>/*.yaml`` or ``*.json``)."""
    folder = database / "vulns" if (database / "vulns").is_dir() else database
    if not folder.is_dir():
        raise SystemExit(f"audit: no advisory database at {database} (expected a vulns/ folder)")
    by_package = {canonical(path.name): path for path in folder.iterdir() if path.is_dir()}
    findings = []
    for package, version in sorted(pins.items()):
        if package not in by_package:
            continue
        for record_path in sorted(by_package[package].glob("*.*")):
            record = yaml.safe_load(record_path.read_text())  # JSON is YAML too
            if not record or record.get("withdrawn"):
                continue
            for affected in record.get("affected", []):
                if canonical(affected.get("package", {}).get("name", "")) != package or not affects(affected, version):
                    continue
                fixed = tuple(
                    str(event["fixed"])
                    for span in affected.get("ranges", [])
                    for event in span.get("events", [])
                    if "fixed" in event and span.get("type") == "ECOSYSTEM"
                )
                summary = " ".join(str(record.get("summary") or record.get("details", "")).split())[:110]
                findings.append(Finding(package, version, record["id"], fixed, summary))
                break
    return findings


def online(lock: Path) -> list[Finding]:
    """pip-audit over the lock (its own venv; no resolution, the lock is already complete)."""
    tool = AUDIT_VENV / "bin" / "pip-audit"
    if not tool.exists():
        subprocess.run([sys.executable, "-m", "venv", str(AUDIT_VENV)], check=True)
        subprocess.run([str(AUDIT_VENV / "bin" / "pip"), "install", "--quiet", PIP_AUDIT], check=True)
    command = [str(tool), "-r", str(lock), "--no-deps", "--disable-pip", "--progress-spinner", "off", "-f", "json"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode not in (0, 1) or not result.stdout.strip():
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"audit: pip-audit could not reach an advisory service ({last}); use --advisories PATH")
    report = json.loads(result.stdout)
    skipped = [d["name"] for d in report["dependencies"] if d.get("skip_reason")]
    if skipped:
        raise SystemExit(f"audit: pip-audit could not audit {len(skipped)} packages (e.g. {skipped[0]}): "
                         "its advisory service is out of reach here; use --advisories PATH")  # fmt: skip
    return [
        Finding(canonical(d["name"]), d["version"], v["id"], tuple(v.get("fix_versions", [])), v.get("description", ""))
        for d in report["dependencies"]
        for v in d.get("vulns", [])
    ]


def accepted() -> set[str]:
    """Advisory ids recorded as accepted (with the reason) in docs/security.md's list."""
    if not ACCEPTED.exists():
        return set()
    text = ACCEPTED.read_text()
    section = text.split("## Accepted advisories", 1)[1] if "## Accepted advisories" in text else ""
    return set(re.findall(r"^- \*\*([A-Z]+-[\w-]+)\*\*", section.split("\n## ", 1)[0], flags=re.M))


def main() -> None:
    parser = argparse.ArgumentParser(description="Known vulnerabilities in requirements.lock.")
    parser.add_argument("--advisories", type=Path, help="an OSV advisory database checkout (offline)")
    parser.add_argument("--lock", type=Path, default=LOCK, help="the locked set to audit")
    args = parser.parse_args()
    pins = locked(args.lock)
    findings = offline(pins, args.advisories) if args.advisories else online(args.lock)
    source = f"offline database {args.advisories}" if args.advisories else "pip-audit (PyPI's advisories)"
    print(f"audited {len(pins)} locked packages against {source}")
    ok = accepted()
    open_findings = [f for f in findings if f.advisory not in ok]
    for finding in findings:
        state = "accepted" if finding.advisory in ok else "OPEN"
        fixed = ", ".join(finding.fixed) or "no fix"
        pinned = f"{finding.package}=={finding.version}"
        print(f"  {state:8s} {pinned}  {finding.advisory}  fixed in {fixed}  {finding.summary}")
    print(f"{len(findings)} findings, {len(open_findings)} open")
    sys.exit(1 if open_findings else 0)


if __name__ == "__main__":
    main()
