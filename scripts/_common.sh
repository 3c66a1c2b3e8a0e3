# Shared by the report scripts (sourced): refuse a dirty tree, start local vLLM replicas.

# Committed reports name the commit they came from: refuse uncommitted changes unless ALLOW_DIRTY=1.
require_clean_tree() {
    if [[ -z "${ALLOW_DIRTY:-}" && -n "$(git status --porcelain --untracked-files=no)" ]]; then
        echo "refusing: the working tree has uncommitted changes (ALLOW_DIRTY=1 to override)" >&2
        exit 2
    fi
}

# serve_local OUT MODEL PORT [REPLICAS]: start `nlq2sql serve` in the background, wait until every
# replica is ready, stop it on exit.  Sets ENDPOINTS (one URL per replica) and ENDPOINT (the first).
serve_local() {
    local out=$1 model=$2 port=$3 replicas=${4:-1}
    mkdir -p "$out"
    $N serve --model "$model" --port "$port" --replicas "$replicas" > "$out/serve.log" 2>&1 &
    SERVER=$!
    trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
    until [[ $(grep -c "serving .* at" "$out/serve.log" 2>/dev/null) -ge $replicas ]]; do
        kill -0 $SERVER 2>/dev/null || { cat "$out/serve.log"; exit 1; }
        sleep 2
    done
    ENDPOINTS=$(grep "^serving " "$out/serve.log" | grep -o "http://[^ ]*/v1")
    ENDPOINT=$(echo "$ENDPOINTS" | head -1)
}
