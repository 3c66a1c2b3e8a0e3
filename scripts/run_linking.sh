#!/usr/bin/env bash
# Issue 38: schema linking, measured. Offline (no model): linking recall of the gold's names and the
# prompt's size in tokens, whole vocabulary against linked, on every shipped warehouse's v2 held-out
# set. Live: final accuracy with and without --link-schema prompt on the same items, paired, for each
# of MODELS on jaffle's held-out set, and on a dbt project of your own when LAYER, DB and QUESTIONS
# name it (its semantic_manifest.json or folder, the DuckDB file dbt built, a v2 question file;
# LAYER_NAME titles it).
# Writes REPORTS_DIR (default reports/linking): offline.md, <model>/<set>-{whole,linked}/ runs and
# <model>/<set>.md. Refuses a dirty tree unless ALLOW_DIRTY=1.
# Usage: [MODELS="qwen2.5-coder-0.5b smollm2-135m"] [ENDPOINT=URL (one model)] [LIMIT=K]
#        [LAYER=... DB=... QUESTIONS=... LAYER_NAME=...] scripts/run_linking.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
N="$PY -m nlq2sql.cli"
MODELS=${MODELS:-qwen2.5-coder-0.5b}
OUT=${REPORTS_DIR:-reports/linking}
LIMIT_ARGS=${LIMIT:+--limit $LIMIT}
ENDPOINT_GIVEN=${ENDPOINT:-}
source scripts/_common.sh
require_clean_tree
mkdir -p "$OUT"

{
    echo "# Schema linking, offline: recall and prompt tokens"
    echo
    echo "Made by \`scripts/run_linking.sh\` at $(git rev-parse --short HEAD); no model answers here."
    for spec in retail:evalsets/heldout-v2.jsonl tpch:warehouses/tpch/evalsets/heldout-v2.jsonl \
                flights:warehouses/flights/evalsets/heldout-v2.jsonl jaffle:warehouses/jaffle/evalsets/heldout.jsonl; do
        echo
        $PY scripts/linking_report.py --semantic-model "${spec%%:*}" --evalset "${spec#*:}" --title "${spec%%:*}" \
            | sed 's/^# /## /'
    done
    if [[ -n "${LAYER:-}" ]]; then
        echo
        $PY scripts/linking_report.py --semantic-model "$LAYER" --db "$DB" --evalset "$QUESTIONS" \
            --title "${LAYER_NAME:-your layer}" 2>/dev/null | sed 's/^# /## /'
    fi
} > "$OUT/offline.md"

for model in $MODELS; do
    mkdir -p "$OUT/$model"
    endpoint=$ENDPOINT_GIVEN
    if [[ -z "$endpoint" ]]; then
        serve_local "$OUT/$model" "$model" "${PORT:-8250}" 1 --max-model-len 8192
        endpoint=$ENDPOINT
    fi
    sets=("jaffle:jaffle:heldout:")
    [[ -z "${LAYER:-}" ]] || sets+=("layer:$LAYER:$QUESTIONS:$DB")
    for spec in "${sets[@]}"; do
        IFS=: read -r name layer questions db <<< "$spec"
        db_args=${db:+--db $db}
        for arm in whole linked; do
            link=""; [[ "$arm" == linked ]] && link="--link-schema prompt"
            # shellcheck disable=SC2086
            $N eval --answer query --evalset "$questions" --semantic-model "$layer" $db_args --endpoint "$endpoint" \
                --model "$model" --concurrency 8 $link $LIMIT_ARGS --out "$OUT/$model/$name-$arm" --force \
                > "$OUT/$model/$name-$arm.log" 2>&1 || { tail -5 "$OUT/$model/$name-$arm.log"; exit 1; }
        done
        qfile=$questions; [[ "$name" == jaffle ]] && qfile=warehouses/jaffle/evalsets/heldout.jsonl
        # shellcheck disable=SC2086
        $PY scripts/linking_report.py --semantic-model "$layer" $db_args --evalset "$qfile" --model "$model" \
            --title "$name, $model" --runs "$OUT/$model/$name-whole" "$OUT/$model/$name-linked" \
            > "$OUT/$model/$name.md" 2>/dev/null
        echo "done $model $name $(date -u +%H:%M:%S)"
    done
    [[ -n "$ENDPOINT_GIVEN" ]] || stop_local
done
{
    echo "# Schema linking (issue 38)"
    echo
    echo "Made by \`scripts/run_linking.sh\` from the runs below (each run's manifest names its commit). Accuracy with"
    echo "and without linking on the same items, paired; then recall and prompt tokens offline, every shipped layer."
    for f in "$OUT"/*/*.md; do echo; sed 's/^# /## /' "$f"; done
    echo
    sed 's/^# /## /; s/^## Schema/### Schema/' "$OUT/offline.md"
} > "$OUT/README.md"
