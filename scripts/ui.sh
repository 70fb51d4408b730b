#!/usr/bin/env bash
# The Dagster UI on 127.0.0.1: webserver and daemon (`dagster dev`), with a persistent instance under
# LAKEHOUSE_HOME/dagster (DAGSTER_HOME) whose concurrency pools let one run at a time write each layer.
set -euo pipefail
cd "$(dirname "$0")/.."
home="${LAKEHOUSE_HOME:-$(pwd)/.lakehouse}"
export LAKEHOUSE_HOME="$home"
export DAGSTER_HOME="${DAGSTER_HOME:-$home/dagster}"
export PYSPARK_PYTHON="$(pwd)/.venv/bin/python"
mkdir -p "$DAGSTER_HOME"
# dagster.yaml from the settings (orchestration/instance.py): one run at a time per layer's pool; SQLite under
# DAGSTER_HOME, or PostgreSQL with LAKEHOUSE_DAGSTER_STORAGE=postgres (checked here: one line if it does not answer).
.venv/bin/python -m orchestration.instance "$DAGSTER_HOME"
echo "Dagster UI: http://127.0.0.1:${DAGSTER_PORT:-3000}  (Ctrl-C stops it)"
exec .venv/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p "${DAGSTER_PORT:-3000}"
