"""Raw files from object stores (s3://, gs://, any fsspec URL) and the Hugging Face Hub.

Contract:
- `list_objects(uri)`: the files a URL names (one object, every object under a prefix, or a
  glob), each with what identifies its content in the store: size and etag, plus the object
  version (S3 VersionId, GCS generation) where the listing gives one (S3's gives it for a single
  object, not for a prefix or glob). Credentials and endpoint
  come from the environment only (AWS_*, GOOGLE_APPLICATION_CREDENTIALS), as for the shard
  store (`shardline.stream.remote`).
- `fetch_object(url, dest, meta)` leaves a complete, fsynced `dest` or raises. Bytes in flight
  live in `<dest>.part` beside `<dest>.part.json` (the etag they belong to): a later try or run
  continues the part from where it stopped, unless the object changed meanwhile; then the part
  is dropped and the new object fetched whole, never mixed with the old one; an object that
  changes while it is fetched fails the fetch (transient: the next run lists it afresh). "Changed"
  is the store's word (its etag or size, asked after the bytes arrived), never a guess from the
  bytes: the part is read by shardline.core.transfer, in ranges continued by Range after any fault
  (a reset, a stall, an answer cut short) under shardline.core.retry's policy (the download
  section's). A listing is retried so too.
- `hub_snapshot(spec)`: `hf://datasets/<repo>@<revision>/<glob>` through huggingface_hub's own
  cache: the revision is resolved to a commit (pinned in the manifest) and only the files the
  glob names are fetched, as files. With HF_HUB_OFFLINE=1 the local Hub cache answers alone.
  `hub_folder` is that resolution alone, which dataset sources (`shardline.data.hfdatasets`) share.
"""

from __future__ import annotations

import fnmatch
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import unquote

from shardline.core import chaos, fsio, retry, transfer
from shardline.core.errors import BadInput, DownloadError
from shardline.core.layout import partial_note_of, partial_of
from shardline.data import http

_CHUNK = 1 << 20
_GLOB = set("*?[")


@dataclass(frozen=True)
class Object:
    """A file in a store: its path relative to the URL's base, full URL, and identity there."""

    rel: str
    url: str
    meta: dict = field(default_factory=dict)  # size, etag, version: what a changed object changes


def _identity(info: dict) -> dict:
    etag = info.get("ETag") or info.get("etag") or info.get("md5Hash") or info.get("crc32c")
    version = info.get("VersionId") or info.get("version_id") or info.get("generation")
    return {"size": int(info.get("size") or 0), **({"etag": str(etag).strip('"')} if etag else {}),
            **({"version": str(version)} if version not in (None, "null") else {})}


