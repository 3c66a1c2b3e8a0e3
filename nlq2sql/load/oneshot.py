"""One request from its own OS process, sent at an agreed wall-clock moment (staircase test).

``python -m nlq2sql.load.oneshot URL BODY_JSON_FILE START_AT [API_KEY_ENV]`` sleeps until
``START_AT`` (epoch seconds), POSTs once (stdlib only: nothing shared with another process) and
prints one JSON line: sent, finished, HTTP status, error."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from dataclasses import asdict, dataclass

__all__ = ["Shot", "main"]


@dataclass
class Shot:
    """One process's request: when it was due and sent, when it finished, the HTTP status and
    any error; ``completion_tokens`` only once the server answered.  Printed as one JSON line in
    this key order (``line``) and read back by ``serialization.launch_together`` (``of_line``)."""

    start_at: float
    pid: int | None = None  # None: the worker printed nothing readable
    sent: float | None = None
    status: int | None = None
    error: str | None = None
    completion_tokens: int | None = None
    answered: bool = False  # the server's body was read: ``completion_tokens`` is written
    done: float | None = None

    def line(self) -> str:
        d = asdict(self)
        out = {k: d[k] for k in ("pid", "start_at", "sent", "status", "error")}
        if self.answered:
            out["completion_tokens"] = self.completion_tokens
        return json.dumps(out | {"done": self.done})

    @classmethod
    def of_line(cls, line: str) -> Shot:
        d = json.loads(line)
        return cls(start_at=d["start_at"], pid=d["pid"], sent=d["sent"], status=d["status"], error=d["error"],
                   completion_tokens=d.get("completion_tokens"), answered="completion_tokens" in d, done=d["done"])

    def took_s(self) -> float | None:
        """Sent to finished, when both are known."""
        return self.done - self.sent if self.done is not None and self.sent is not None else None


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
    out = Shot(pid=os.getpid(), start_at=start_at, sent=sent)
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            body = json.loads(resp.read())  # the server's response body: JSON by nature
            out.status = resp.status
            out.completion_tokens = (body.get("usage") or {}).get("completion_tokens")
            out.answered = True
    except urllib.error.HTTPError as exc:
        out.status, out.error = exc.code, str(exc)[:200]
    except (urllib.error.URLError, OSError, ValueError) as exc:
        out.error = f"{type(exc).__name__}: {str(exc)[:200]}"
    out.done = time.time()
    print(out.line(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
