"""A stream the code has never seen, declared only as the docs say (docs/pipelines.md), beside the purchases
stream in one home: generated lines with duplicates, invalid lines, disorder and late events, its gold exact
against an oracle computed apart from the lakehouse (the spec's rules by hand in Python, the windows by DuckDB
over the same lines) after `run`, after `reconcile` and after a `replay` of it alone, while the purchases
pipeline runs beside it and stays exact against its own plain-Python reference.

The oracle's late events follow the contract's rules: the watermark before a batch is the newest event time of
the first arrivals of the batches before it minus the delay (it never moves back); an event is late when its
window's end plus the allowed lateness is at or behind that watermark. Each round of lines is one landing file,
read as one micro-batch.
"""

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import duckdb
import pytest
from deltalake import DeltaTable

from devtools.synthetic import StreamSpec, generate_lines
from runtime.pipelines import reconcile_all, run_all_once
from runtime.replay import run_replay
from runtime.sources.landing import ingest_file
from tests import reference
from warehouse.catalog import all_tables, catalog_name, tumbling_table
from warehouse.inspect import catalog_states
from warehouse.settings import Settings
from warehouse.spec_changes import SpecChangeError

pytestmark = pytest.mark.xdist_group("declared_pipelines")

SPEC = """\
name: shipments
description: Parcel scans at three warehouses.
fields:
  scan_id: {type: string, required: true, max_length: 40}
  warehouse: {type: string, required: true, allowed: [ams, ber, cdg]}
  scanned_at: {type: timestamp, required: true}
  weight_kg: {type: "decimal(10,3)", required: true, min: 0}
  fee: {type: "decimal(8,2)"}
  carrier: {type: string, pattern: "[A-Z]{2,4}"}
id: scan_id
time: {field: scanned_at, formats: [iso8601]}
keys: [warehouse]
measures:
  - {name: total_weight, fn: sum, field: weight_kg}
  - {name: heaviest, fn: max, field: weight_kg}
  - {name: lightest, fn: min, field: weight_kg}
  - {name: fees, fn: count, field: fee}
  - {name: avg_fee, fn: avg, field: fee}
windows:
  tumbling: 10m
  hopping: {size: 30m, slide: 10m}
  global: {every: 5}
  watermark: {delay: 5m}
  allowed_lateness: 2m
"""
DELAY, LATENESS, WINDOW = timedelta(minutes=5), timedelta(minutes=2), timedelta(minutes=10)
T0 = datetime(2024, 3, 1, 8, 0, tzinfo=UTC)
WAREHOUSES = ("ams", "ber", "cdg")
INVALID = [
    "not json at all",
    '{"scan_id": "x1", "scanned_at": "2024-03-01T08:00:00Z", "weight_kg": 1}',  # no warehouse
    '{"scan_id": "x2", "warehouse": "lhr", "scanned_at": "2024-03-01T08:00:00Z", "weight_kg": 1}',
    '{"scan_id": "x3", "warehouse": "ams", "scanned_at": "2024-03-01T08:00:00Z", "weight_kg": -0.5}',
    '{"scan_id": "x4", "warehouse": "ams", "scanned_at": "2024-03-01T08:00:00Z", "weight_kg": 1.2345}',
    '{"scan_id": "x5", "warehouse": "ams", "scanned_at": "2024-03-01T08:00:00Z", "weight_kg": 1, "fee": "3.50"}',
    '{"scan_id": "x6", "warehouse": "ams", "scanned_at": "2024-03-01T08:00:00Z", "weight_kg": 1, "carrier": "dhl"}',
    '{"scan_id": "x7", "warehouse": "ams", "scanned_at": 1709280000000, "weight_kg": 1}',  # epoch: not declared
    '{"warehouse": "ams", "scanned_at": "2024-03-01T08:00:00Z", "weight_kg": 1}',  # no id
]


