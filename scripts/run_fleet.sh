#!/usr/bin/env bash
# Two local vLLM replicas of one model behind one run (README "Scaling out"): a held-out eval
# routed over both (per-replica table), then every item to every replica (load-check
# --across-replicas: byte-identity across replicas beside identity across concurrency).
# Refuses a dirty tree unless ALLOW_DIRTY=1.
# Usage: [MODEL=smollm2-135m] [LIMIT=K] [REPLICAS=2] [PORT=8130] scripts/run_fleet.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
N="$PY -m nlq2sql.cli"
OUT=${REPORTS_DIR:-reports/fleet}
MODEL=${MODEL:-smollm2-135m}
REPLICAS=${REPLICAS:-2}
LIMIT=${LIMIT:+--limit $LIMIT}
source scripts/_common.sh
require_clean_tree
serve_local "$OUT" "$MODEL" "${PORT:-8130}" "$REPLICAS"
EPS=$(for u in $ENDPOINTS; do printf -- "--endpoint %s " "$u"; done)
$N eval $EPS --model "$MODEL" --evalset heldout --concurrency 8 --max-tokens 96 $LIMIT \
    --out "$OUT/heldout-routed" --force --max-failure-rate 1 > "$OUT/heldout-routed.log" 2>&1 \
    || { cat "$OUT/heldout-routed.log"; exit 1; }
$N load-check $EPS --model "$MODEL" --evalset heldout --across-replicas --concurrency 1,8 --max-tokens 96 \
    ${LIMIT:---limit 20} --out "$OUT/across-replicas" --allow-diff > "$OUT/across-replicas.log" 2>&1 \
    || { cat "$OUT/across-replicas.log"; exit 1; }
$PY scripts/fleet_table.py "$OUT" > "$OUT/README.md"
cat "$OUT/README.md"
