"""The stage frame: progress, skip-if-done markers, and parts on worker processes."""

import functools
import io
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

from shardline.core import fsio, parallel
from shardline.core.progress import Progress
from shardline.data import frame
from shardline.data.clean.stage import run as clean

from tests.conftest import REPO, env_for


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_logs_every_tenth_and_is_silent_for_skipped_parts():
    logs, sunk = [], []
    p = Progress("clean", 20, 20 * 10**6, logs.append, sink=lambda s, f, line: sunk.append(f), stream=io.StringIO())
    for _ in range(4):
        p.advance(10**6, skipped=True)  # 20% already done: nothing said
    assert logs == [] and sunk == []
    for _ in range(16):
        p.advance(10**6)
    assert [ln.split(",")[0] for ln in logs] == [f"clean: {n}/20 parts (4 already done)" for n in (6, 8, 10, 12, 14, 16, 18, 20)]
    assert logs[-1].endswith("20.0/20.0 MB, " + logs[-1].split(", ")[-2] + ", ETA 0:00")
    assert len(sunk) == 16 and sunk[-1] == 1.0 and sunk[0] == 0.25


def test_progress_draws_a_bar_on_a_terminal():
    tty, logs = Tty(), []
    p = Progress("tokenize", 2, 0, logs.append, stream=tty)
    p.advance(5 * 10**6)
    p.advance(5 * 10**6)
    assert logs == []  # the bar replaces the log lines
    out = tty.getvalue()
    assert out.startswith("\r[" + "#" * 10 + " " * 10 + "] tokenize: 1/2 parts, 5.0 MB, ")
    assert "\r[" + "#" * 20 + "] tokenize: 2/2 parts, 10.0 MB, " in out and out.endswith("ETA 0:00\x1b[K\n")


def test_a_marker_vouches_only_for_its_key_and_file_sizes(tmp_path):
    out = tmp_path / "part-00000.bin"
    out.write_bytes(b"12345")
    part = frame.Part("demo", "s/part-00000", "k1", str(tmp_path / "part-00000.json"), 5, None)
    fsio.write_json(part.marker, {"key": "k1", "files": {"part-00000.bin": 5}, "stats": {"n": 1}})
    assert frame.finished(part)["stats"] == {"n": 1}
    assert frame.finished(frame.Part("demo", "s/part-00000", "k2", part.marker, 5, None)) is None
    out.write_bytes(b"1234")
    assert frame.finished(part) is None


def _write(part: frame.Part) -> tuple[list[Path], dict]:
    root, hold = part.work
    Path(root, f"pid-{os.getpid()}").touch()
    if hold:
        _rendezvous(root)
    out = Path(part.marker).with_suffix(".bin")
    fsio.write_bytes(out, part.name.encode())
    return [out], {"n": 1}


_role: str | None = None


