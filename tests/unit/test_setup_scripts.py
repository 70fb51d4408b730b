"""What a newcomer's `make demo` installs: nothing into the system (issue 49). The Debian packages only the
tests need are scripts/system-packages.sh's, called by `make test` and `lakehouse postgres up`, never by the
demo's path."""

import os
import subprocess
from pathlib import Path

from warehouse.settings import REPO_ROOT

#: What would install into the system, stubbed on PATH: each records its call and fails.
INSTALLERS = ("apt-get", "apt", "sudo", "dpkg", "system-packages.sh")


def _stubbed(tmp_path: Path) -> tuple[dict[str, str], Path]:
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    for name in INSTALLERS:
        stub = bin_dir / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> {calls}\nexit 1\n')
        stub.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}, calls


def _planned(target: str) -> str:
    """What ``make -n target`` would run (outside any ``make`` this test runs under)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    planned = subprocess.run(["make", "-n", target], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=True)
    return planned.stdout


def test_make_demo_runs_the_set_up_and_the_demo_and_nothing_else() -> None:
    planned = _planned("demo").split("\n")[:-1]
    assert planned == ["bash scripts/setup.sh --without-class-archive", "bash scripts/demo.sh"]
    tests = _planned("test")
    assert "bash scripts/system-packages.sh chromium postgresql" in tests.splitlines()


def test_the_set_up_installs_no_system_package(tmp_path: Path) -> None:
    """The set-up run as the demo runs it (its venv, jars and archive already there, as after `make test`'s own
    set-up): no installer is called, with apt-get, sudo and dpkg stubbed to record any call."""
    env, calls = _stubbed(tmp_path)
    demo_set_up = ["bash", "scripts/setup.sh", "--without-class-archive"]
    done = subprocess.run(demo_set_up, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1].startswith("setup: ready"), done.stdout
    assert not calls.exists(), calls.read_text()
    for script in ("setup.sh", "demo.sh"):
        code = [line for line in (REPO_ROOT / "scripts" / script).read_text().splitlines() if not line.startswith("#")]
        assert not [line for line in code if "apt-get" in line or "system-packages" in line], script


def test_system_packages_installs_only_what_is_missing_and_names_an_unknown_one(tmp_path: Path) -> None:
    env, calls = _stubbed(tmp_path)
    script = str(REPO_ROOT / "scripts" / "system-packages.sh")
    present = [name for name in ("chromium", "postgresql") if _installed(name)]
    done = subprocess.run(["bash", script, *present], env=env, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "" and not calls.exists()
    unknown = subprocess.run(["bash", script, "firefox"], env=env, capture_output=True, text=True)
    assert unknown.returncode == 1 and not calls.exists()
    assert unknown.stderr == "setup: unknown package 'firefox' (known: chromium, postgresql)\n"


def _installed(package: str) -> bool:
    if package == "chromium":
        return Path("/usr/bin/chromium").exists()
    return any(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
