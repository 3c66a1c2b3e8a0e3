"""One request from its own OS process, sent at an agreed wall-clock moment (staircase test).

``python -m nlq2sql.load.oneshot URL BODY_JSON_FILE START_AT [API_KEY_ENV]`` sleeps until
``START_AT`` (epoch seconds), POSTs the body once (stdlib only, so start-up is cheap and
nothing is shared with any other process: no pool, no event loop, no lock) and prints one
JSON line: when it sent, when it finished, the HTTP status and any error.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from typing import Any

__all__ = ["main"]


def main(argv: list[str]) -> int:
    url, body_path, start_at = argv[0], argv[1], float(argv[2])
    key = os.environ.get(argv[3], "EMPTY") if len(argv) > 3 else "EMPTY"
    data = open(body_path, "rb").read()  # noqa: SIM115
    req = urllib.request.Request(url, data=data, headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {key}"})
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    sent = time.time()
    out: dict[str, Any] = {"pid": os.getpid(), "start_at": start_at, "sent": sent, "status": None, "error": None}
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            body = json.loads(resp.read())
            out["status"] = resp.status
            out["completion_tokens"] = (body.get("usage") or {}).get("completion_tokens")
    except urllib.error.HTTPError as exc:
        out["status"], out["error"] = exc.code, str(exc)[:200]
    except (urllib.error.URLError, OSError, ValueError) as exc:
        out["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    out["done"] = time.time()
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
