"""Object storage for streamed shards (loader.shards_uri): where they live, how to reach it.

Contract:
- `shards_uri` is any fsspec URL laid out like data/shards (`<uri>/<source>/index.json`,
  `<uri>/<source>/<shard file>`). Order and data version come from those index files exactly as
  from local ones, so streamed batches are the local batches, bit for bit (shardline.stream.shardcache
  fetches, verifies and caches the shards themselves).
- Credentials and endpoint come from the environment only (`shardline.core.stores`). No Prefect,
  no DVC.
- Every read and write is retried on transient faults under `Remote.policy` / `policy` (params'
  store section; shardline.core.retry, shardline.core.transfer); an index that arrives unreadable
  is read again, and is BadInput only when two reads agree on its bytes.
- Errors name the URL and say what to do (FetchError; transient ones may be retried); a
  push-shards target that refuses the write (permission, read-only, full) is a PathError naming it.
- `read_indexes` is how every reader (the loader, eval) opens shard indexes, from the store or
  from disk; their format is shardline.core.shardformat's, and so is the check of its version
  (an index of another format version is BadInput naming its path or URL, never a misread).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from shardline.core import fsio, retry, shardformat, transfer
from shardline.core.errors import BadInput, DownloadError, PathError, ShardlineError, os_error_line
from shardline.core.layout import INDEX, index_of
from shardline.core.stores import check_bucket, filesystem


class FetchError(DownloadError):
    """The store could not be read (missing object, no credentials, network); names the URL."""


def fetch_failed(url: str, e: BaseException) -> FetchError:
    """The error for a failed read of `url` from the store: names it and what to do, and is
    transient (retried) when the cause is."""
    hint = ("not in the store: upload data/shards there or fix loader.shards_uri" if isinstance(e, FileNotFoundError)
            else "check the network and the AWS_* credentials/endpoint in the environment")
    return FetchError(f"{url}: {retry.one_line(e)}; {hint}", transient=retry.transient(e))


def _put_failed(uri: str, target: str, e: BaseException) -> ShardlineError:
    """The error for a failed write of `target` under push-shards' `uri`: a path that refuses it
    (permission, read-only, full, not a folder) in os_error_line's words naming the URI; the
    network and credentials (FetchError) otherwise."""
    if isinstance(e, OSError) and not retry.transient(e):
        return PathError(os_error_line(e, uri, "push-shards"))
    return fetch_failed(target, e)


@dataclass(frozen=True)
class Remote:
    """Where streamed shards come from and how they are cached; picklable (goes to workers)."""

    uri: str
    cache_dir: str
    cache_mb: float = 4096.0
    prefetch: int = 2
    policy: retry.Policy = retry.STORE  # params.store: retries and timeouts of each read


def whole(remote: Remote, rel: str) -> bytes:
    """Every byte of object `rel` under `remote.uri`, a fault mid-body continued by Range under
    `remote.policy`; a failure is a FetchError naming its URL."""
    fs, root = filesystem(remote.uri, remote.policy)
    url = f"{remote.uri.rstrip('/')}/{rel}"
    try:
        return transfer.whole(fs, f"{root}/{rel}", policy=remote.policy, what=url, error=FetchError)
    except ShardlineError:
        raise
    except Exception as e:
        raise fetch_failed(url, e) from e


def read_indexes(shards_dir: str | Path, names: Sequence[str], remote: Remote | None = None,
                 missing: str = "") -> list[dict]:
    """The index of each of `names` (folders under `shards_dir`, or under `remote.uri` when the
    shards stream). A local one that is not there is BadInput "<path>: missing<missing>"; a
    store's is FetchError naming its URL."""
    if remote is None:
        return [shardformat.read_index(Path(shards_dir) / name, missing) for name in names]
    check_bucket(remote.uri, "loader.shards_uri", remote.policy)
    out = []
    for name in names:
        url = f"{remote.uri.rstrip('/')}/{name}/{INDEX}"

        def fetch(name=name) -> bytes:
            return whole(remote, f"{name}/{INDEX}")

        def judge(data: bytes, url=url) -> tuple[str, Exception | None]:
            try:
                shardformat.parse_index(data, url)
                return "", None
            except BadInput as e:  # a format error is no fetch error, once two reads agree on it
                return transfer.digest(data), e

        out.append(shardformat.parse_index(transfer.agreed(url, fetch, judge, policy=remote.policy,
                                                           error=FetchError), url))
    return out


