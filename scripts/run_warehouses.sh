#!/usr/bin/env bash
# One held-out eval per shipped warehouse and intent schema (flat vs branches) on one model,
# then the table in reports/warehouses/README.md, rendered from the run records only.
# Refuses a dirty tree (committed reports name the commit they came from) unless ALLOW_DIRTY=1.
# Usage: [ENDPOINT=http://127.0.0.1:8000/v1] [MODEL=smollm2-135m] [LIMIT=K] [WAREHOUSES="retail tpch flights"]
#        scripts/run_warehouses.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
N="$PY -m nlq2sql.cli"
OUT=${REPORTS_DIR:-reports/warehouses}
MODEL=${MODEL:-smollm2-135m}
WAREHOUSES=${WAREHOUSES:-retail tpch flights}
LIMIT=${LIMIT:+--limit $LIMIT}
source scripts/_common.sh
require_clean_tree
serve_unless_endpoint "$OUT" "$MODEL" "${PORT:-8124}"
mkdir -p "$OUT"
for wh in $WAREHOUSES; do
    for schema in flat branches; do
        $N eval --endpoint "$ENDPOINT" --model "$MODEL" --semantic-model "$wh" --schema "$schema" \
            --evalset heldout --concurrency 8 --max-tokens 160 $LIMIT --out "$OUT/$wh-$schema" --force \
            --max-failure-rate 1 > "$OUT/$wh-$schema.log" 2>&1 || { cat "$OUT/$wh-$schema.log"; exit 1; }
        echo "done $wh $schema"
    done
done
$PY scripts/warehouse_table.py "$OUT" > "$OUT/README.md"
cat "$OUT/README.md"
