#!/usr/bin/env bash
# Conditions on one model and warehouse's held-out set: baseline, branch schema, retrieved
# examples, value-linking hint (and repair), planner; every run is also re-scored under each
# guardrail condition (lexical, learned, values). Renders reports/conditions/MODEL/README.md from the run records.
# Refuses a dirty tree unless ALLOW_DIRTY=1.
# Arms named q-* answer as v2 MetricFlow queries (--answer query, max_tokens 256) with the conditions
# ported to them: q-ex8, q-ex8-hint, q-ex8-hint-guard, q-ex8-planner, q-ex8-sc5-abstain.
# Usage: [ENDPOINT=URL] [MODEL=qwen2.5-coder-0.5b] [WAREHOUSE=retail] [EVALSET=heldout] [LIMIT=K]
#        [ARMS="a-baseline-flat b-contrastive-branches-ex8 d-contrastive-branches-ex8-hint c-...-planner"] scripts/run_conditions.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
N="$PY -m nlq2sql.cli"
MODEL=${MODEL:-qwen2.5-coder-0.5b}
WAREHOUSE=${WAREHOUSE:-retail}
EVALSET=${EVALSET:-heldout}
OUT=${REPORTS_DIR:-reports/conditions/$MODEL-$WAREHOUSE-$EVALSET}
LIMIT=${LIMIT:+--limit $LIMIT}
ARMS=${ARMS:-a-baseline-flat b-contrastive-branches-ex8 c-contrastive-branches-ex8-planner}
source scripts/_common.sh
require_clean_tree
mkdir -p "$OUT"
serve_unless_endpoint "$OUT" "$MODEL" "${PORT:-8125}"
for arm in $ARMS; do
    tokens=160
    case $arm in
        # v2: the model writes the MetricFlow query (--answer query), the conditions ported to it
        q-*) tokens=256 ;;&
        *q-ex8) args="--answer query --examples 8" ;;
        *q-ex8-hint) args="--answer query --examples 8 --link-values both" ;;
        *q-ex8-hint-guard) args="--answer query --examples 8 --link-values both --guardrails learned:ranking,sort" ;;
        *q-ex8-planner) args="--answer query --examples 8 --planner two-stage" ;;
        *q-ex8-sc5-abstain) args="--answer query --examples 8 --samples 5 --temperature 0.7 --abstain" ;;
        q-*) echo "unknown arm $arm" >&2; exit 2 ;;
        *baseline-flat) args="--prompt baseline --schema flat" ;;
        *contrastive-branches-ex8-hint-logprob-abstain) args="--prompt contrastive --schema branches --examples 8 --link-values both --abstain-below 0.5" ;;
        *contrastive-branches-ex8-hint-sc5-abstain) args="--prompt contrastive --schema branches --examples 8 --link-values both --samples 5 --temperature 0.7 --abstain" ;;
        *contrastive-branches-ex8-hint-planner-abstain) args="--prompt contrastive --schema branches --examples 8 --link-values both --planner two-stage --abstain" ;;
        *contrastive-branches-ex8-hint) args="--prompt contrastive --schema branches --examples 8 --link-values both" ;;
        *contrastive-branches-ex8-planner) args="--prompt contrastive --schema branches --examples 8 --planner two-stage" ;;
        *contrastive-branches-ex8) args="--prompt contrastive --schema branches --examples 8" ;;
        *contrastive-branches) args="--prompt contrastive --schema branches" ;;
        *) echo "unknown arm $arm" >&2; exit 2 ;;
    esac
    # shellcheck disable=SC2086
    $N eval --endpoint "$ENDPOINT" --model "$MODEL" --semantic-model "$WAREHOUSE" --evalset "$EVALSET" $args \
        --concurrency ${CONCURRENCY:-8} --timeout ${TIMEOUT:-600} --max-tokens $tokens $LIMIT --out "$OUT/$arm" --force \
        --max-failure-rate 1 > "$OUT/$arm.log" 2>&1 || { tail -5 "$OUT/$arm.log"; exit 1; }
    echo "done $arm"
done
$PY scripts/conditions_table.py "$OUT" > "$OUT/README.md"
cat "$OUT/README.md"
