#!/usr/bin/env bash
# Dev bank vs synthetic bank (issue 22): one `eval --answer query --examples 8` per warehouse and
# bank, then reports/synthetic-bank/README.md rendered from the run records only.
# Refuses a dirty tree (committed reports name the commit they came from) unless ALLOW_DIRTY=1.
# Usage: [ENDPOINT=http://127.0.0.1:8300/v1] [MODEL=qwen2.5-coder-0.5b] [PORT=8310] [LIMIT=K]
#        [WAREHOUSES="retail:heldout-v2 jaffle:heldout"] scripts/run_synth_bank.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
N="$PY -m nlq2sql.cli"
OUT=${REPORTS_DIR:-reports/synthetic-bank}
MODEL=${MODEL:-qwen2.5-coder-0.5b}
WAREHOUSES=${WAREHOUSES:-retail:heldout-v2 jaffle:heldout tpch:heldout-v2 flights:heldout-v2}
LIMIT=${LIMIT:+--limit $LIMIT}
source scripts/_common.sh
require_clean_tree
# the jaffle prompt with 8 examples needs more than the default 2,048-token context
serve_unless_endpoint "$OUT" "$MODEL" "${PORT:-8310}" 1 --max-model-len 4096
mkdir -p "$OUT"
for item in $WAREHOUSES; do
    wh=${item%%:*}; set=${item#*:}
    for bank in dev synthetic; do
        $N eval --endpoint "$ENDPOINT" --model "$MODEL" --semantic-model "$wh" --evalset "$set" \
            --answer query --examples 8 --example-bank "$bank" --concurrency 8 --max-tokens 300 $LIMIT \
            --out "$OUT/$wh-$bank" --force --max-failure-rate 1 > "$OUT/$wh-$bank.log" 2>&1 \
            || { cat "$OUT/$wh-$bank.log"; exit 1; }
        echo "done $wh $bank"
    done
done
$PY scripts/synth_bank_table.py "$OUT" > "$OUT/README.md"
cat "$OUT/README.md"
