"""parts.address as the client of `parts.runner` takes it (shardline.core.sections_run.Parts).

A Dask scheduler is `scheme://host:port` (tcp:// unless TLS or UCX); Dask reads a bare `host:port`
as tcp://, so that is accepted and written so. A Ray cluster is `ray://host:port` (its client
server), `auto`, or a bare `host:port` (its GCS, from a node of the cluster). What a person copies
from elsewhere is refused in one line naming the form wanted: a dashboard's http:// page (Dask's
`http://host:8787/status`), another runner's address, an address without a port (which port the
scheduler listens on is the user's to say: a default guessed would connect elsewhere, or time out).
"""

from __future__ import annotations

DASK_SCHEMES = ("tcp", "tls", "ucx", "ws", "wss", "inproc")  # distributed's comm backends


def scheduler_address(v: str, runner: str) -> str:
    """parts.address as `runner`'s client takes it: a Dask scheduler's `scheme://host:port` (a bare
    `host:port` is Dask's own tcp:// and is written so), or a Ray address (`ray://host:port`, `auto`,
    a bare `host:port` of its GCS). Anything else is a ValueError saying which form to give: a
    dashboard's http:// page, another runner's address, an address without a port."""
    scheme, sep, rest = v.strip().partition("://")
    scheme, rest = (scheme.lower(), rest) if sep else ("", v.strip())
    host, colon, port = rest.split("/", 1)[0].rpartition(":") if ":" in rest else (rest.split("/", 1)[0], "", "")
    where = f"{v!r}"
    if scheme in ("http", "https"):
        board = "the Dask dashboard's page" if runner == "dask" else "a dashboard's page (Ray's jobs API)"
        want = (f"the scheduler's, tcp://{host or 'HOST'}:8786 by default (the dashboard's Info tab, or `dask "
                "scheduler`'s 'Scheduler at:' line, says which)") if runner == "dask" else \
            f"ray://{host or 'HOST'}:10001 (Ray's client server), or auto on a node of the cluster"
        raise ValueError(f"{where} is {board}, not an address a client connects to; give {want}")
    if runner == "dask":
        if scheme == "ray" or v.strip() == "auto":
            raise ValueError(f"{where} is a Ray address, and parts.runner is dask; give the Dask scheduler's, "
                             "tcp://HOST:8786, or set runner: ray")
        if scheme and scheme not in DASK_SCHEMES:
            raise ValueError(f"{where}: {scheme}:// is no Dask scheduler's scheme; give tcp://HOST:8786")
        if scheme != "inproc" and not (colon and port.isdigit()):
            raise ValueError(f"{where} names no port; give the scheduler's, tcp://{host or 'HOST'}:8786 (its default)")
        return v.strip() if scheme else f"tcp://{v.strip()}"  # what Dask reads a bare host:port as
    if runner == "ray":
        if scheme in DASK_SCHEMES:
            raise ValueError(f"{where} is a Dask address, and parts.runner is ray; give ray://HOST:10001 or auto, "
                             "or set runner: dask")
        if scheme not in ("", "ray") or (v.strip() != "auto" and not (colon and port.isdigit())):
            raise ValueError(f"{where}: give ray://HOST:10001 (Ray's client server), HOST:6379 on a node of the "
                             "cluster, or auto")
    return v.strip()
