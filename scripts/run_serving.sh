#!/usr/bin/env bash
# Issue 25, live: the serving decisions measured on the local CPU vLLM, one server at a time.
#   backends — `nlq2sql backends` with Qwen2.5-Coder-0.5B (one local server per structured-output
#              backend, the same items each; a backend that cannot start is reported with its error),
#              rendered beside the other models into reports/backends/README.md;
#   tune     — `nlq2sql tune` with SmolLM2-135M on the Qwen curve's set, condition and SLOs
#              (reports/tune/smollm2-135m-heldout/, each report rebuilt from its probes' records);
#   repeats  — `eval --repeats 3` and `load-check --repeats 3` per model on a few items
#              (reports/repeats/, README rendered from the records by scripts/repeats_report.py).
# Refuses a dirty tree unless ALLOW_DIRTY=1 (the reports name the commit the runs came from).
# Usage: [STEPS="backends tune repeats"] [MODELS="smollm2-135m qwen2.5-coder-0.5b"] [LIMIT=8]
#        [REQUESTS=12] [PORT=8251] [SLOS="60:8 45:4 30:8"] [ENDPOINT=URL (one model, a server started
#        elsewhere, e.g. without nlq2sql serve's 600 s start-up limit on a loaded machine)] scripts/run_serving.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
N="$PY -m nlq2sql.cli"
STEPS=${STEPS:-backends tune repeats}
MODELS=${MODELS:-smollm2-135m qwen2.5-coder-0.5b}
LIMIT=${LIMIT:-8}
REQUESTS=${REQUESTS:-12}
PORT=${PORT:-8251}
RUNS=${RUNS_DIR:-runs/serving}
SLOS=${SLOS:-60:8 45:4 30:8}
ENDPOINT_GIVEN=${ENDPOINT:-}
source scripts/_common.sh
require_clean_tree
mkdir -p "$RUNS"

start_server() {  # start_server MODEL: one local vLLM (prompts with 8 examples need 4096 tokens);
    # dev mode serves /server_info, so the runs (all --endpoint) record the backend the server reports
    if [[ -n "${ENDPOINT_GIVEN:-}" ]]; then ENDPOINT=$ENDPOINT_GIVEN; return; fi
    VLLM_SERVER_DEV_MODE=1 SERVE_LOG="$RUNS/serve-$1.log" serve_local "$RUNS" "$1" "$PORT" 1 --max-model-len 4096
}

stop_server() {
    [[ -n "${ENDPOINT_GIVEN:-}" ]] && return
    stop_local
}

for step in $STEPS; do
    case $step in
    backends)
        rm -rf reports/backends/qwen2.5-coder-0.5b
        $N backends --model qwen2.5-coder-0.5b --limit "$LIMIT" --port $((PORT + 1)) \
            --out reports/backends/qwen2.5-coder-0.5b > "$RUNS/backends-qwen.log" 2>&1 \
            || { tail -5 "$RUNS/backends-qwen.log"; exit 1; }
        $PY scripts/backends_table.py reports/backends > reports/backends/README.md
        echo "done backends $(date -u +%T)"
        ;;
    tune)
        start_server smollm2-135m
        # The Qwen curve's condition (README "Choosing an operating point"): contrastive prompt, branch
        # schema, 8 examples, value linking, learned ranking + sort, max_tokens 128, --min-accuracy 0.5.
        for spec in $SLOS; do
            slo=${spec%%:*}; hi=${spec#*:}
            name=c1-c$hi-e2e-p95-${slo}s
            rm -rf "$RUNS/tune-$name"
            $N tune --endpoint "$ENDPOINT" --model smollm2-135m --evalset heldout --prompt contrastive \
                --schema branches --examples 8 --link-values both --guardrails learned:ranking --guardrails sort \
                --max-tokens 128 --min-accuracy 0.5 --requests "$REQUESTS" --probes 4 --warmup 1 --hi "$hi" \
                --slo "e2e_p95<=${slo}s" --out "$RUNS/tune-$name" > "$RUNS/tune-$name.log" 2>&1 \
                || { tail -5 "$RUNS/tune-$name.log"; exit 1; }
            rm -rf "reports/tune/smollm2-135m-heldout/$name"
            $PY scripts/tune_table.py "$RUNS/tune-$name" "reports/tune/smollm2-135m-heldout/$name"
            echo "done tune $name $(date -u +%T)"
        done
        stop_server
        ;;
    repeats)
        for model in $MODELS; do
            start_server "$model"
            dir=reports/repeats/$model
            rm -rf "$dir"
            mkdir -p "$dir"
            common=(--endpoint "$ENDPOINT" --model "$model" --evalset heldout --prompt contrastive --schema branches
                    --limit "$LIMIT" --max-tokens 128)
            $N eval "${common[@]}" --repeats 3 --concurrency 4 --max-failure-rate 1 --out "$dir/eval" \
                > "$RUNS/eval-$model.log" 2>&1 || { tail -5 "$RUNS/eval-$model.log"; exit 1; }
            $N load-check "${common[@]}" --repeats 3 --concurrency 1,4 --allow-diff --out "$dir/loadcheck" \
                > "$RUNS/loadcheck-$model.log" 2>&1 || { tail -5 "$RUNS/loadcheck-$model.log"; exit 1; }
            stop_server
            echo "done repeats $model $(date -u +%T)"
        done
        $PY scripts/repeats_report.py reports/repeats > reports/repeats/README.md
        ;;
    *) echo "unknown step $step" >&2; exit 2 ;;
    esac
done