def _stamp(info: dict) -> dict:
    """What a store says of an object that changes whenever the object is written again: its size
    and whichever of ETag, checksum, version and modification time the store reports."""
    keys = ("size", "ETag", "etag", "md5Hash", "crc32c", "VersionId", "generation", "LastModified", "mtime",
            "updated")
    return {k: str(info[k]) for k in keys if info.get(k) not in (None, "")}


def upload_shards(shards_dir: str | Path, uri: str, names: Sequence[str], log=print,
                  policy: retry.Policy = retry.STORE, receipts: str | Path | None = None) -> int:
    """Publish data/shards at `uri` for loader.shards_uri. Per source, the shards go first and
    index.json last, so a reader never finds an index naming shards that are not there yet. A
    shard is not sent again only when `receipts` (a JSON file of this machine's) says this
    machine put these very bytes (sha256) there and the store still describes the object as it
    did right after that put: a size alone would vouch for another version's bytes of the same
    size (fixed-size shards of rebuilt data), and the store would hold old shards under a new
    index. Without receipts every shard is sent. Each request is retried on transient faults
    under `policy` (a PUT is whole or absent). Returns how many files were sent."""
    check_bucket(uri, "push-shards", policy)
    fs, root = filesystem(uri, policy)
    sent = 0
    try:
        put = fsio.read_json(receipts) if receipts else {}
    except (OSError, ValueError):
        put = {}  # only a saving: without it every shard is sent again
    # only a saving: a receipt of another shape vouches for nothing, and its shard is sent again
    put = {u: r for u, r in put.items() if isinstance(r, dict) and isinstance(r.get("store"), dict)} \
        if isinstance(put, dict) else {}

    def request(target: str, fn):
        """`fn()`, a request about `target`, retried; its error naming the URL (or the target path)."""
        try:
            return retry.call(f"{uri.rstrip('/')}{target[len(root):]}", fn, policy, error=FetchError)
        except ShardlineError:
            raise
        except Exception as e:
            raise _put_failed(uri, target, e) from e

    for name in names:
        local = Path(shards_dir, name)
        index = shardformat.verify(local)  # never publish a shard that does not match its own index
        if getattr(fs, "local_file", False):  # a local folder (file://, a path) is made; a store has no folders
            try:
                fs.makedirs(f"{root}/{name}", exist_ok=True)
            except OSError as e:
                raise _put_failed(uri, f"{root}/{name}", e) from e
        for entry in index["shards"]:
            target = f"{root}/{name}/{entry['file']}"
            url = f"{uri.rstrip('/')}/{name}/{entry['file']}"

            def now() -> dict | None:
                fs.invalidate_cache(target)  # a listing cached before our own put would describe the old object
                return _stamp(fs.info(target)) if fs.exists(target) else None

            if put.get(url, {}).get("sha256") == entry["sha256"] and request(target, now) == put[url]["store"]:
                continue
            request(target, lambda: fs.put_file(str(local / entry["file"]), target))
            sent += 1
            if receipts:
                put[url] = {"sha256": entry["sha256"], "store": request(target, now)}
                fsio.write_json(receipts, put)
        index_target = f"{root}/{name}/{INDEX}"
        request(index_target, lambda: fs.put_file(str(index_of(local)), index_target))
        log(f"push-shards: {name}: {len(index['shards'])} shard(s) at {uri.rstrip('/')}/{name}")
    return sent + len(names)
