"""Object stores (S3, GCS, any fsspec URL) as the engine opens them, for raw sources
(`shardline.data.objects`) and streamed shards (`shardline.stream.remote`) alike.

Contract: credentials and endpoint come from the environment only (AWS_ACCESS_KEY_ID,
AWS_ENDPOINT_URL, ...); `aws_env` turns the EC2 metadata probe off when none are configured.
fsspec and its store packages are imported only when a store is opened, or a URL checked:
`uri_problem` says why a URL cannot be opened here (a scheme fsspec does not know, or its package
not installed: what to install), for params validation and for `filesystem`, which refuses such a
URL with that line (BadInput) instead of fsspec's ValueError or ImportError. Opened with a retry
policy (shardline.core.retry), an S3 client gets its timeouts. `check_bucket` refuses a store
whose bucket does not exist, in one line naming the field that chose it: the line never makes a
bucket (s3fs and gcsfs make one when asked for a folder in it).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

from shardline.core import extras, retry
from shardline.core.errors import BadInput, DownloadError

# What to install for a store's scheme: the extra this project declares, else the package itself.
INSTALL = {"s3": extras.install("s3fs"), "s3a": extras.install("s3fs"), "gs": "pip install gcsfs",
           "gcs": "pip install gcsfs", "az": "pip install adlfs", "abfs": "pip install adlfs"}

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


def uri_problem(uri: str, local: bool = True) -> str | None:
    """Why fsspec cannot open `uri` in this environment, or None: each scheme of it (a chained
    URL has several) must be one fsspec knows, and its package must import. `local`: whether a
    local path would do instead (the message offers one)."""
    import fsspec
    from fsspec.core import split_protocol

    for part in uri.split("::"):
        scheme = split_protocol(part)[0]
        if scheme is None:
            continue  # a local path
        try:
            fsspec.get_filesystem_class(scheme)  # imports the package: a missing one fails here, not mid-run
        except ValueError:
            return (f"{uri!r}: {scheme}:// is not a scheme fsspec knows; use s3://, gs://, file://"
                    + (", another fsspec URL, or a local path" if local else " or another fsspec URL"))
        except ImportError as e:
            install = INSTALL.get(scheme) or f"install the package fsspec names ({e})"
            return f"{uri!r}: {scheme}:// needs a package that is not installed here; {install}"
    return None


def filesystem(uri: str, policy: retry.Policy | None = None):
    """(fsspec filesystem, root path) for `uri`; an S3 URL gets aws_env() first, and with a
    `policy` its timeouts (the caller's loop retries what a body read meets: retry.s3_options). A URL
    this environment cannot open is BadInput (`uri_problem`)."""
    import fsspec

    problem = uri_problem(uri)
    if problem:
        raise BadInput(problem)
    options = {}
    if uri.split("://", 1)[0] in ("s3", "s3a"):
        aws_env()
        options = retry.s3_options(policy) if policy is not None else {}
    fs, root = fsspec.core.url_to_fs(uri, **options)
    if options:  # an instance of its own (its options differ from a policy-less one's): its body reads are ours
        fs.retries = retry.S3FS_TRIES
        _guard_listings(fs.s3)
    return fs, root.rstrip("/")


def _guard_listings(client) -> None:
    """A listing page that arrives without the field every S3 listing answer has (IsTruncated) was
    cut on the way, to nothing: botocore reads an empty body as an empty page, which would end the
    listing short (objects silently missing, or 'matched no objects'). Raised as a transient fault
    instead, so the listing is asked again (botocore's own event hook, on this client)."""
    if getattr(client, "_shardline_guarded", False):
        return

    def check(parsed: dict, **_) -> None:
        if parsed.get("ResponseMetadata", {}).get("HTTPStatusCode") == 200 and "IsTruncated" not in parsed:
            raise retry.ShortAnswer("a listing page arrived without its IsTruncated field: cut on the way")

    for operation in ("ListObjectsV2", "ListObjectVersions", "ListObjects"):
        client.meta.events.register(f"after-call.s3.{operation}", check)
    client._shardline_guarded = True


BUCKETED = {"s3": "aws s3 mb", "s3a": "aws s3 mb", "gs": "gcloud storage buckets create",
            "gcs": "gcloud storage buckets create"}  # stores whose first name is a bucket: what makes one


def check_bucket(uri: str, what: str, policy: retry.Policy | None = None) -> None:
    """BadInput naming `what` (the field or argument that chose `uri`) when the store says the
    bucket `uri` names does not exist. Why here and not at the first write: s3fs and gcsfs create a
    missing bucket when asked to make a folder in it, and a typo in a bucket's name would then leave
    the data where nobody looks, billed; a read would find nothing and say so in other words
    ("matched no objects"). A store that will not say (403: credentials that may write but not list)
    is left to the requests themselves; a transient fault is retried under `policy`."""
    scheme = uri.split("://", 1)[0] if "://" in uri else ""
    if scheme not in BUCKETED:
        return  # a local path or file://, whose folders are made; or a store without buckets
    fs, root = filesystem(uri, policy)
    bucket = root.split("/", 1)[0]
    if not bucket:
        raise BadInput(f"{what} {uri}: names no bucket; give {scheme}://bucket/prefix")

    def ask() -> None:
        if scheme.startswith("s3"):
            fs.call_s3("head_bucket", Bucket=bucket)  # s3fs's exists() would call any failure "absent"
        else:
            fs.info(bucket)

    try:
        retry.call(f"{uri}: its bucket", ask, policy or retry.STORE)
    except FileNotFoundError:
        raise BadInput(f"{what} {uri}: the bucket {bucket!r} does not exist (the line makes no bucket); create it "
                       f"({BUCKETED[scheme]} {scheme}://{bucket}), or name a bucket that exists") from None
    except DownloadError:
        raise  # the store stayed unreachable past the retry policy: one line, transient
    except Exception:  # noqa: BLE001 - a 403, the client's own types: the requests that follow say what they meet
        return
