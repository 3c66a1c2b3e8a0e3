#!/usr/bin/env bash
# Issue 34: defog's sql-eval as a public benchmark. Builds the seven defog_<db> warehouses from the
# defog-data package, runs both shipped models × answer arms on defog's questions (converted to gold-SQL
# eval sets: warehouses/defog_<db>/evalsets/), and renders reports/defog/README.md from the run records
# beside defog's published figures (scripts/defog_report.py).
# Arms: sql and sql-grammar on every database and set; query (v2 MetricFlow query) on the sql-eval set of
# the databases in QUERY_DBS (those whose semantic layer was written for the questions).
# A (model, database, set) whose directory already holds a finished matrix (its arms.json) is skipped, so
# an interrupted run continues where it stopped; any other directory is run again from the start.
# Refuses a dirty tree unless ALLOW_DIRTY=1 (the report names the commit the runs came from).
# Usage: [MODELS="smollm2-135m qwen2.5-coder-0.5b"] [DATABASES="academic advising ..."] [SETS="sql-eval idk"]
#        [QUERY_DBS="..."] [EXAMPLES=0] [PORT=8240] [TIMEOUT=600] [ENDPOINT=URL (one model)] [LIMIT=K]
#        scripts/run_defog.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
N="$PY -m nlq2sql.cli"
MODELS=${MODELS:-smollm2-135m qwen2.5-coder-0.5b}
DATABASES=${DATABASES:-academic advising atis geography restaurants scholar yelp}
SETS=${SETS:-sql-eval idk}
QUERY_DBS=${QUERY_DBS-academic advising atis geography restaurants scholar yelp}
EXAMPLES=${EXAMPLES:-0}
OUT=${REPORTS_DIR:-reports/defog}
LIMIT=${LIMIT:+--limit $LIMIT}
EXAMPLE_ARGS=""
[[ "$EXAMPLES" == 0 ]] || EXAMPLE_ARGS="--examples $EXAMPLES"
ENDPOINT_GIVEN=${ENDPOINT:-}
source scripts/_common.sh
require_clean_tree
mkdir -p "$OUT"
for db in $DATABASES; do
    $N db build --warehouse "defog_$db" > /dev/null
done
for model in $MODELS; do
    todo=()  # "arms:database:set" for every set whose matrix has not finished
    for db in $DATABASES; do
        for set in $SETS; do
            arms="sql,sql-grammar"
            if [[ "$set" == sql-eval && " $QUERY_DBS " == *" $db "* ]]; then arms="query,$arms"; fi
            if [[ -f "$OUT/$model/defog_$db-$set/arms.json" ]]; then echo "skip $model $db $set (finished)"
            else todo+=("$arms:$db:$set"); fi
        done
    done
    [[ ${#todo[@]} -gt 0 ]] || continue
    endpoint=$ENDPOINT_GIVEN
    mkdir -p "$OUT/$model"
    if [[ -z "$endpoint" ]]; then
        serve_local "$OUT/$model" "$model" "${PORT:-8240}" 1 --max-model-len 8192
        endpoint=$ENDPOINT
    fi
    for job in "${todo[@]}"; do
        arms=${job%%:*}; rest=${job#*:}; db=${rest%%:*}; set=${rest#*:}
        dir="$OUT/$model/defog_$db-$set"
        rm -rf "$dir"
        # shellcheck disable=SC2086
        $N matrix --answers "$arms" $EXAMPLE_ARGS --endpoint "$endpoint" --model "$model" \
            --semantic-model "defog_$db" --evalset "$set" --max-tokens 384 --concurrency ${CONCURRENCY:-8} \
            --timeout "${TIMEOUT:-600}" --gpu-cost-per-hour 1.0 $LIMIT --out "$dir" > "$dir.log" 2>&1 \
            || { tail -5 "$dir.log"; exit 1; }
        echo "done $model $db $set $(date -u +%H:%M:%S)"
    done
    [[ -n "$ENDPOINT_GIVEN" ]] || stop_local
done
$PY scripts/defog_report.py "$OUT" "$(echo $QUERY_DBS | tr ' ' ,)" > "$OUT/README.md"
cat "$OUT/README.md"
