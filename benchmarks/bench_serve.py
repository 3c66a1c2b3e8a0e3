"""Real server: ``nlq2sql eval`` vs vLLM's own ``vllm bench serve``, side by side.

One local CPU vLLM (default model, whitespace-free structured outputs) serves both
clients, alternating (``--rounds`` rounds per level, ours then theirs), on the same
questions, the same intent schema (``structured_outputs``) and the same max_tokens.  Both
send the **same prompt text as one user message** (vLLM's custom dataset cannot send a
system message, so ours is given that layout here), so the model writes the same answers
and the two clients do the same server work; prompt token counts are printed to show it.
Prints, per level, the median req/s and output tok/s of each and the ratio ours ÷ theirs
with its spread (min–max of the per-round ratios).

    python benchmarks/bench_serve.py --concurrency 1,16,32 --requests 16,64,96 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nlq2sql.run.server import LocalServer, ServerConfig, free_port  # noqa: E402
from nlq2sql.semantic.binding import open_warehouse  # noqa: E402
from nlq2sql.stages.intent import intent_schema  # noqa: E402
from nlq2sql.stages.prompt import load_prompt  # noqa: E402

OURS = r"""
import json, sys
from pathlib import Path
from nlq2sql.transport.client import Sampling
from nlq2sql.run.config import EvalConfig
from nlq2sql.run.live import run_eval
from nlq2sql.stages import prompt as P
# The benchmark's one-user-message layout (what vLLM's custom dataset sends), same text.
P.Prompt.messages = lambda self, q: [{"role": "user", "content": self.text + "\n\n" + q}]
url, model, evalset, out, c, mt = sys.argv[1:7]
s = run_eval(EvalConfig(evalset=evalset, out=Path(out), endpoint=url, model=model, concurrency=int(c),
                        sampling=Sampling(max_tokens=int(mt)), force=True)).to_json()
t = s["timing"]
print("RESULT", s["throughput"]["req_per_s"],
      s["throughput"]["req_per_s"] * t["completion_tokens"]["mean"], t["prompt_tokens"]["mean"])
"""

THEIRS = r"""
import sys
from vllm.utils.argparse_utils import FlexibleArgumentParser
from vllm.benchmarks.serve import add_cli_args, main
p = FlexibleArgumentParser(); add_cli_args(p)
r = main(p.parse_args(sys.argv[1:]))
print("RESULT", r["request_throughput"], r["output_throughput"], r["total_input_tokens"] / max(1, r["completed"]))
"""


def run(cmd: list[str]) -> tuple[float, float, float]:
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1800)
    m = re.search(r"RESULT (\S+) (\S+) (\S+)", out.stdout)
    if not m:
        raise RuntimeError(out.stdout[-3000:] + out.stderr[-3000:])
    return float(m.group(1)), float(m.group(2)), float(m.group(3))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", default="1,16,32")
    ap.add_argument("--requests", default="16,64,96")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    counts = [int(x) for x in args.requests.split(",")]
    wh = open_warehouse("retail")  # the held-out set below is retail's
    prompt = load_prompt("baseline", "default", wh)
    src = [json.loads(x) for x in (ROOT / "evalsets" / "heldout.jsonl").read_text().splitlines()]
    rows = []
    with tempfile.TemporaryDirectory() as tmp, \
            LocalServer(ServerConfig(model="smollm2-135m", port=free_port())) as srv:
        for c, n in zip(levels, counts, strict=True):
            evalset = Path(tmp) / f"es{c}.jsonl"
            custom = Path(tmp) / f"custom{c}.jsonl"
            with open(evalset, "w") as e, open(custom, "w") as cu:
                for i in range(n):
                    obj = dict(src[i % len(src)], id=f"{src[i % len(src)]['id']}#{i}")
                    e.write(json.dumps(obj) + "\n")
                    cu.write(json.dumps({"prompt": prompt.text + "\n\n" + obj["question"]}) + "\n")
            ours_r, theirs_r = [], []
            for r in range(args.rounds):
                ours_r.append(run([sys.executable, "-c", OURS, srv.url, srv.model_name, str(evalset),
                                   f"{tmp}/run{c}-{r}", str(c), str(args.max_tokens)]))
                theirs_r.append(run([sys.executable, "-c", THEIRS, "--backend", "openai-chat", "--endpoint",
                                     "/v1/chat/completions", "--base-url", srv.base_url, "--model", srv.model_name,
                                     "--tokenizer", srv.model_path, "--dataset-name", "custom", "--dataset-path",
                                     str(custom), "--custom-output-len", str(args.max_tokens),
                                     "--skip-chat-template", "--num-prompts", str(n), "--max-concurrency", str(c),
                                     "--temperature", "0",
                                     "--extra-body",
                                     json.dumps({"structured_outputs": {"json": intent_schema(wh.catalog)}})]))
            rows.append((c, n, ours_r, theirs_r))
    print(f"\nreal local CPU vLLM ({srv.model_name}, compact structured outputs), max_tokens {args.max_tokens}, "
          f"{args.rounds} alternating rounds per level (medians; ratio spread = min–max of per-round ratios)")
    print("| concurrency | requests | ours req/s | theirs req/s | ratio (spread) | ours out tok/s | "
          "theirs out tok/s | prompt tokens ours / theirs | rounds req/s (ours; theirs) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for c, n, o, t in rows:
        med = [statistics.median(x[i] for x in o) for i in range(3)]
        tmed = [statistics.median(x[i] for x in t) for i in range(3)]
        ratios = [a[0] / b[0] for a, b in zip(o, t, strict=True)]
        print(f"| {c} | {n} | {med[0]:.2f} | {tmed[0]:.2f} | {med[0] / tmed[0]:.2f} ({min(ratios):.2f}–"
              f"{max(ratios):.2f}) | {med[1]:.1f} | {tmed[1]:.1f} | {med[2]:.0f} / {tmed[2]:.0f} | "
              f"{', '.join(f'{x[0]:.2f}' for x in o)}; {', '.join(f'{x[0]:.2f}' for x in t)} |")


if __name__ == "__main__":
    main()
