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
  changes while it is fetched fails the fetch (transient: the next run lists it afresh). Transient faults
  (network, timeouts, throttling) are retried as `shardline.data.http` retries them: tries in a
  row without progress are bounded, a try that adds bytes resets the count.
- `hub_snapshot(spec)`: `hf://datasets/<repo>@<revision>/<glob>` through huggingface_hub's own
  cache: the revision is resolved to a commit (pinned in the manifest) and only the files the
  glob names are fetched, as files. With HF_HUB_OFFLINE=1 the local Hub cache answers alone.
  `hub_folder` is that resolution alone, which dataset sources (`shardline.data.hfdatasets`) share.
"""

from __future__ import annotations

import fnmatch
import os
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import unquote

from shardline.core import chaos, fsio
from shardline.core.errors import BadInput, DownloadError, is_transient
from shardline.core.layout import partial_note_of, partial_of
from shardline.data import http

_CHUNK = 1 << 20
_GLOB = set("*?[")


class _Changed(Exception):
    """The object is not the one listed: a new version, to be listed and fetched afresh."""


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


def _fs(uri: str):
    from shardline.core.stores import filesystem  # the shard store's too: same credentials, same errors

    try:
        return filesystem(uri)
    except (ImportError, ValueError) as e:
        scheme = uri.split("://", 1)[0]
        pkg = {"s3": "s3fs (pip install 'shardline[s3]')", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs"}.get(scheme)
        raise BadInput(f"{uri}: cannot open {scheme}:// ({e}); " + (f"install {pkg}" if pkg else "check the URL")) \
            from None


def _no_access(uri: str, e: BaseException) -> BadInput:
    return BadInput(f"{uri}: {type(e).__name__}: {e}; check the URL, and the credentials and endpoint in the "
                    "environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, ...)")


def list_objects(uri: str) -> list[Object]:
    fs, root = _fs(uri)
    scheme = uri.split("://", 1)[0]
    fs.invalidate_cache()  # fsspec reuses a filesystem and its listings within a process: ask the store afresh
    try:
        if _GLOB & set(root):
            parts = root.split("/")
            base = "/".join(parts[: next(i for i, p in enumerate(parts) if _GLOB & set(p))])
            infos = fs.glob(root, detail=True)
        elif fs.isdir(root):
            base, infos = root, fs.find(root, detail=True)
        else:
            base, infos = root.rsplit("/", 1)[0], {root: fs.info(root)}
    except FileNotFoundError:
        infos = {}
    except Exception as e:  # noqa: BLE001 - botocore/gcs raise their own types for credentials and access
        if _transient(e):
            raise DownloadError(f"{uri}: cannot list ({type(e).__name__}: {e}); the store did not answer: "
                                "check the network and AWS_ENDPOINT_URL; a retry may succeed", transient=True) from None
        raise _no_access(uri, e) from None
    files = sorted((p, i) for p, i in infos.items() if i.get("type", "file") == "file" and not p.endswith("/"))
    return [Object(p[len(base):].lstrip("/"), f"{scheme}://{p}", _identity(i)) for p, i in files]


def _transient(e: BaseException) -> bool:
    name = type(e).__name__
    return is_transient(e) or any(w in name for w in ("Connection", "Timeout", "Throttl", "SlowDown", "ServerError"))


def fetch_object(url: str, dest: Path, meta: dict, policy: http.RetryPolicy = http.RetryPolicy(),
                 log: Callable[[str], None] = lambda _: None, sleep: Callable[[float], None] = time.sleep,
                 rng: random.Random | None = None) -> str:
    """Fetch `url` (whose identity in the store is `meta`) to `dest`; its sha256."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part, note = partial_of(dest), partial_note_of(dest)
    if part.exists() and (not note.exists() or fsio.read_json(note) != meta):
        part.unlink()  # bytes of another version of the object: never continued
    fsio.write_json(note, meta)
    fs, path = _fs(url)
    patience, tries = http.Patience(url, part, policy, rng, sleep, log), 0
    while True:
        tries += 1
        try:
            have = part.stat().st_size if part.exists() else 0
            if have:
                log(f"{url}: resuming at byte {have}")
            with fs.open(path, "rb", **({"version_id": meta["version"]} if "version" in meta and getattr(fs, "version_aware", False)
                                        else {})) as src, open(part, "ab") as raw:
                src.seek(have)
                out = chaos.partway(raw, "download.body")
                while chunk := src.read(_CHUNK):
                    out.write(chunk)
            got = part.stat().st_size
            fs.invalidate_cache(path)  # ask the store, not the listing this process made
            now = _identity(fs.info(path))
            if got != meta["size"] or now.get("etag") != meta.get("etag") or now["size"] != meta["size"]:
                part.unlink()
                note.unlink()
                raise _Changed(f"{url}: the object changed while it was fetched ({got} bytes, listed as "
                               f"{meta['size']}); run the download stage again to fetch the new one")
            break
        except _Changed as e:
            raise DownloadError(str(e), transient=True) from None
        except FileNotFoundError as e:
            raise DownloadError(f"{url}: gone from the store ({e}); run the download stage again") from None
        except Exception as e:  # noqa: BLE001 - the store's client raises its own types
            if not _transient(e):
                raise DownloadError(f"{url}: {type(e).__name__}: {e}; check the URL and the credentials "
                                    "in the environment") from None
            patience.failed(tries, e)
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
