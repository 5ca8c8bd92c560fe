"""Object storage for streamed shards (loader.shards_uri): where they live, how to reach it.

Contract:
- `shards_uri` is any fsspec URL laid out like data/shards (`<uri>/<source>/index.json`,
  `<uri>/<source>/<shard file>`). Order and data version come from those index files exactly as
  from local ones, so streamed batches are the local batches, bit for bit (shardline.stream.shardcache
  fetches, verifies and caches the shards themselves).
- Credentials and endpoint come from the environment only (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL,
  ...); `aws_env` turns the EC2 metadata probe off when none are configured. fsspec/s3fs are
  imported only when a store is opened. No Prefect, no DVC.
- Errors name the URL and say what to do (FetchError; transient ones may be retried).
"""

from __future__ import annotations

import json
import os
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from shardline.core.errors import DownloadError, is_transient

CRED_VARS = ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE")


class FetchError(DownloadError):
    """The store could not be read (missing object, no credentials, network); names the URL."""


def aws_env(env: MutableMapping[str, str] | None = None) -> MutableMapping[str, str]:
    """Credentials from the environment only: when none are configured (no AWS_ACCESS_KEY_ID,
    AWS_PROFILE or web-identity token in `env`, no shared credentials file), set
    AWS_EC2_METADATA_DISABLED=true, so botocore never probes the EC2 metadata endpoint (seconds
    of timeouts off EC2; an instance role picked up silently on it). An explicit value is kept
    (set it to false to use an instance role). Modifies and returns `env` (default os.environ)."""
    env = os.environ if env is None else env
    creds = Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or Path(env.get("HOME") or Path.home(), ".aws", "credentials"))
    if not any(env.get(k) for k in CRED_VARS) and not creds.expanduser().is_file():
        env.setdefault("AWS_EC2_METADATA_DISABLED", "true")
    return env


def filesystem(uri: str):
    """(fsspec filesystem, root path) for `uri`; an S3 URL gets aws_env() first."""
    import fsspec

    if uri.split("://", 1)[0] in ("s3", "s3a"):
        aws_env()
    fs, root = fsspec.core.url_to_fs(uri)
    return fs, root.rstrip("/")


def fetch_failed(url: str, e: BaseException) -> FetchError:
    """The error for a failed read of `url` from the store: names it and what to do, and is
    transient (retried) when the cause is."""
    hint = ("not in the store: upload data/shards there or fix loader.shards_uri" if isinstance(e, FileNotFoundError)
            else "check the network and the AWS_* credentials/endpoint in the environment")
    return FetchError(f"{url}: {type(e).__name__}: {e}; {hint}", transient=is_transient(e))


@dataclass(frozen=True)
class Remote:
    """Where streamed shards come from and how they are cached; picklable (goes to workers)."""

    uri: str
    cache_dir: str
    cache_mb: float = 4096.0
    prefetch: int = 2


def read_indexes(remote: Remote, names: Sequence[str]) -> list[dict]:
    fs, root = filesystem(remote.uri)
    out = []
    for name in names:
        try:
            out.append(json.loads(fs.cat_file(f"{root}/{name}/index.json")))
        except Exception as e:
            raise fetch_failed(f"{remote.uri.rstrip('/')}/{name}/index.json", e) from e
    return out


def upload_shards(shards_dir: str | Path, uri: str, names: Sequence[str], log=print) -> int:
    """Publish data/shards at `uri` for loader.shards_uri. Per source, the shards go first and
    index.json last, so a reader never finds an index naming shards that are not there yet; a
    shard already stored with the same size is not sent again (its sha256 is checked on every
    fetch anyway). Returns how many files were sent."""
    from shardline.data.shard import verify

    fs, root = filesystem(uri)
    sent = 0
    for name in names:
        local = Path(shards_dir, name)
        index = verify(local)  # never publish a shard that does not match its own index
        for entry in index["shards"]:
            target = f"{root}/{name}/{entry['file']}"
            try:
                if fs.exists(target) and fs.size(target) == entry["bytes"]:
                    continue
                fs.put_file(str(local / entry["file"]), target)
            except Exception as e:
                raise fetch_failed(target, e) from e
            sent += 1
        try:
            fs.put_file(str(local / "index.json"), f"{root}/{name}/index.json")
        except Exception as e:
            raise fetch_failed(f"{root}/{name}/index.json", e) from e
        log(f"push-shards: {name}: {len(index['shards'])} shard(s) at {uri.rstrip('/')}/{name}")
    return sent + len(names)