def _fs(uri: str, policy: retry.Policy | None = None):
    from shardline.core.stores import filesystem  # the shard store's too: same credentials, same errors

    try:
        return filesystem(uri, policy)
    except (ImportError, ValueError) as e:
        scheme = uri.split("://", 1)[0]
        pkg = {"s3": "s3fs (pip install 'shardline[s3]')", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs"}.get(scheme)
        raise BadInput(f"{uri}: cannot open {scheme}:// ({e}); " + (f"install {pkg}" if pkg else "check the URL")) \
            from None


def _no_access(uri: str, e: BaseException) -> BadInput:
    return BadInput(f"{uri}: {type(e).__name__}: {e}; check the URL, and the credentials and endpoint in the "
                    "environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, ...)")


def list_objects(uri: str, policy: retry.Policy = retry.Policy()) -> list[Object]:
    fs, root = _fs(uri, policy)
    scheme = uri.split("://", 1)[0]

    def listing() -> tuple[str, dict]:
        fs.invalidate_cache()  # fsspec reuses a filesystem and its listings within a process: ask the store afresh
        try:
            if _GLOB & set(root):
                parts = root.split("/")
                base = "/".join(parts[: next(i for i, p in enumerate(parts) if _GLOB & set(p))])
                return base, fs.glob(root, detail=True)
            if fs.isdir(root):
                return root, fs.find(root, detail=True)
            return root.rsplit("/", 1)[0], {root: fs.info(root)}
        except FileNotFoundError:
            return root, {}

    try:
        base, infos = retry.call(f"{uri}: listing", listing, policy)
    except DownloadError:
        raise
    except Exception as e:  # noqa: BLE001 - botocore/gcs raise their own types for credentials and access
        raise _no_access(uri, e) from None
    files = sorted((p, i) for p, i in infos.items() if i.get("type", "file") == "file" and not p.endswith("/"))
    return [Object(p[len(base):].lstrip("/"), f"{scheme}://{p}", _identity(i)) for p, i in files]


def _noted(note: Path) -> dict | None:
    """The object identity the note beside a partial file holds; None without one, or when it is damaged."""
    try:
        return fsio.read_json(note)
    except (OSError, ValueError):
        return None


def _held(part: Path) -> int:
    try:
        return part.stat().st_size
    except FileNotFoundError:
        return 0


def _now(fs, path: str, url: str, policy: retry.Policy) -> dict:
    """The object's identity in the store now (a HEAD, its listing cache left aside)."""
    def ask() -> dict:
        fs.invalidate_cache(path)
        return _identity(fs.info(path))

    return retry.call(url, ask, policy)


def _same(meta: dict, now: dict) -> bool:
    """Whether the store's identity `now` is the listed `meta`: the same etag (where both have one) and size."""
    return now.get("etag", meta.get("etag")) == meta.get("etag") and now["size"] == meta["size"]


def fetch_object(url: str, dest: Path, meta: dict, policy: retry.Policy = retry.Policy(),
                 log: Callable[[str], None] = lambda _: None, sleep: Callable[[float], None] = time.sleep) -> str:
    """Fetch `url` (whose identity in the store is `meta`) to `dest`; its sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part, note = partial_of(dest), partial_note_of(dest)
    if part.exists() and _noted(note) != meta:
        part.unlink()  # bytes of another version of the object (or of one a damaged note cannot name): never continued
    fsio.write_json(note, meta)
    fs, path = _fs(url, policy)
    have = _held(part)
    if have > meta["size"]:
        part.unlink()  # more than the object holds: not its bytes
        have = 0
    if have:
        log(f"{url}: resuming at byte {have}")
    version = meta["version"] if "version" in meta and getattr(fs, "version_aware", False) else None
    try:
        try:
            with open(part, "ab") as raw:
                transfer.read(fs, path, chaos.partway(raw, "download.body").write, have, meta["size"], policy=policy,
                              what=url, kept=f" ({part.name} is kept and resumes)", version=version, say=log,
                              sleep=sleep)
            now = _now(fs, path, url, policy)
        except DownloadError:
            raise
        except Exception as e:  # noqa: BLE001 - the store's client raises its own types
            now = _now(fs, path, url, policy)  # a range past the end of a shrunk object: a new version
            if _same(meta, now):
                raise DownloadError(f"{url}: {retry.one_line(e)}; check the URL and the credentials in the "
                                    "environment") from None
    except FileNotFoundError as e:
        raise DownloadError(f"{url}: gone from the store ({e}); run the download stage again") from None
    # Ranged reads name no version: the store's etag after them says whether they read the listed one
    if not _same(meta, now):
        part.unlink()
        note.unlink()
        raise DownloadError(f"{url}: the object changed while it was fetched (the store says {now}, the listing "
                            f"said {meta}); run the download stage again to fetch the new one", transient=True)
    digest = fsio.sha256_file(part)
    http.promote(part, dest)
    note.unlink()
    return digest


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")


def hub_folder(repo: str, revision: str, patterns: list[str]) -> Path:
    """The snapshot folder of Hub dataset `repo` at `revision`, named by the commit the revision
    resolves to, holding the files `patterns` name: fetched into huggingface_hub's cache, or with
    HF_HUB_OFFLINE=1 from that cache alone. Raises huggingface_hub's errors (not found, offline, gated)."""
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(repo, repo_type="dataset", revision=revision, allow_patterns=patterns,
                                  cache_dir=os.environ.get("HF_HUB_CACHE"), local_files_only=hub_offline()))


def hub_snapshot(spec: str) -> tuple[str, Path, list[str]]:
    """(commit, snapshot folder, files matching the glob) for `datasets/<repo>@<revision>/<glob>`."""
    org, _, rest = spec.removeprefix("datasets/").partition("/")
    name_rev, _, pattern = rest.partition("/")
    name, _, revision = name_rev.partition("@")
    revision = unquote(revision)  # refs/convert/parquet is written refs%2Fconvert%2Fparquet, as the Hub's URLs do
    if not (spec.startswith("datasets/") and org and name and revision and pattern):
        raise BadInput(f"hf://{spec}: write hf://datasets/<org>/<name>@<revision>/<glob>; the revision pins the "
                       "data version (a branch, tag or commit) and the glob names the files")
    try:
        folder = hub_folder(f"{org}/{name}", revision, [pattern])
    except Exception as e:  # noqa: BLE001 - huggingface_hub's errors: not found, offline, gated
        raise BadInput(f"hf://{spec}: {type(e).__name__}: {e}; check the repo and revision; offline, "
                       "the revision must be in the local Hub cache (HF_HUB_CACHE)") from None
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                   if p.is_file() and fnmatch.fnmatch(str(p.relative_to(folder)), pattern))
    return folder.name, folder, files
