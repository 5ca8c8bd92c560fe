"""A small launcher around torchrun (train.nproc_per_node > 1 on one node): rank 0's lines live, the
whole log in a file, and a failure said as one line per cause.

Contract:
- `torchrun(n, args, layout, log)` runs `shardline <args>` as `n` processes under torchrun
  (`--standalone --max-restarts=0`: a failed rank fails the job at once; re-running the stage
  resumes from the last checkpoint, which is all a restart would do). torchrun keeps each rank's
  stdout, stderr and error file under `layout.torchrun_dir` and shows rank 0's on its console, which
  this reads line by line: rank 0's own lines go to `log` as they come, but a Python traceback or
  its `error:` line (said below instead); every line, the agent's own included (its banner, its
  "Sending process ... SIGTERM", its ChildFailedError report), goes to `layout.torchrun_log`.
- When torchrun fails: one line per cause, `train: rank R of N on HOST: <reason>`, from the error
  file a failing rank leaves (`write_error`, which shardline.cli.main calls with the rank's one line)
  and torchrun's report of each rank (exit code, signal, host). Ranks that said the same reason are
  one line ("ranks 0, 1"). A rank that torchrun stopped because another failed (SIGTERM), or that
  lost its peers because another rank stopped, is no cause of its own (said only when nothing else
  is). Then a ShardlineError naming the log file, transient when every cause is.
- `write_error(line, transient)` is the rank's side: the error file torchrun names in
  TORCHELASTIC_ERROR_FILE, in torchrun's own format, so that under a torchrun run by hand (many
  nodes) torchrun's report also quotes the rank's line instead of a link to its docs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from shardline.core.errors import ShardlineError
from shardline.core.layout import Layout

Log = Callable[[str], None]
RANK0 = "[default0]:"  # how torchrun's --tee marks rank 0's lines on its console
PEERS_LOST = "lost the other ranks"
OWN = re.compile(r"^train: rank \d+ of \d+ on \S+: ")  # how a rank names itself in its line (Dist.lost_peers)
# one failure in torchrun's report: "[i]:", then its time, host, rank (local_rank) and exit code
FAILURE = re.compile(r"host\s*:\s*(?P<host>\S+)\s*\n\s*rank\s*:\s*(?P<rank>\d+) \(local_rank: (?P<local>\d+)\)\s*\n"
                     r"\s*exitcode\s*:\s*(?P<code>-?\d+)")


def write_error(line: str, transient: bool) -> None:
    """The rank's one line in the error file torchrun reads (TORCHELASTIC_ERROR_FILE), when it runs under one."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"message": line, "timestamp": int(time.time()),
                                          "shardline": {"transient": transient}}))


def torchrun(n: int, args: list[str], layout: Layout, log: Log) -> None:
    logs, full = layout.torchrun_dir, layout.torchrun_log
    shutil.rmtree(logs, ignore_errors=True)  # the last launch's: causes are read from it
    logs.mkdir(parents=True)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", "--max-restarts=0",
           f"--log-dir={logs}", "--tee=3", "--local-ranks-filter=0", "--no-python",
           str(Path(sys.executable).with_name("shardline")), *args]
    log(f"train: launching {n} processes: {' '.join(cmd)}")
    with open(full, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        agent = _relay(proc.stdout, out, log)
        code = proc.wait()
    if code:
        causes = _causes(agent, layout, n)
        for _, line in causes:
            log(f"train: {line}")
        which = "the cause above" if len(causes) == 1 else f"the {len(causes)} causes above" if causes else "no cause said"
        e = ShardlineError(f"train: torchrun with {n} processes failed ({which}); every rank's lines and torchrun's "
                           f"own are in {layout.rel(full)}")
        e.transient = bool(causes) and all(t for t, _ in causes)  # a re-run resumes from the last checkpoint
        raise e


def _relay(lines, out, log: Log) -> str:
    """Copy every line to `out`; rank 0's own to `log` (not a traceback, not its error line); return the
    agent's lines (not any rank's), where its report of the failed ranks is."""
    agent, in_traceback = [], False
    for line in lines:
        out.write(line)
        out.flush()
        line = line.rstrip("\n")
        if not line.startswith(RANK0):
            if not line.startswith("[default"):
                agent.append(line)
            continue
        said = line[len(RANK0):]
        if said.startswith("Traceback (most recent call last):"):
            in_traceback = True
        elif in_traceback and not said.startswith((" ", "\t")):
            in_traceback = not re.match(r"[\w.]+(Error|Exception|Interrupt|Exit)\b", said)  # its last line
        elif not in_traceback and not said.startswith("error: "):
            log(said)
    return "\n".join(agent)


def _said(layout: Layout, local: int) -> dict | None:
    """What rank `local` wrote in its error file (write_error), if anything."""
    for path in layout.torchrun_errors(local):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("message"), str):
            return {"line": data["message"].removeprefix("error: "),
                    "transient": bool((data.get("shardline") or {}).get("transient"))}
    return None


def _causes(agent: str, layout: Layout, n: int) -> list[tuple[bool, str]]:
    """(transient, "rank R of N on HOST: reason") per cause, identical reasons merged."""
    found: dict[str, tuple[bool, list[int], str]] = {}
    consequences: dict[str, tuple[bool, list[int], str]] = {}
    for m in FAILURE.finditer(agent):
        rank, local, code, host = int(m["rank"]), int(m["local"]), int(m["code"]), m["host"]
        said = _said(layout, local)
        if said is not None:
            reason, transient = said["line"], said["transient"]
        elif code < 0:
            reason, transient = f"killed by signal {-code} ({_signal(-code)})", False
        else:
            reason, transient = f"exited with status {code}, saying nothing of why (its lines are in the log)", False
        aside = (code == -signal.SIGTERM and said is None) or PEERS_LOST in reason
        bucket = consequences if aside else found
        key = f"{host}\0{OWN.sub('', reason)}"  # a rank's own words without its own rank: merged across ranks
        t, ranks, _ = bucket.get(key, (transient, [], host))
        bucket[key] = (t and transient, ranks + [rank], host)
    out = []
    for key, (transient, ranks, host) in (found or consequences).items():
        reason = key.split("\0", 1)[1]
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, sorted(ranks)))}"
        out.append((transient, f"{who} of {n} on {host}: {reason}"))
    return out


def _signal(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "an unknown signal"
