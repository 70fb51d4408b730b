"""The layout's rules, read from the imports (docs/architecture.md): no import runs up a floor, no circle,
``transforms`` never imports the runtime, ``transforms`` and ``expectations`` never import Dagster, no module
takes another's private name. ``bench`` keeps the same rules: it drives the CLI and Dagster as a user does (as
processes, over HTTP) and takes from the tests only their independent helpers (the reference, the UI's)."""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("warehouse", "transforms", "runtime", "expectations", "devtools", "orchestration", "cli", "bench")

#: Which of the project's packages (or single modules) each package may import, besides itself.
ALLOWED = {
    "warehouse": set(),
    "transforms": {"warehouse"},
    "runtime": {"warehouse", "transforms"},
    "expectations": {"warehouse", "transforms", "runtime.checkpoints"},
    "devtools": {"warehouse", "runtime.sources.kafka_client"},
    "orchestration": {"warehouse", "transforms", "runtime", "expectations", "devtools"},
    "cli": {"warehouse", "transforms", "runtime", "expectations", "devtools"},
    "bench": {"warehouse", "transforms", "runtime", "expectations", "devtools"},
}
#: The tests' modules a benchmark may use: the plain-Python reference and the Dagster UI's helpers.
BENCH_FROM_TESTS = {"tests.reference", "tests.sensor_flow", "tests.ui_harness"}
#: Third-party packages a floor must never import.
FORBIDDEN = {"transforms": {"dagster"}, "expectations": {"dagster"}, "runtime": {"dagster"}, "warehouse": {"dagster"}}

#: The largest a product module may grow (lines).
MAX_LINES = 600


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def imports_of(path: Path) -> set[str]:
    """Every module name an import statement in the file names (function-level imports included)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def project_imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The project's modules the file imports (``from runtime import checkpoints`` names runtime.checkpoints)."""
    return {name for name in imports_of(path) if name in known}


MODULES = modules()


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_runs_up_a_floor(module: str) -> None:
    package = module.split(".")[0]
    allowed = ALLOWED[package]
    wrong = sorted(
        name
        for name in project_imports(MODULES[module], MODULES)
        if name.split(".")[0] != package and not any(name == a or name.startswith(f"{a}.") for a in allowed)
    )
    assert not wrong, f"{module} imports {wrong}; {package} may import only {sorted(allowed)}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("bench.")))
def test_bench_takes_from_the_tests_only_their_helpers(module: str) -> None:
    taken = {name for name in imports_of(MODULES[module]) if name.split(".")[0] == "tests"}
    wrong = sorted(name for name in taken if not any(name == h or name.startswith(f"{h}.") for h in BENCH_FROM_TESTS))
    assert not wrong, f"{module} imports {wrong}; from the tests bench may take only {sorted(BENCH_FROM_TESTS)}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_module_takes_another_modules_private_name(module: str) -> None:
    private = sorted(
        f"{node.module}.{alias.name}"
        for node in ast.walk(ast.parse(MODULES[module].read_text()))
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
        and node.module.split(".")[0] in (*PACKAGES, "tests")
        for alias in node.names
        if alias.name.startswith("_") and not alias.name.startswith("__")
    )  # fmt: skip
    assert not private, f"{module} imports private names {private}"


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.split(".")[0] in FORBIDDEN))
def test_no_dagster_below_orchestration(module: str) -> None:
    third_party = {name.split(".")[0] for name in imports_of(MODULES[module])}
    assert not third_party & FORBIDDEN[module.split(".")[0]], f"{module} imports {third_party & {'dagster'}}"


def test_no_circle_of_imports() -> None:
    """Tarjan's strongly connected components over module-level and function-level imports alike."""
    graph = {
        module: {name for name in project_imports(path, MODULES) if name != module} for module, path in MODULES.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            # A package's __init__ importing its own modules is not a circle between concepts.
            if len(component) > 1:
                circles.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    assert not circles, f"import circles: {circles}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_product_module_over_the_limit(module: str) -> None:
    lines = len(MODULES[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines (at most {MAX_LINES})"


def test_the_rules_see_every_package() -> None:
    """Guards the test itself: a package renamed away would otherwise pass every rule by having no modules."""
    assert {m.split(".")[0] for m in MODULES} == set(PACKAGES)
    assert "runtime.checkpoints" in MODULES and "transforms.gold.propagate" in MODULES and "bench.chaos" in MODULES


#: Modules Spark's Python processes import by name (the stateful processors), with the project's modules they
#: may import: every keyed run pays on the driver for what they import (decision 76).
WORKER_MODULES = {"transforms.keyed_processors": {"transforms.fraud_rules"}}


@pytest.mark.parametrize("module", sorted(WORKER_MODULES))
def test_what_sparks_python_processes_import_stays_lean(module: str) -> None:
    """Followed through the project's modules: only the listed ones, Python's own modules and PySpark."""
    reached, third_party, waiting = set(), set(), [module]
    while waiting:
        name = waiting.pop()
        if name in reached:
            continue
        reached.add(name)
        for imported in imports_of(MODULES[name]):
            top = imported.split(".")[0]
            if imported in MODULES:
                waiting.append(imported)
            elif top not in PACKAGES and top not in sys.stdlib_module_names:
                third_party.add(top)
    assert reached - {module} <= WORKER_MODULES[module], f"{module} reaches {sorted(reached - {module})}"
    assert third_party <= {"pyspark"}, f"{module} imports {sorted(third_party)}"
