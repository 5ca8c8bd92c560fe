"""A real Dask cluster on 127.0.0.1 for tests and benchmarks: `dask scheduler` and `dask worker`
processes started as a user would, each worker single-threaded (optionally pinned to a core, in
a working directory of its own, with paths of this machine hidden from it, with flags and
environment of its own)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent


class DaskCluster:
    def __init__(self, tmp: Path, workers: int = 2, *, env: dict | None = None, worker_env: dict | None = None,
                 worker_cmd: list[str] | None = None, cores: list[int] | None = None, name: str = "dask",
                 own_dirs: bool = False, hide: tuple[Path, ...] = (), per_worker: list[tuple[dict, list[str]]] = ()):
        """`cores`: one worker per listed core, pinned with taskset (as if each were its own node).
        `own_dirs`: each worker runs in a folder of its own under `tmp`. `hide`: folders each worker
        must not see, each covered by an empty tmpfs in a mount namespace of the worker's own
        (`unshare -m`; root only: see `can_hide`). `per_worker`: (env additions, extra flags) for
        the first workers."""
        env = env or dict(os.environ)
        self.procs: list[subprocess.Popen] = []
        self.file = tmp / f"{name}-scheduler.json"
        self.log = open(tmp / f"{name}.log", "ab")
        self._spawn([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                     "--scheduler-file", str(self.file)], env)
        deadline = time.time() + 60
        while not self.file.exists():
            if time.time() > deadline:
                raise RuntimeError(f"dask scheduler did not start; see {tmp / f'{name}.log'}")
            time.sleep(0.2)
        self.address = json.loads(self.file.read_text())["address"]
        cmd = worker_cmd or [str(BIN / "dask"), "worker"]
        pins = [["taskset", "-c", str(c)] for c in cores] if cores else [[]] * workers
        cover = ["unshare", "-m", "sh", "-c", 'for d in "$@"; do case "$d" in --) shift; break;; esac; '
                 'mount -t tmpfs tmpfs "$d" || exit 1; shift; done; exec "$@"', "hide", *map(str, hide), "--"] if hide else []
        for i, pin in enumerate(pins):
            more_env, flags = per_worker[i] if i < len(per_worker) else ({}, [])
            cwd = tmp / f"{name}-worker-{i}" if own_dirs else tmp
            cwd.mkdir(exist_ok=True)
            self._spawn([*pin, *cover, *cmd, self.address, "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1",
                         *flags], {**(worker_env or env), **more_env}, cwd=cwd)
        from distributed import Client

        with Client(self.address, timeout=60) as c:
            c.wait_for_workers(len(pins), timeout=120)

    @staticmethod
    def can_hide() -> bool:
        """Whether `hide` works here: unshare and a tmpfs mount need root (CAP_SYS_ADMIN)."""
        try:
            return subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /mnt"],
                                  capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def _spawn(self, cmd: list[str], env: dict, cwd: Path | None = None) -> None:
        self.procs.append(subprocess.Popen(cmd, env=env, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT,
                                           start_new_session=True))

    def close(self) -> None:
        """The workers, then the scheduler. A worker still running a task (a test's hung part, a
        part whose caller gave up) cannot close, and its nanny kills it only after 8 s: each
        test's teardown took 8 s. A worker not gone within 3 s is killed with its nanny (their
        process group); an idle one is gone in well under a second."""
        for group, grace in ((self.procs[1:], 3.0), (self.procs[:1], 20.0)):
            for p in group:
                p.terminate()
            deadline = time.time() + grace
            for p in group:
                try:
                    p.wait(timeout=max(0.1, deadline - time.time()))
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
        self.log.close()