def _stamp(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def shipment_rounds(seed: int = 11) -> list[list[str]]:
    """Three rounds of lines: on-time events with disorder, duplicates (some conflicting), invalid lines, and
    in the later rounds events far behind the watermark (late)."""
    rng = random.Random(seed)
    rounds: list[list[str]] = []
    sent: list[dict] = []
    serial = 0
    for k in range(3):
        lines = []
        base = T0 + timedelta(minutes=40 * k)
        for _ in range(45):
            serial += 1
            moment = base + timedelta(seconds=rng.randint(0, 40 * 60 - 1) + rng.randint(-180, 0))
            event = {
                "scan_id": f"s{serial:04d}",
                "warehouse": rng.choice(WAREHOUSES),
                "scanned_at": _stamp(moment),
                "weight_kg": float(Decimal(rng.randint(0, 50_000)) / 1000),
            }
            if rng.random() < 0.6:
                event["fee"] = float(Decimal(rng.randint(100, 9_999)) / 100)
            if rng.random() < 0.5:
                event["carrier"] = rng.choice(("DHL", "UPS", "GLS"))
            lines.append(json.dumps(event))
            sent.append(event)
        if k:
            for i in range(6):  # far behind the watermark the previous rounds left: late
                serial += 1
                moment = base - timedelta(minutes=35) - timedelta(minutes=3 * i)
                late = {"scan_id": f"s{serial:04d}", "warehouse": WAREHOUSES[i % 3], "scanned_at": _stamp(moment)}
                lines.append(json.dumps({**late, "weight_kg": 2.5 + i, "fee": 4.25}))
        for earlier in rng.sample(sent[:-10], 5):  # redeliveries; some change the payload
            changed = dict(earlier, weight_kg=99.999) if rng.random() < 0.4 else earlier
            lines.append(json.dumps(changed))
        lines += rng.sample(INVALID, 3)
        rng.shuffle(lines)
        rounds.append(lines)
    return rounds


def _number(value: object) -> Decimal | None:
    """A JSON number as an exact decimal (parsed with ``parse_float=Decimal``); booleans are not numbers."""
    return Decimal(value) if isinstance(value, int | Decimal) and not isinstance(value, bool) else None


def _fits(value: Decimal, precision: int, scale: int) -> bool:
    exponent = value.normalize().as_tuple().exponent
    return -exponent <= scale and abs(value) < Decimal(10) ** (precision - scale)


def valid_shipment(line: str) -> dict | None:
    """The spec's rules, by hand: the event when the line is valid, else None."""
    try:
        doc = json.loads(line, parse_float=Decimal)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    scan_id, warehouse, scanned_at = doc.get("scan_id"), doc.get("warehouse"), doc.get("scanned_at")
    if not isinstance(scan_id, str) or not scan_id.strip() or len(scan_id) > 40:
        return None
    if warehouse not in WAREHOUSES or not isinstance(scanned_at, str):
        return None
    weight = _number(doc.get("weight_kg"))
    if weight is None or weight < 0 or not _fits(weight, 10, 3):
        return None
    fee = doc.get("fee")
    if fee is not None and ((fee := _number(fee)) is None or not _fits(fee, 8, 2)):
        return None
    carrier = doc.get("carrier")
    if carrier is not None and not (isinstance(carrier, str) and carrier.isupper() and 2 <= len(carrier) <= 4):
        return None
    moment = datetime.fromisoformat(scanned_at.replace("Z", "+00:00"))
    return {"scan_id": scan_id, "warehouse": warehouse, "at": moment, "weight": weight, "fee": fee, "carrier": carrier}


def oracle_events(rounds: list[list[str]]) -> tuple[list[dict], int, int]:
    """(first arrivals with their ``late`` flag, quarantined lines, duplicates) by the contract's rules."""
    seen: set[str] = set()
    events, quarantined, duplicates = [], 0, 0
    watermark: datetime | None = None
    newest: datetime | None = None
    for lines in rounds:
        batch = []
        for line in lines:
            event = valid_shipment(line)
            if event is None:
                quarantined += 1
            elif event["scan_id"] in seen:
                duplicates += 1
            else:
                seen.add(event["scan_id"])
                batch.append(event)
        for event in batch:
            start = datetime.fromtimestamp(event["at"].timestamp() // 600 * 600, UTC)
            event["late"] = watermark is not None and start + WINDOW + LATENESS <= watermark
        events += batch
        if batch:
            newest = max([event["at"] for event in batch] + ([newest] if newest else []))
            watermark = max(watermark, newest - DELAY) if watermark else newest - DELAY
    return events, quarantined, duplicates


def _average(total: Decimal | None, count: int) -> Decimal | None:
    return (total / count).quantize(Decimal("0.000001"), ROUND_HALF_UP) if count else None


def oracle_windows(events: list[dict], size: int, slide: int) -> dict:
    """(warehouse, window start) → measures, by DuckDB over the events: windows of ``size`` minutes starting
    every ``slide``."""
    db = duckdb.connect()
    db.execute("SET TimeZone = 'UTC'")
    db.execute(
        "CREATE TABLE e (warehouse VARCHAR, scanned TIMESTAMPTZ, weight DECIMAL(10,3), fee DECIMAL(8,2))",
    )
    db.executemany(
        "INSERT INTO e VALUES (?, ?, ?, ?)", [(e["warehouse"], e["at"], e["weight"], e["fee"]) for e in events]
    )
    rows = db.execute(
        f"""
        WITH starts AS (
            SELECT *, unnest(generate_series(
                time_bucket(INTERVAL '{slide} minutes', scanned) - INTERVAL '{size - slide} minutes',
                time_bucket(INTERVAL '{slide} minutes', scanned), INTERVAL '{slide} minutes')) AS start
            FROM e)
        SELECT warehouse, start, sum(weight), max(weight), min(weight), count(fee), sum(fee), count(*)
        FROM starts GROUP BY warehouse, start
        """
    ).fetchall()
    return {
        (w, start.astimezone(UTC)): (total, heaviest, lightest, fees, _average(fee_sum, fees), n)
        for w, start, total, heaviest, lightest, fees, fee_sum, n in rows
    }


def gold_windows(settings: Settings, table) -> dict:
    rows = DeltaTable(str(table.path(settings))).to_pyarrow_table().to_pylist()
    return {
        (r["warehouse"], r["window_start"].replace(tzinfo=UTC)): (
            r["total_weight"],
            r["heaviest"],
            r["lightest"],
            r["fees"],
            r["avg_fee"],
            r["event_count"],
        )
        for r in rows
    }


def _ids(settings: Settings, table) -> list:
    return DeltaTable(str(table.path(settings))).to_pyarrow_table().to_pylist()


@pytest.fixture
def lakehouse(spark, tmp_path: Path) -> tuple[Settings, Settings, Settings]:
    """A home with every declared pipeline: the purchases stream (its code outputs left out: other tests run
    them), the shipped readings and ``shipments``, declared in a folder of the user's."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "shipments.yaml").write_text(SPEC)
    env = {**os.environ, "LAKEHOUSE_HOME": str(tmp_path / "home"), "LAKEHOUSE_PIPELINES_DIR": str(specs)}
    env.pop("LAKEHOUSE_PIPELINES", None)
    root = replace(Settings.from_env(env), gold_outputs=frozenset())
    purchases, shipments = root.pipelines(("purchases", "shipments"))
    for view in (purchases, shipments):
        view.ensure_home()
    return root, purchases, shipments


def test_a_declared_stream_is_exact_beside_the_purchases_stream(spark, lakehouse, tmp_path: Path) -> None:
    root, purchases, shipments = lakehouse
    assert [view.spec.name for view in root.pipelines()] == ["purchases", "readings", "shipments"]
    views = [purchases, shipments]
    rounds = shipment_rounds()
    purchase_lines = list(generate_lines(StreamSpec(events=240, users=12, late_fraction=0.05, seed=5)))
    purchase_rounds = [purchase_lines[:120], purchase_lines[120:]]
    for k, lines in enumerate(rounds):
        (tmp_path / f"shipments-{k}.jsonl").write_text("\n".join(lines) + "\n")
        ingest_file(shipments, tmp_path / f"shipments-{k}.jsonl")
        if k < len(purchase_rounds):
            (tmp_path / f"purchases-{k}.jsonl").write_text("\n".join(purchase_rounds[k]) + "\n")
            ingest_file(purchases, tmp_path / f"purchases-{k}.jsonl")
        run_all_once(spark, views)

    events, quarantined, duplicates = oracle_events(rounds)
    late = [e for e in events if e["late"]]
    assert len(late) >= 6 and quarantined == 9 and duplicates == 15
    tumbling = tumbling_table(shipments)
    assert catalog_name(shipments, tumbling) == "gold.shipments_10m"
    states = {s.name: s for s in catalog_states(root, ("shipments",))}
    assert states["silver.shipments_quarantine"].rows == quarantined
    assert states["silver.shipments_duplicates"].rows == duplicates
    assert states["silver.shipments_events"].rows == len(events)
    # After the run: every window of the on-time events exact; the late ones set aside, not counted.
    assert gold_windows(shipments, tumbling) == oracle_windows([e for e in events if not e["late"]], 10, 10)
    late_table = next(t for t in all_tables(shipments) if t.short_name == "late_events")
    assert sorted(r["scan_id"] for r in _ids(shipments, late_table)) == sorted(e["scan_id"] for e in late)

    reconcile_all(spark, views)
    expected = oracle_windows(events, 10, 10)
    assert gold_windows(shipments, tumbling) == expected
    hopping = next(t for t in all_tables(shipments) if t.short_name == "shipments_30m_hopping")
    assert gold_windows(shipments, hopping) == oracle_windows(events, 30, 10)
    per_warehouse = defaultdict(list)
    for event in events:
        per_warehouse[event["warehouse"]].append(event)
    global_table = next(t for t in all_tables(shipments) if t.short_name == "shipments_global")
    global_rows = {r["warehouse"]: r for r in _ids(shipments, global_table)}
    assert {w: (r["event_count"], r["total_weight"], r["firings"]) for w, r in global_rows.items()} == {
        w: (len(es), sum(e["weight"] for e in es), len(es) // 5) for w, es in per_warehouse.items()
    }
    purchases_gold = {
        (r["user_id"], r["window_start"].replace(tzinfo=UTC)): (r["total_amount"], r["event_count"])
        for r in _ids(purchases, tumbling_table(purchases))
    }
    assert purchases_gold == {
        (user, start.astimezone(UTC)): totals
        for (user, start), totals in reference.window_totals(purchase_lines).items()
    }

    # Nothing new: a second reconcile and run change no table of either pipeline (invariant 3).
    versions = {s.name: s.version for s in catalog_states(root, ("purchases", "shipments"))}
    reconcile_all(spark, views)
    run_all_once(spark, views)
    gold_names = [n for n in versions if n.startswith("gold.") and "corrections" not in n]
    after = {s.name: s.version for s in catalog_states(root, ("purchases", "shipments"))}
    assert {n: after[n] for n in gold_names} == {n: versions[n] for n in gold_names}

    # A replay of shipments alone rebuilds it from bronze, equal to the reconciled tables; purchases untouched.
    purchases_versions = {s.name: s.version for s in catalog_states(root, ("purchases",))}
    run_replay(spark, shipments)
    assert gold_windows(shipments, tumbling) == expected
    assert gold_windows(shipments, hopping) == oracle_windows(events, 30, 10)
    assert {s.name: s.version for s in catalog_states(root, ("purchases",))} == purchases_versions

    # A spec change that breaks the stored state (the tumbling size) is refused in one line while the pipeline
    # has data; a rebuild under the new spec (replay --accept-rebuild) sets the old tables aside and is exact.
    specs = shipments.pipelines_dir
    wider = SPEC.replace("tumbling: 10m", "tumbling: 20m").replace("{size: 30m, slide: 10m}", "{size: 60m, slide: 20m}")
    (specs / "shipments.yaml").write_text(wider)
    changed = Settings.from_env({**os.environ, "LAKEHOUSE_HOME": str(root.home), "LAKEHOUSE_PIPELINES_DIR": str(specs)})
    rebuilt = replace(changed, gold_outputs=frozenset()).for_pipeline("shipments")
    with pytest.raises(SpecChangeError, match=r"^pipeline shipments: the tumbling window changed from '10m' to '20m'"):
        run_all_once(spark, [rebuilt])
    run_replay(spark, rebuilt, accept_rebuild=True)
    assert gold_windows(rebuilt, tumbling_table(rebuilt)) == oracle_windows(events, 20, 20)
    assert tumbling_table(rebuilt).name == "gold.shipments_20m"
    assert any((rebuilt.home / "retired").iterdir())


def _rows(path: Path) -> list[dict]:
    try:
        return DeltaTable(str(path)).to_pyarrow_table().to_pylist()
    except Exception:
        return []


@pytest.mark.system
def test_run_continuous_carries_every_pipeline_and_validate_reports_each(tmp_path: Path) -> None:
    """`lakehouse run --continuous` with both shipped pipelines: each one's lines reach its gold (every valid
    first arrival in a window or set aside as late), `status` shows each one's streams, SIGTERM stops both
    cleanly; `validate` then passes with a section per pipeline in one report."""
    from devtools.spec_lines import SpecStream, spec_lines

    home = tmp_path / "home"
    lakehouse = str(Path(sys.executable).parent / "lakehouse")
    env = {**os.environ, "LAKEHOUSE_HOME": str(home), "LAKEHOUSE_PIPELINES": "all", "LAKEHOUSE_GOLD_OUTPUTS": "none"}
    env.pop("LAKEHOUSE_PIPELINES_DIR", None)
    root = Settings.from_env(env)
    purchases, readings = root.pipelines()
    purchase_lines = list(generate_lines(StreamSpec(events=300, users=6, late_fraction=0.0, seed=3)))
    reading_lines = list(spec_lines(readings.spec, SpecStream(events=300, keys=5, late_fraction=0.0, seed=3)))
    for view, name, lines in ((purchases, "p.jsonl", purchase_lines), (readings, "r.jsonl", reading_lines)):
        (tmp_path / name).write_text("\n".join(lines) + "\n")
        view.ensure_home()
        ingest_file(view, tmp_path / name)
    readings_gold = readings.tables_dir / "gold" / "readings_1m"
    purchases_gold = purchases.tables_dir / "gold" / "user_spend_5m"
    stream = subprocess.Popen([lakehouse, "run", "--continuous"], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and stream.poll() is None:
            counted = [sum(r["event_count"] for r in _rows(path)) for path in (purchases_gold, readings_gold)]
            if counted == [300, 300]:
                break
            time.sleep(1)
        assert stream.poll() is None, stream.stderr.read()[-2000:]
        assert counted == [300, 300]
        status = subprocess.run(
            [lakehouse, "status", "--json"], env=env, capture_output=True, text=True, timeout=120, check=True
        )
        streams = {s["stream"]: s for s in json.loads(status.stdout)}
        assert {"bronze_events", "readings:bronze_events", "readings:reconcile_late_events"} <= set(streams)
        assert streams["readings:bronze_events"]["running"] and streams["bronze_events"]["running"]
    finally:
        stream.send_signal(signal.SIGTERM)
        code = stream.wait(timeout=300)
    assert code == 0, stream.stderr.read()[-2000:]
    validated = subprocess.run([lakehouse, "validate", "--json"], env=env, capture_output=True, text=True, timeout=600)
    assert validated.returncode == 0, validated.stderr[-2000:]
    summary = json.loads(validated.stdout)
    suites = [s["suite"] for s in summary["suites"]]
    assert suites[:5] == ["bronze.events", "silver.events", "conservation", "completeness", "freshness"]
    assert suites[5:] == [f"readings: {name}" for name in suites[:5]]
    report = Path(summary["report"]).read_text()
    assert "readings: completeness" in report and "gold.readings_1m" in report
