"""Named kill points for crash tests: `point(name)` SIGKILLs this process when the
comma-separated env var SHARDLINE_CHAOS names it (e.g. "checkpoint.files@20"). A real
SIGKILL at an exact moment (mid-checkpoint-write, mid-retention) that a test could not hit
by timing alone; a no-op costing one dict lookup otherwise.
"""

from __future__ import annotations

import os
import signal


def point(name: str) -> None:
    spec = os.environ.get("SHARDLINE_CHAOS")
    if spec and name in spec.split(","):
        os.kill(os.getpid(), signal.SIGKILL)
