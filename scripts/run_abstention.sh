#!/usr/bin/env bash
# Issue 22: abstention measured — each warehouse's held-out set (answerable items) and unanswerable
# set answered as v2 MetricFlow queries with K retrieved examples and `--abstain-below P` (vLLM
# logprobs give each answer a confidence), so every cut-off's unanswerable precision and recall can
# be re-derived from the records; renders reports/abstention/README.md (scripts/abstention_report.py).
# A run directory that already holds summary.json is kept (an interrupted script continues).
# Refuses a dirty tree unless ALLOW_DIRTY=1.
# Usage: [MODEL=qwen2.5-coder-0.5b] [SETS="retail:heldout-v2 retail:unanswerable ..."] [BELOW=0.5]
#        [EXAMPLES=8] [ENDPOINT=URL] [PORT=8240] [LIMIT=K] scripts/run_abstention.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
N="$PY -m nlq2sql.cli"
MODEL=${MODEL:-qwen2.5-coder-0.5b}
SETS=${SETS:-retail:heldout-v2 retail:unanswerable tpch:heldout-v2 tpch:unanswerable flights:heldout-v2 flights:unanswerable jaffle:heldout jaffle:unanswerable}
OUT=${REPORTS_DIR:-reports/abstention}
LIMIT=${LIMIT:+--limit $LIMIT}
source scripts/_common.sh
require_clean_tree
mkdir -p "$OUT/$MODEL"
serve_unless_endpoint "$OUT/$MODEL" "$MODEL" "${PORT:-8240}" 1 --max-model-len 4096
for spec in $SETS; do
    wh=${spec%%:*}; set=${spec#*:}; dir="$OUT/$MODEL/$wh-$set"
    if [[ -f "$dir/summary.json" ]]; then echo "skip $wh $set (finished)"; continue; fi
    rm -rf "$dir"
    # shellcheck disable=SC2086
    $N eval --answer query --examples "${EXAMPLES:-8}" --abstain-below "${BELOW:-0.5}" --endpoint "$ENDPOINT" \
        --model "$MODEL" --semantic-model "$wh" --evalset "$set" --max-tokens 256 --concurrency ${CONCURRENCY:-8} \
        --timeout "${TIMEOUT:-600}" --max-failure-rate 1 $LIMIT --out "$dir" > "$dir.log" 2>&1 \
        || { tail -5 "$dir.log"; exit 1; }
    echo "done $MODEL $wh $set $(date -u +%H:%M:%S)"
done
$PY scripts/abstention_report.py "$OUT" > "$OUT/README.md"
cat "$OUT/README.md"