def _rendezvous(root: str) -> None:
    """Events instead of sleeps: the worker that takes the first part (A) waits inside it until the
    other worker (B) holds a part too, then runs on; B holds its part until the stage dies. So both
    workers hold parts at the kill (A's third, `demo.part#3`), A finished exactly two parts first,
    and B can finish none after it, however slowly either starts."""
    global _role
    if _role == "A":
        return
    try:
        os.close(os.open(f"{root}/first", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        _role = "A"
    except FileExistsError:
        _role = "B"
    # opening a fifo blocks until its other end is opened: A's read and B's write meet here
    os.close(os.open(f"{root}/meet", os.O_RDONLY if _role == "A" else os.O_WRONLY))
    if _role == "B":
        threading.Event().wait()  # until PR_SET_PDEATHSIG kills this worker with the stage


def run_parts(root: str, hold: bool) -> None:
    """Ten parts on two worker processes (a subprocess of the test runs this); `hold`: A and B above."""
    parts = [frame.Part("demo", f"p{i}", "k", f"{root}/p{i}.json", parallel.POOL_MIN_BYTES, (root, hold))
             for i in range(10)]
    two = functools.partial(parallel.process_map, workers=2)  # two, however many cores this machine has
    markers, skipped = frame.run("demo", parts, _write, two, print)
    print(f"skipped {skipped}")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pid: int) -> None:
    """Until process `pid` exits (a pidfd turns readable then); 60 s is a bound, not a pace."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return
    try:
        select.select([fd], [], [], 60)
    finally:
        os.close(fd)


def test_a_kill_in_a_worker_takes_the_stage_and_its_workers_and_a_rerun_redoes_no_part(tmp_path):
    log = tmp_path / "chaos.log"
    os.mkfifo(tmp_path / "meet")
    cmd = [sys.executable, "-c", f"from tests.integration.test_frame import run_parts; run_parts({str(tmp_path)!r}, True)"]
    env = env_for(SHARDLINE_CHAOS="demo.part#3", SHARDLINE_CHAOS_LOG=str(log), SHARDLINE_CHAOS_DONE_LOG=str(log))
    r = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr
    workers = [int(p.name[4:]) for p in tmp_path.glob("pid-*")]
    assert len(workers) == 2
    for pid in workers:
        _wait_gone(pid)
    assert not any(map(_alive, workers))
    lines = log.read_text().splitlines()
    assert not [ln for ln in lines[lines.index("demo.part#3"):] if ln.startswith("done ")]  # no orphan went on
    done = [ln.split()[2] for ln in log.read_text().splitlines() if ln.startswith("done ")]
    assert "demo.part#3" in log.read_text() and 2 <= len(done) < 10  # the killed worker finished 2 parts first
    rerun = cmd[:-1] + [cmd[-1].replace(", True)", ", False)")]
    r = subprocess.run(rerun, cwd=REPO, env=env_for(SHARDLINE_CHAOS_DONE_LOG=str(log)), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and f"skipped {len(done)}" in r.stdout, r.stderr
    again = [ln.split()[2] for ln in log.read_text().splitlines() if ln.startswith("done ")]
    assert sorted(again) == sorted(f"p{i}" for i in range(10))  # each part made once, over both runs


def test_clean_on_worker_processes_writes_the_same_bytes(tmp_path, code_dir, monkeypatch):
    from shardline.data import download

    from tests.conftest import make_project

    def build(root, mapper):
        params, layout = make_project(root, [{"name": "code", "uri": str(code_dir), "format": "txt"}])
        download.run(params, layout, log=lambda _: None)
        clean.run(params, layout, log=lambda _: None, mapper=mapper)
        return layout

    inline = build(tmp_path / "inline", parallel.thread_map)
    monkeypatch.setattr(parallel, "POOL_MIN_BYTES", 0)
    pooled = build(tmp_path / "pooled", parallel.process_map)
    files = sorted(p.relative_to(inline.clean) for p in inline.clean.rglob("*") if p.is_file())
    assert len(files) > 3 and files == sorted(p.relative_to(pooled.clean) for p in pooled.clean.rglob("*") if p.is_file())
    assert all((inline.clean / f).read_bytes() == (pooled.clean / f).read_bytes() for f in files)


def test_parts_workers_sizes_the_clean_stages_own_pool(tmp_path, monkeypatch):
    """parts.workers on the default runner: one worker is this process (no pool spawned), two a
    pool of two. Before, the clean stage ignored it and spawned one process per core."""
    from shardline.context import RunContext
    from shardline.data import download
    from shardline.orchestration.tasks.invoke import invoke
    from tests.conftest import make_project

    text = tmp_path / "corpus.txt"
    text.write_text("".join(f"Paragraph {i}: a few words of plain text to keep.\n\n" for i in range(400)))
    pools = []

    class Counted(parallel.ProcessPool):
        def __init__(self, workers):
            pools.append(workers)
            super().__init__(workers)

    monkeypatch.setattr(parallel, "ProcessPool", Counted)
    monkeypatch.setattr(parallel, "POOL_MIN_BYTES", 0)  # a pool for the small corpus too
    for workers, spawned in ((1, []), (2, [2])):
        pools.clear()
        params, layout = make_project(tmp_path / f"w{workers}", [{"name": "t", "uri": str(text), "format": "txt",
                                                                     "txt_unit": "blank_lines"}],
                                      clean={"part_mb": 0.005, "dedup": False},
                                      parts={"workers": workers})
        download.run(params, layout, log=lambda _: None)
        summary = invoke("clean", params, layout, RunContext(log=lambda _: None))
        assert summary["sources"]["t"]["parts"] > 2 and pools == spawned
