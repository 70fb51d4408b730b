#!/usr/bin/env bash
# The demo: one `lakehouse run --continuous` carries two declared pipelines (pipelines/purchases.yaml and
# pipelines/readings.yaml) in one home while files are handed to it with `lakehouse ingest --wait`, which says
# how many seconds after landing each file's lines were in gold.
#  1. The seeds' running example: windows, a far-later event that moves the watermark, a too-late event set
#     aside in silver.late_events.
#  2. Generated streams for both pipelines (duplicates, disorder, late and invalid lines) in two rounds, so the
#     watermark moves between them and far-behind events are set aside; `lakehouse reconcile` beside the
#     running stream folds every late event in, the seeds' among them (its window's second revision).
#  3. Data quality: every suite of both pipelines, which the running stream validates too; then the stream
#     stops and prints what it did.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$(pwd)/.venv/bin:$PATH"
export PYSPARK_PYTHON="$(pwd)/.venv/bin/python"
# A home of the demo's own, emptied first: never the one LAKEHOUSE_HOME names, only a folder in it.
export LAKEHOUSE_HOME="${LAKEHOUSE_HOME:-$(pwd)/.lakehouse}/demo"
scratch=$(mktemp -d)
stream=""
stop_stream() { if [ -n "$stream" ]; then kill -TERM "$stream" 2>/dev/null || true; wait "$stream" 2>/dev/null || true; stream=""; fi; }
trap 'stop_stream; rm -rf "$scratch"' EXIT
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

rm -rf "$LAKEHOUSE_HOME"
mkdir -p "$LAKEHOUSE_HOME"
cat > "$scratch/first.jsonl" <<'JSON'
{"event_id": "a1", "user_id": "A", "event_time": "2024-01-01T10:00:00Z", "amount": 5}
{"event_id": "b1", "user_id": "B", "event_time": "2024-01-01T10:02:00Z", "amount": 3}
{"event_id": "a2", "user_id": "A", "event_time": "2024-01-01T10:04:00Z", "amount": 2}
{"event_id": "b2", "user_id": "B", "event_time": "2024-01-01T10:06:00Z", "amount": 1}
{"event_id": "c1", "user_id": "C", "event_time": "2024-01-01T13:00:00Z", "amount": 4}
JSON
echo '{"event_id": "a3", "user_id": "A", "event_time": "2024-01-01T10:01:00Z", "amount": 1}' > "$scratch/too-late.jsonl"
say "lakehouse run --continuous: both pipelines, in the background"
echo "its output: $LAKEHOUSE_HOME/demo-stream.log"
lakehouse run --continuous > "$LAKEHOUSE_HOME/demo-stream.log" 2>&1 &
stream=$!
lakehouse pipelines
# Part 2's lines, written while the stream starts.
seed="${SEED:-$RANDOM}"
LAKEHOUSE_HOME="$scratch/gen" lakehouse generate --events 5000 --users 40 --rate 2 --files 2 --late 0.03 \
  --start 2024-01-02T00:00:00 --seed "$seed" > /dev/null
LAKEHOUSE_HOME="$scratch/gen" lakehouse generate --pipeline readings --events 3000 --users 8 --rate 2 --files 2 \
  --late 0.03 --start 2024-01-02T00:00:00 --seed "$seed" > /dev/null
purchases=("$scratch"/gen/landing/*.jsonl)
readings=("$scratch"/gen/pipelines/readings/landing/*.jsonl)
# The readings pipeline's first file is handed over at once: the stream's second process takes it (its first,
# cold batch) while the purchases pipeline's critical path warms up and takes the seeds. Its line is shown in 2.
lakehouse ingest --wait 300 --pipeline readings "${readings[0]}" > "$scratch/readings-0.out" 2>&1 &
readings_first=$!

say "1. The seeds' example: A 10:00→5, B 10:02→3, A 10:04→2, B 10:06→1; C 13:00"
echo "   (C at 13:00 moves the watermark past every window above)"
lakehouse ingest --wait 300 "$scratch/first.jsonl"
lakehouse show gold.user_spend_5m
say "Then the too-late event A 10:01→1: its window [10:00, 10:05) closed long ago"
lakehouse ingest --wait 120 "$scratch/too-late.jsonl"
lakehouse show silver.late_events

say "2. Generated streams of both pipelines, two rounds, to the running stream"
lakehouse ingest --wait 300 --pipeline purchases "${purchases[0]}"
wait "$readings_first" || { cat "$scratch/readings-0.out"; exit 1; }
cat "$scratch/readings-0.out"
# The second round: both pipelines' files land at once, as two sources' files would.
lakehouse ingest --wait 300 --pipeline readings "${readings[1]}" &
lakehouse ingest --wait 300 --pipeline purchases "${purchases[1]}"
wait $!
say "lakehouse reconcile: only windows late events touched, (A, 10:00) among them"
lakehouse reconcile
lakehouse show gold.user_spend_5m --limit 4
lakehouse history gold.user_spend_5m --limit 6
lakehouse show gold.readings_1m --limit 2

say "3. Data quality: every suite, both pipelines (exit 1 if a blocking one fails)"
lakehouse validate
say "All input read; the stream stops (SIGTERM) and says what it did"
lakehouse status --wait-caught-up 120 --once
stop_stream
cat "$LAKEHOUSE_HOME/demo-stream.log"
lakehouse tables
cat <<MSG

Open the Dagster UI on the demo's home with:
  LAKEHOUSE_HOME=$LAKEHOUSE_HOME make ui   (http://127.0.0.1:${DAGSTER_PORT:-3000})
There, 'Materialize all' runs every stream once; turn on the sensors
landing_sensor and late_data_sensor (Automation) and new landing files and
late events are processed hands-free.
MSG
