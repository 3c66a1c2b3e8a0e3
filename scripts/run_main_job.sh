#!/usr/bin/env bash
# The README's main job, recorded from a clean tree: Qwen2.5-Coder-0.5B on retail's held-out and
# adversarial sets with the best measured condition (8 retrieved examples, value linking, the learned
# ranking and sort guardrails), answering as ANSWER: `intent` (the v1 intent, reports/main-job) or
# `query` (the v2 MetricFlow query over the same questions, their golds read through from_v1:
# reports/main-job-v2).  Then `nlq2sql compare` puts the two answers side by side (McNemar on the
# same item ids) when both are recorded.  Refuses a dirty tree unless ALLOW_DIRTY=1.
# Usage: [ANSWER=query] [SETS="heldout adversarial"] [ENDPOINT=URL] [PORT=8250] [LIMIT=K] scripts/run_main_job.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
N="$PY -m nlq2sql.cli"
MODEL=${MODEL:-qwen2.5-coder-0.5b}
ANSWER=${ANSWER:-query}
SETS=${SETS:-heldout adversarial}
OUT=${REPORTS_DIR:-reports/main-job$([[ $ANSWER == query ]] && echo -v2)}
LIMIT=${LIMIT:+--limit $LIMIT}
source scripts/_common.sh
require_clean_tree
mkdir -p "$OUT"
serve_unless_endpoint "$OUT" "$MODEL" "${PORT:-8250}" 1 --max-model-len 4096
if [[ $ANSWER == intent ]]; then shape=(--prompt contrastive --schema branches); else shape=(--answer query); fi
for set in $SETS; do
    # shellcheck disable=SC2086
    $N eval "${shape[@]}" --evalset "$set" --model "$MODEL" --examples 8 --link-values both \
        --guardrails learned:ranking,sort --endpoint "$ENDPOINT" --concurrency ${CONCURRENCY:-8} \
        --timeout "${TIMEOUT:-600}" $LIMIT --out "$OUT/$set" --force > "$OUT/$set.log" 2>&1 \
        || { tail -5 "$OUT/$set.log"; exit 1; }
    echo "done $ANSWER $set $(date -u +%H:%M:%S)"
done
if [[ -d reports/main-job/heldout && -d reports/main-job-v2/heldout ]]; then
    for set in $SETS; do
        $N compare reports/main-job/$set reports/main-job-v2/$set --out reports/main-job-v2/compare-$set > /dev/null
    done
fi
