"""Object stores (S3, GCS, any fsspec URL) as the engine opens them, for raw sources
(`shardline.data.objects`) and streamed shards (`shardline.stream.remote`) alike.

Contract: credentials and endpoint come from the environment only (AWS_ACCESS_KEY_ID,
AWS_ENDPOINT_URL, ...); `aws_env` turns the EC2 metadata probe off when none are configured.
fsspec and its store packages are imported only when a store is opened.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

CRED_VARS = ("AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE")


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
