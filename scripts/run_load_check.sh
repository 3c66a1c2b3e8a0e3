#!/usr/bin/env bash
# Quality under load for a preset (default: the README's main job): `load-check` at concurrency
# 1, 16 and 32, REPEATS runs per level, on one local CPU vLLM (or ENDPOINT), from a clean tree.
# Writes reports/load-check-<preset>/ (the runs, loadcheck.json/.md).  Divergence is the finding,
# not a failure (--allow-diff).
# Usage: [PRESET=main-job] [EVALSET=heldout] [REPEATS=2] [ENDPOINT=URL] [PORT=8250] scripts/run_load_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
N="$PY -m nlq2sql.cli"
PRESET=${PRESET:-main-job}
OUT=${REPORTS_DIR:-reports/load-check-$PRESET}
source scripts/_common.sh
require_clean_tree
mkdir -p "$OUT"
serve_unless_endpoint "$OUT" "${MODEL:-qwen2.5-coder-0.5b}" "${PORT:-8250}" 1 --max-model-len 4096
$N load-check --preset "$PRESET" --evalset "${EVALSET:-heldout}" --concurrency 1,16,32 \
    --repeats "${REPEATS:-2}" --endpoint "$ENDPOINT" --out "$OUT" --allow-diff > "$OUT/load-check.log" 2>&1 \
    || { tail -5 "$OUT/load-check.log"; exit 1; }
echo "done $PRESET $(date -u +%H:%M:%S)"
