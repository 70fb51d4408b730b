#!/usr/bin/env bash
# The Dagster UI on 127.0.0.1, with a persistent instance under LAKEHOUSE_HOME/dagster.
set -euo pipefail
cd "$(dirname "$0")/.."
home="${LAKEHOUSE_HOME:-$(pwd)/.lakehouse}"
export DAGSTER_HOME="${DAGSTER_HOME:-$home/dagster}"
export PYSPARK_PYTHON="$(pwd)/.venv/bin/python"
mkdir -p "$DAGSTER_HOME"
[ -f "$DAGSTER_HOME/dagster.yaml" ] || printf 'telemetry:\n  enabled: false\n' > "$DAGSTER_HOME/dagster.yaml"
echo "Dagster UI: http://127.0.0.1:${DAGSTER_PORT:-3000}  (Ctrl-C stops it)"
exec .venv/bin/dagster dev -w workspace.yaml -h 127.0.0.1 -p "${DAGSTER_PORT:-3000}"
