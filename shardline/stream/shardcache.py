"""The local cache of streamed shards: fetch, verify on arrival, prefetch, evict. Where the
shards come from, and how to reach it, is shardline.stream.remote's.

Contract:
- A shard streams into a temp file in `cache_dir` (unique per process and fetch), in ranges
  continued after any fault of the store or the network (shardline.core.transfer, under the
  store section's retry policy: loader.shards_uri's Remote.policy), is hashed as it arrives,
  fsynced, and renamed to `<cache_dir>/<sha256>.bin` only if its sha256 matches index.json. A
  mismatch is fetched again: two arrivals with the same wrong bytes (or an object of another size
  than index.json's) raise ShardCorrupt naming shard and URL, and the Reader never maps it; faults
  that outlast the policy raise a FetchError naming the URL and the last error.
  A cache_dir that cannot be made, read or written (permission, read-only, full, quota) is a
  PathError naming loader.cache_dir; the store's faults are FetchErrors naming the URL.
  Content names make concurrent fetches of one shard (workers, several loaders) rename identical
  bytes over one name, and keep shards of two data versions apart.
- A file already in the cache (an earlier run, another worker) is checked per `verify` (sha256 or
  size) before its first use in this process, like a local shard; a bad one is fetched again.
- Prefetch is exact (the order is a pure function): one background thread fetches the current
  step's missing shards in the order Reader.read visits them, then the next `prefetch` distinct
  shards in the order the coming steps first need them.
- Past `cache_mb` (per process: cache_mb / num_workers), the least recently read shards are
  deleted, never one the current step or the prefetch window pins, nor one unread since it
  arrived; a deleted shard is fetched again when needed. The excess is at most the pinned shards.
- When the process ends (the main one, or a DataLoader worker), a fetch in flight is given
  EXIT_WAIT_S to finish, then its temp file is removed: the fetch thread is a daemon, stopped
  wherever it is at exit, and a run that ended with its prefetch mid-shard left that temp behind
  (found by harness/storms.py). A killed process's temps go at the next start (`_scan`).
"""

from __future__ import annotations

import contextlib
import hashlib
import multiprocessing.util
import os
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from shardline.core import fsio, shardformat, transfer
from shardline.core.errors import ShardCorrupt, ShardlineError, on_path
from shardline.core.layout import cached_shard
from shardline.stream.remote import FetchError, Remote, fetch_failed, filesystem

AHEAD_STEPS = 64      # how many coming steps the prefetch window may look through
EXIT_WAIT_S = 2.0     # at the process's end, how long a fetch in flight may take to finish


@dataclass
class Stats:
    fetched: int = 0      # downloads that arrived and verified
    bytes: int = 0        # their bytes
    hits: int = 0         # shards already in the cache dir (checked before first use)
    evicted: int = 0      # cache files this process deleted to stay under the bound
    refetched: int = 0    # downloads of shards this process had evicted
    waits: int = 0        # times the reader blocked on a shard not there yet
    wait_s: float = 0.0   # seconds it blocked


