#!/usr/bin/env bash
# The Dagster UI on 127.0.0.1: webserver and daemon (`dagster dev`), with a persistent instance under
# LAKEHOUSE_HOME/dagster whose concurrency pools let one run at a time write each layer.
set -euo pipefail
cd "$(dirname "$0")/.."
home="${LAKEHOUSE_HOME:-$(pwd)/.lakehouse}"
export LAKEHOUSE_HOME="$home"
export DAGSTER_HOME="${DAGSTER_HOME:-$home/dagster}"
export PYSPARK_PYTHON="$(pwd)/.venv/bin/python"
mkdir -p "$DAGSTER_HOME"
# Each layer's assets and ops name a pool (lakehouse_bronze, lakehouse_gold, lakehouse_derived, ...); a limit of
# one per pool means two runs never write the same table at once (the CLI takes the same file locks).
cat > "$DAGSTER_HOME/dagster.yaml" <<YAML
telemetry:
  enabled: false
concurrency:
  pools:
    default_limit: 1
  runs:
    max_concurrent_runs: 4
run_retries:
  enabled: true
  max_retries: 0
YAML
echo "Dagster UI: http://127.0.0.1:${DAGSTER_PORT:-3000}  (Ctrl-C stops it)"
exec .venv/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p "${DAGSTER_PORT:-3000}"
