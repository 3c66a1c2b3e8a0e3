#!/usr/bin/env bash
# Issue 23: does the semantic layer help? Three answer arms on the same items, per model and set:
# query (a MetricFlow query, JSON-Schema constrained), sql (DuckDB SQL, free text) and sql-grammar
# (the same prompt under the warehouse's SQL grammar), each with K retrieved solved examples.
# Runs `nlq2sql matrix --answers` per (warehouse, set) against one local server per model, then
# renders reports/arms/README.md from the run records (scripts/arms_report.py).
# UNANSWERABLE sets run the query arm only (the SQL arms have no abstention to score).
# A (model, set) whose directory already holds a finished matrix (its arms.json) is skipped, so an
# interrupted run continues where it stopped; any other directory is run again from the start.
# Refuses a dirty tree unless ALLOW_DIRTY=1 (the report names the commit the runs came from).
# Usage: [MODELS="smollm2-135m qwen2.5-coder-0.5b"] [SETS="retail:heldout-v2 retail:adversarial ..."]
#        [UNANSWERABLE="retail:unanswerable ..."] [EXAMPLES=8] [PORT=8230] [TIMEOUT=600]
#        [ENDPOINT=URL (one model)] [LIMIT=K] scripts/run_arms.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
N="$PY -m nlq2sql.cli"
MODELS=${MODELS:-smollm2-135m qwen2.5-coder-0.5b}
SETS=${SETS-retail:heldout-v2 retail:adversarial tpch:heldout-v2 tpch:adversarial flights:heldout-v2 flights:adversarial jaffle:heldout jaffle:adversarial}
UNANSWERABLE=${UNANSWERABLE-retail:unanswerable tpch:unanswerable flights:unanswerable jaffle:unanswerable}
EXAMPLES=${EXAMPLES:-8}
OUT=${REPORTS_DIR:-reports/arms}
LIMIT=${LIMIT:+--limit $LIMIT}
ENDPOINT_GIVEN=${ENDPOINT:-}
source scripts/_common.sh
require_clean_tree
mkdir -p "$OUT"
for model in $MODELS; do
    todo=()  # "arms:warehouse:set" for every set whose matrix has not finished (no arms.json yet)
    for spec in $SETS; do todo+=("query,sql,sql-grammar:$spec"); done
    for spec in $UNANSWERABLE; do todo+=("query:$spec"); done
    pending=()
    for job in "${todo[@]}"; do
        spec=${job#*:}
        if [[ -f "$OUT/$model/${spec%%:*}-${spec#*:}/arms.json" ]]; then echo "skip $model $spec (finished)"
        else pending+=("$job"); fi
    done
    [[ ${#pending[@]} -gt 0 ]] || continue
    todo=("${pending[@]}")
    endpoint=$ENDPOINT_GIVEN
    mkdir -p "$OUT/$model"
    if [[ -z "$endpoint" ]]; then
        serve_local "$OUT/$model" "$model" "${PORT:-8230}" 1 --max-model-len 4096
        endpoint=$ENDPOINT
    fi
    for job in "${todo[@]}"; do
        answers=${job%%:*}; spec=${job#*:}; wh=${spec%%:*}; set=${spec#*:}
        dir="$OUT/$model/$wh-$set"
        rm -rf "$dir"
        # shellcheck disable=SC2086
        $N matrix --answers "$answers" --examples "$EXAMPLES" --endpoint "$endpoint" --model "$model" \
            --semantic-model "$wh" --evalset "$set" --max-tokens 256 --concurrency ${CONCURRENCY:-8} \
            --timeout "${TIMEOUT:-600}" --gpu-cost-per-hour 1.0 $LIMIT --out "$dir" > "$OUT/$model/$wh-$set.log" 2>&1 \
            || { tail -5 "$OUT/$model/$wh-$set.log"; exit 1; }
        echo "done $model $wh $set $(date -u +%H:%M:%S)"
    done
    [[ -n "$ENDPOINT_GIVEN" ]] || stop_local
done
$PY scripts/arms_report.py "$OUT" > "$OUT/README.md"
cat "$OUT/README.md"