class Fetcher:
    """One process's view of the shard cache, with its background fetch thread."""

    def __init__(self, remote: Remote, sources: Sequence[tuple[str, dict]], *, dtype: np.dtype, width: int,
                 verify: str = "full", share: int = 1):
        self.remote, self.verify, self.dtype, self.width = remote, verify, dtype, width
        self.dir = Path(remote.cache_dir)
        self.budget = remote.cache_mb * 2**20 / share
        # key = source id << 32 | shard, as Reader.read groups blocks
        self.sha = {(s << 32) | i: e["sha256"] for s, (_, ix) in enumerate(sources) for i, e in enumerate(ix["shards"])}
        self.where = {e["sha256"]: (name, e) for name, ix in sources for e in ix["shards"]}
        self.cond = threading.Condition()
        self.lru: OrderedDict[str, int] = OrderedDict()  # cache files this process counts: sha -> bytes, oldest first
        self.used = 0
        self.ready: set[str] = set()      # verified in this process: may be mapped
        self.unread: set[str] = set()     # arrived, not read yet: not evictable
        self.pinned: set[str] = set()     # the current step's shards and the prefetch window
        self.gone: set[str] = set()       # evicted by this process (a later fetch is a re-fetch)
        self.queue: list[str] = []        # to fetch, most urgent first
        self.inflight: str | None = None  # being fetched now
        self.errors: dict[str, BaseException] = {}
        self.arrays: dict[str, np.ndarray] = {}
        self.plan: dict[int, list[str]] = {}  # step start -> the shards it reads (memo for the window)
        self.stats, self.closed, self.fs = Stats(), False, None
        with on_path(self.dir, "loader.cache_dir"):  # one that cannot be made or read: a line naming the field
            self.dir.mkdir(parents=True, exist_ok=True)
            self._scan()
        # the thread holds only a weak reference: a dropped loader's fetcher is collected and its thread ends
        threading.Thread(target=_work, args=(weakref.ref(self),), daemon=True, name="shard-fetch").start()
        # multiprocessing's exit hook, not atexit's: a DataLoader worker ends through it, never atexit
        multiprocessing.util.Finalize(self, _at_exit, args=(weakref.ref(self),), exitpriority=0)

    def _scan(self) -> None:
        """Count what earlier runs left (oldest first: evicted first); drop temps of dead writers."""
        found = []
        for p in self.dir.iterdir():
            with contextlib.suppress(FileNotFoundError):  # another process's rename or eviction came first
                if fsio.TMP_MARK in p.name and not _alive(p.name.rsplit(fsio.TMP_MARK, 1)[1].split("-")[0]):
                    p.unlink()
                elif len(p.stem) == 64 and p == cached_shard(self.dir, p.stem):
                    found.append((p.stat().st_mtime, p.stem, p.stat().st_size))
        for _, sha, size in sorted(found):
            self.lru[sha] = size
            self.used += size

    def _path(self, sha: str) -> Path:
        return cached_shard(self.dir, sha)

    def _shas(self, step: int, keys_at: Callable[[int], Iterable[int]]) -> list[str]:
        if step not in self.plan:
            self.plan[step] = list(dict.fromkeys(self.sha[k] for k in keys_at(step)))
        return self.plan[step]

    def advance(self, step: int, keys_at: Callable[[int], Iterable[int]], stride: int) -> None:
        """The reader is about to read `step`; `keys_at(s)` lists the shard keys it reads at step s
        (in read order) and `stride` is the distance to its next step. Pins this step's shards and
        the next `prefetch` ones first needed after it, and queues those not here yet."""
        for s in [s for s in self.plan if s < step]:
            del self.plan[s]
        current = self._shas(step, keys_at)
        window: list[str] = []
        seen, s, distinct = set(current), step, len(self.where)
        while len(window) < self.remote.prefetch and len(seen) < distinct and s < step + AHEAD_STEPS * stride:
            s += stride
            for sha in self._shas(s, keys_at):
                if sha not in seen:
                    seen.add(sha)
                    window.append(sha)
        window = window[:self.remote.prefetch]
        with self.cond:
            self.pinned = {*current, *window}
            self.queue = [x for x in current + window if x not in self.ready and x != self.inflight]
            for sha in current:  # recency = the last step that read a shard
                if sha in self.lru:
                    self.lru.move_to_end(sha)
            self._evict()
            if self.queue:  # waking the fetch thread for nothing costs the reader a GIL hand-off a step
                self.cond.notify_all()

    def array(self, key: int) -> np.ndarray:
        """The shard as [blocks, seq_len + 1]; waits for its fetch; raises what the fetch raised."""
        sha = self.sha[key]
        a = self.arrays.get(sha)  # no lock needed: a memmap stays valid even if its file is evicted later
        if a is not None:
            return a
        with self.cond:
            while sha not in self.arrays:
                if sha not in self.ready and sha not in self.errors:
                    self.stats.waits += 1
                t0 = time.perf_counter()
                while sha not in self.ready and sha not in self.errors and not self.closed:
                    if sha not in self.queue and sha != self.inflight:
                        self.queue.insert(0, sha)
                        self.cond.notify_all()
                    self.cond.wait()
                self.stats.wait_s += time.perf_counter() - t0
                if sha in self.errors:
                    raise self.errors.pop(sha)
                if self.closed:
                    raise FetchError(f"{self.remote.uri}: the shard fetcher was closed while a read waited")
                try:  # under the lock: the fetch thread cannot evict in between
                    self.arrays[sha] = shardformat.blocks(self._path(sha), self.dtype, self.width)
                except FileNotFoundError:  # another process evicted it after it arrived: fetch it again
                    self._drop(sha)
            self.unread.discard(sha)
            return self.arrays[sha]

    def close(self, timeout: float = 60.0) -> None:
        """Stop fetching; a fetch in flight is let finish (or fail), so no temp file is left behind."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()
            self.cond.wait_for(lambda: self.inflight is None, timeout)

    # ---- under self.cond

    def _drop(self, sha: str) -> None:
        self.used -= self.lru.pop(sha, 0)
        self.ready.discard(sha)
        self.arrays.pop(sha, None)

    def _evict(self) -> None:
        for sha in list(self.lru):
            if self.used <= self.budget:
                return
            if sha in self.pinned or sha in self.unread:
                continue
            self._path(sha).unlink(missing_ok=True)  # a live memmap keeps its pages; the name goes now
            self._drop(sha)
            self.gone.add(sha)
            self.stats.evicted += 1

    def _next(self, timeout: float) -> str | None:
        with self.cond:
            while not self.closed:
                self.queue = [x for x in self.queue if x not in self.ready and x not in self.errors]
                if self.queue:
                    self.inflight = self.queue.pop(0)
                    return self.inflight
                if not self.cond.wait(timeout):
                    return None
            return None

    # ---- on the fetch thread

    def _fetch(self, sha: str) -> None:
        name, entry = self.where[sha]
        try:
            hit = self._cached(sha, entry)
            if not hit:
                self._download(name, entry, self._path(sha))
        except Exception as e:  # noqa: BLE001 (the reader raises it when it needs this shard)
            with self.cond:
                self.errors[sha] = e
                self.inflight = None
                if not self._path(sha).exists():
                    self._drop(sha)
                self.cond.notify_all()
            return
        with self.cond:
            self.inflight = None
            if hit:
                self.stats.hits += 1
            else:
                self.stats.fetched += 1
                self.stats.bytes += entry["bytes"]
                self.stats.refetched += sha in self.gone
            self.used += entry["bytes"] - self.lru.get(sha, 0)
            self.lru[sha] = entry["bytes"]
            self.lru.move_to_end(sha)
            self.ready.add(sha)
            self.unread.add(sha)
            self._evict()
            self.cond.notify_all()

    def _cached(self, sha: str, entry: dict) -> bool:
        path = self._path(sha)
        with contextlib.suppress(FileNotFoundError):
            if path.stat().st_size == entry["bytes"] and (self.verify == "size" or fsio.sha256_file(path) == sha):
                return True
            path.unlink()  # damaged in the cache; the store still has the shard
        return False

    def _download(self, name: str, entry: dict, final: Path) -> None:
        url = f"{self.remote.uri.rstrip('/')}/{name}/{entry['file']}"
        fs, root = self.fs = self.fs or filesystem(self.remote.uri, self.remote.policy)  # made here: its thread's
        path, policy = f"{root}/{name}/{entry['file']}", self.remote.policy

        def arrive() -> tuple[str, ShardCorrupt | None]:
            """One arrival of the shard: its sha256, and what is wrong with it (None: it became `final`)."""
            h = hashlib.sha256()
            try:  # the temp file becomes `final` only if the block ends: a refused shard never does. A
                # fault of the store is a FetchError; one of the cache's disk (full, quota, read-only) an
                # OSError that on_path names as loader.cache_dir, not as the network's
                with on_path(self.dir, "loader.cache_dir"), fsio.atomic_writer(final, unique=True) as out:
                    try:
                        transfer.read(fs, path, lambda b: (h.update(b), out.write(b)), 0, entry["bytes"],
                                      policy=policy, what=url, error=FetchError)
                    except ShardlineError:
                        raise
                    except Exception as e:  # noqa: BLE001 - the store's client raises its own types
                        held = _size(fs, path, url, policy)  # a range past the object's end: is it shorter?
                        raise (_corrupt(url, name, entry, self.remote.uri, f"{held} bytes in the store")
                               if held not in (None, entry["bytes"]) else fetch_failed(url, e)) from e
                    if h.hexdigest() != entry["sha256"]:
                        raise _Refused
            except _Refused:
                return h.hexdigest(), _corrupt(url, name, entry, self.remote.uri, "sha256 mismatch on arrival, the "
                                               f"same bytes twice (got {h.hexdigest()[:12]}…)")
            return h.hexdigest(), None

        # a hash that fails once may be a fault on the way: only the same bytes again are the store's
        transfer.agreed(url, arrive, lambda arrived: arrived, policy=policy, error=FetchError)


class _Refused(Exception):
    """The shard that arrived fails its sha256: its temp file goes."""


def _size(fs, path: str, url: str, policy) -> int | None:
    with contextlib.suppress(Exception):
        return transfer.size(fs, path, policy=policy, what=url, error=FetchError)
    return None


def _corrupt(url: str, name: str, entry: dict, uri: str, what: str) -> ShardCorrupt:
    return ShardCorrupt(
        f"{url}: {what}; index.json says {entry['bytes']} bytes, sha256 {entry['sha256'][:12]}…: shard "
        f"{name}/{entry['file']} refused, nothing from it was read. The store holds other bytes than its "
        f"index.json names: publish the shards again ('shardline push-shards {uri}') or point "
        "loader.shards_uri at the matching data.")


def _work(ref: weakref.ref[Fetcher]) -> None:
    while True:
        fetcher = ref()
        if fetcher is None or fetcher.closed:
            return
        sha = fetcher._next(timeout=0.5)
        if sha is not None:
            fetcher._fetch(sha)
        del fetcher


def _at_exit(ref: weakref.ref[Fetcher]) -> None:
    """Stop fetching; a fetch still in flight after EXIT_WAIT_S loses its temp file (its rename then
    fails, at exit). A fetcher collected before the end had nothing in flight: its thread holds it
    while it fetches."""
    fetcher = ref()
    if fetcher is None:
        return
    fetcher.close(EXIT_WAIT_S)
    with fetcher.cond:
        sha = fetcher.inflight
    if sha is not None:
        final = fetcher._path(sha)
        for tmp in final.parent.glob(f".{final.name}{fsio.TMP_MARK}{os.getpid()}*"):
            tmp.unlink(missing_ok=True)


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ProcessLookupError, ValueError):
        return False
    except PermissionError:
        pass
    return True
