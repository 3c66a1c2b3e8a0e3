# Shared by the report scripts (sourced): refuse a dirty tree, start local vLLM replicas.

# Committed reports name the commit they came from: refuse uncommitted changes unless ALLOW_DIRTY=1.
# require_clean_tree: refuse uncommitted changes to tracked files outside reports/ (what a run's
# manifest calls git_dirty: reports/ holds the runs' own outputs, which a script re-running a
# committed report rewrites as it goes).
require_clean_tree() {
    if [[ -z "${ALLOW_DIRTY:-}" && -n "$(git status --porcelain --untracked-files=no -- . ':(exclude)reports')" ]]; then
        echo "refusing: the working tree has uncommitted changes (ALLOW_DIRTY=1 to override)" >&2
        exit 2
    fi
}

# serve_local OUT MODEL PORT [REPLICAS [SERVE ARGS...]]: start `nlq2sql serve` in the background
# (its log: $SERVE_LOG, default OUT/serve.log), wait until every replica is ready, stop it on exit
# (or at stop_local).  Extra arguments go to `serve` (e.g. --max-model-len 4096 for prompts with 8
# jaffle examples).  Sets ENDPOINTS (one URL per replica) and ENDPOINT (the first).
serve_local() {
    local out=$1 model=$2 port=$3 replicas=${4:-1}
    shift $(( $# < 4 ? $# : 4 ))
    local log=${SERVE_LOG:-$out/serve.log}
    mkdir -p "$out"
    $N serve --model "$model" --port "$port" --replicas "$replicas" "$@" > "$log" 2>&1 &
    SERVER=$!
    trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
    until [[ $(grep -c "serving .* at" "$log" 2>/dev/null) -ge $replicas ]]; do
        kill -0 $SERVER 2>/dev/null || { cat "$log"; exit 1; }
        sleep 2
    done
    ENDPOINTS=$(grep "^serving " "$log" | grep -o "http://[^ ]*/v1")
    ENDPOINT=$(echo "$ENDPOINTS" | head -1)
}

# serve_unless_endpoint OUT MODEL PORT [REPLICAS [SERVE ARGS...]]: the endpoint the caller gave
# ($ENDPOINT), else a local server (serve_local, same arguments) that stops when the script exits.
serve_unless_endpoint() {
    if [[ -z "${ENDPOINT:-}" ]]; then
        serve_local "$@"
    fi
}

# stop_local: stop the server serve_local started (scripts that serve one model after another).
stop_local() {
    kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true; trap - EXIT
}
