"""Where a run sends its requests, checked before anything is started or written: endpoint URLs,
routing names and the Ray address, at the bottom of ``run/`` so every caller checks them alike."""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

from nlq2sql.errors import InputError
from nlq2sql.inputs import decode_line, regular_file

__all__ = ["ROUTINGS", "ReplicaSpec", "check_address", "check_endpoint_url", "parse_endpoints_file"]

#: How an item picks its replica. least-inflight: the one with fewest requests in flight
#: (ties: the lowest index); round-robin: in turn; sticky: by a hash of the item id, so an
#: item is answered by the same replica in every run (reproducible attribution).
ROUTINGS = ("least-inflight", "round-robin", "sticky")
#: A URL's user-info part (``//user:password@``), looked for before the URL is parsed or echoed.
_USERINFO = re.compile(r"//[^/?#]*@")


@dataclass(frozen=True)
class ReplicaSpec:
    """One endpoint of a fleet: its URL, and optionally its own model name and key variable."""

    url: str
    model: str | None = None
    api_key_env: str | None = None


def parse_endpoints_file(path: str) -> tuple[ReplicaSpec, ...]:
    """``--endpoints-file``: one ``URL [MODEL [KEY_ENV]]`` per line; ``#`` comments, blanks skipped."""
    specs: list[ReplicaSpec] = []
    try:
        raw_lines = open(regular_file(path, "endpoints file"), "rb").read().splitlines()  # noqa: SIM115
    except OSError as exc:
        raise InputError(f"cannot read endpoints file: {exc.strerror}", path=path) from None
    for lineno, raw in enumerate(raw_lines, start=1):
        line = decode_line(raw, path=path, line=lineno, offset=0).split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) > 3:
            raise InputError(f"expected 'URL [MODEL [KEY_ENV]]', got {len(parts)} fields",
                             path=path, line=lineno)
        try:
            check_endpoint_url(parts[0])
        except InputError as exc:
            raise InputError(str(exc).removeprefix("--endpoint: "), path=path, line=lineno,
                             field="url") from None
        specs.append(ReplicaSpec(parts[0], parts[1] if len(parts) > 1 else None,
                                 parts[2] if len(parts) > 2 else None))
    if not specs:
        raise InputError("no endpoint in the file", path=path)
    return tuple(specs)


def check_endpoint_url(url: str) -> None:
    """An endpoint must be an http(s) URL with a host (``http://host:8000/v1``) and no
    credentials in it (``user:password@``: the key goes in an environment variable, named with
    ``--api-key-env``, so it is never echoed, logged or recorded in a manifest)."""
    if _USERINFO.search(url):
        raise InputError("the URL must not carry credentials (user:password@host): put the API key in an "
                         "environment variable and name it with --api-key-env (in an endpoints file: its KEY_ENV "
                         "column)", field="--endpoint")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError on a port that is not a number
    except ValueError as exc:
        raise InputError(f"not a valid URL: {url!r} ({exc})", field="--endpoint") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        what = f"scheme {parts.scheme}://" if parts.scheme else "no scheme"
        raise InputError(f"{url!r} is not an http(s) URL ({what}; expected e.g. http://host:8000/v1)",
                         field="--endpoint")


def check_address(address: str | None) -> None:
    """What can be said of ``--ray-address`` without joining the cluster, in one line each.

    ``ray://`` (Ray Client) is refused: its server end is a separate proxy that must match the
    driver's Ray exactly, and here (Ray 2.60, a ``ray start --head`` cluster) it failed after
    30 s with a 23-frame traceback.  Run the driver on the cluster instead (``ray job submit``,
    docs/scaling.md), or give the GCS address.  ``host:port`` must answer a TCP connection."""
    if address is None or address == "auto":
        return
    if "://" in address:
        scheme = address.split("://", 1)[0]
        raise InputError(f"{scheme}:// (Ray Client) is not supported: give the cluster's GCS address "
                         "(HOST:6379, or auto on a node of the cluster), or submit the run as a Ray job "
                         "(ray job submit, see docs/scaling.md)", field="--ray-address")
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InputError(f"expected HOST:PORT (the cluster's GCS address) or auto, got {address!r}",
                         field="--ray-address")
    import socket

    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=3):
            pass
    except OSError as exc:
        raise InputError(f"nothing answers at {address} ({exc.strerror or exc}): is the Ray head running "
                         "(ray start --head)?", field="--ray-address") from None
