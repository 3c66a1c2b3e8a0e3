#!/usr/bin/env bash
# Reproduce the committed reports under reports/: for each model, the prompt x guardrail
# matrix (held-out + adversarial), quality under load (1/16/32) and compact vs pretty,
# then one comparison report.  CPU timings are CPU timings.  Takes ~30-60 min on 2 cores.
# Usage: [ALLOW_DIRTY=1] [DTYPE=float32] [LIMIT=K] [COMPACT_LIMIT=K] [STEPS="matrix load-check compact"] [ONLY_COMPARE=1]
#        scripts/run_reports.sh [MODEL ...]   (default: smollm2-135m qwen2.5-coder-0.5b)
set -uo pipefail
cd "$(dirname "$0")/.."
N=.venv/bin/nlq2sql
OUT=${REPORTS_DIR:-reports}
PORT=${PORT:-8123}
URL=http://127.0.0.1:$PORT/v1
models=("$@"); [[ ${#models[@]} -gt 0 ]] || models=(smollm2-135m qwen2.5-coder-0.5b)
DTYPE=${DTYPE:-bfloat16}            # vLLM --dtype for every server
LIMIT=${LIMIT:+--limit $LIMIT}      # first K items of each eval set (default: all)
STEPS=${STEPS:-matrix load-check compact}
# Committed reports name the commit they came from: refuse a dirty tree unless told otherwise.
# reports/ itself is left out (as the manifests' git_dirty leaves it out): each step rewrites it.
if [[ -z "${ALLOW_DIRTY:-}" && -n "$(git status --porcelain --untracked-files=no -- . ':(exclude)reports')" ]]; then
    echo "refusing: the working tree has uncommitted changes (ALLOW_DIRTY=1 to override)" >&2
    exit 2
fi

serve() {  # serve MODEL [--no-compact]
    $N serve --model "$1" --port "$PORT" --dtype "$DTYPE" ${2:-} > "$OUT/$1/serve${2:-}.log" 2>&1 &
    SERVER=$!
    for _ in $(seq 1 1200); do
        grep -q "serving .* at" "$OUT/$1/serve${2:-}.log" 2>/dev/null && return 0
        kill -0 $SERVER 2>/dev/null || { cat "$OUT/$1/serve${2:-}.log"; return 1; }
        sleep 1
    done
    return 1
}
stop() { kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null; }  # INT is ignored in background jobs

for m in "${models[@]}"; do
    [[ -n "${ONLY_COMPARE:-}" ]] && break
    mkdir -p "$OUT/$m"
    if [[ "$STEPS" == *matrix* || "$STEPS" == *load-check* ]]; then
        serve "$m" || exit 1
        if [[ "$STEPS" == *matrix* ]]; then
            for set in heldout adversarial; do
                $N matrix --evalset $set --endpoint $URL --model "$m" --concurrency 8 $LIMIT \
                    --out "$OUT/$m/matrix-$set"
            done
        fi
        if [[ "$STEPS" == *load-check* ]]; then
            $N load-check --evalset heldout --endpoint $URL --model "$m" --concurrency 1,16,32 $LIMIT \
                --out "$OUT/$m/load-check" --allow-diff
        fi
        stop
    fi
    if [[ "$STEPS" == *compact* ]]; then
        serve "$m" --no-compact || exit 1
        $N compact --evalset heldout --limit ${COMPACT_LIMIT:-24} --endpoint $URL --model "$m" \
            --out "$OUT/$m/compact"
        stop
    fi
done
runs=()
for m in "${models[@]}"; do
    for d in "$OUT/$m"/matrix-*/*/ "$OUT/$m"/load-check/c*-r0/; do runs+=("$d"); done
done
$N compare "${runs[@]}" --out "$OUT" --gpu-cost-per-hour 1.0 --title "nlq2sql: SmolLM2-135M vs Qwen2.5-Coder-0.5B on CPU vLLM"
