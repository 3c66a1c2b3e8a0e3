#!/usr/bin/env bash
# Issue 21: the v2 answer schema with the known values of small categorical fields pinned, against
# the committed query arm (reports/arms: the same options, --answer query --examples 8, max_tokens
# 256, on a schema without values): re-runs that arm (run_conditions.sh's q-ex8) per set and puts
# the two side by side with `nlq2sql compare` (McNemar on the same item ids).
# Refuses a dirty tree unless ALLOW_DIRTY=1.
# Usage: [ENDPOINT=URL] [MODEL=qwen2.5-coder-0.5b] [SETS="tpch:heldout-v2 ..."] [PORT=8240] scripts/run_schema_values.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
N="$PY -m nlq2sql.cli"
MODEL=${MODEL:-qwen2.5-coder-0.5b}
SETS=${SETS:-tpch:heldout-v2 tpch:adversarial flights:heldout-v2 flights:adversarial jaffle:heldout jaffle:adversarial}
OUT=${REPORTS_DIR:-reports/schema-values}
source scripts/_common.sh
require_clean_tree
mkdir -p "$OUT"
serve_unless_endpoint "$OUT" "$MODEL" "${PORT:-8240}" 1 --max-model-len 4096
for spec in $SETS; do
    wh=${spec%%:*} set=${spec#*:}
    ENDPOINT=$ENDPOINT MODEL=$MODEL WAREHOUSE=$wh EVALSET=$set ARMS=q-ex8 REPORTS_DIR="$OUT/$wh-$set" \
        bash scripts/run_conditions.sh > /dev/null
    $N compare "reports/arms/$MODEL/$wh-$set/$set-query" "$OUT/$wh-$set/q-ex8" --out "$OUT/$wh-$set/compare" > /dev/null
    echo "done $spec $(date -u +%H:%M:%S)"
done
