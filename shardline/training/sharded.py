"""Sharded checkpoints through torch.distributed.checkpoint (DCP): each rank writes its own shards.

Contract:
- A sharded checkpoint is a checkpoint (shardline.training.checkpoint: temp dir, manifest last,
  valid iff it verifies) whose model and optimizer live in `dcp/`: DCP's `__<rank>_<i>.distcp`
  files, each written, fsynced and hashed by the rank that holds those shards, and `.metadata`
  from rank 0. Beside them, as in a full checkpoint, rank 0's scaler.pt, rng.pt and
  train_state.json. The manifest lists every file with its bytes and sha256 (the ranks' lists
  gathered), which rank wrote it, and "format": "sharded"; a file in dcp/ it does not list makes
  the checkpoint invalid, as does one it lists that is missing.
- DCP holds tensors only: {"model": model state, "optim": {"state": per parameter name}}. The
  optimizer's param_groups are not saved: they come from params.train (identity refuses a
  change to them) and the LR is set every step. `.metadata` (a pickle) is read by an unpickler
  that admits only DCP's metadata classes, torch sizes and dtypes, and refused (BadInput; verify
  says why) if it declares anything but tensors, which DCP would unpickle unrestricted: a
  checkpoint is data, never code.
- What a rank saves is each part's `state_dict()` (shardline.training.state: under fsdp, DTensor
  shards); no rank ever gathers the full state, so a save costs each rank its shard and one copy
  of it (the snapshot the background write reads while training goes on).
- `write` runs on the saver thread of every rank, over a gloo process group of its own (a
  checkpoint's collectives never interleave with training's). `load` reshards: any world size
  and strategy read any sharded checkpoint (DCP maps saved chunks onto the live layout).
- A checkpoint given as a URL (a str: train.checkpoint_uri, shardline.training.bucket) is written
  and read through DCP's fsspec writer and reader instead, every request under the retry policy
  the URL carries (bucketio.URL.policy; retry.STORE for a plain str): each object written to a
  local temp file, hashed on the way, then put whole (again after a fault); each read fetched in
  ranges continued after a fault (shardline.core.transfer); the same restricted read of .metadata.
  A fault that outlasts the policy is one line naming the object and the last error.
- `full_state` reads the model (or the optimizer) alone into full tensors in one process
  (export, eval, sample, tests), without building a process group.
"""

from __future__ import annotations

import enum
import functools
import io
import pickle
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from shardline.core import chaos, fsio, retry, stores
from shardline.core.errors import BadInput, ShardlineError
from shardline.core.filenames import DCP, DCP_METADATA, dcp_shards
from shardline.training import bucketio
from shardline.training.records import Manifest

if TYPE_CHECKING:  # torch on first use: what lists and verifies checkpoints never needs it (~3 s)
    from torch.distributed.checkpoint.metadata import Metadata


class RankFailed(ShardlineError):
    """Another rank's shard write failed inside DCP (`rank`, its own `error`): that rank reports
    its error itself; this one only knows that the save is lost."""

    def __init__(self, rank: int, error: BaseException):
        self.rank, self.error = rank, error
        super().__init__(f"rank {rank} could not write its shards ({type(error).__name__}: {error})")


def write(ckpt_tmp: Path | str, state: dict, rank: int, group, qualifier: str = "") -> dict[str, dict]:
    """Save this rank's `state` into ckpt_tmp/dcp (every rank calls it; `group` None: one process);
    returns {file: {bytes, sha256}} for the files this rank wrote, each fsynced. A failure on any
    rank inside DCP's write raises on every rank (DCP gathers them): the failed rank's own error
    there, RankFailed on the others. `ckpt_tmp` a store's URL (str: shardline.training.bucket): DCP's
    fsspec writer puts each file there, hashed as it is sent."""
    d = _dcp()
    remote = isinstance(ckpt_tmp, str)
    out = f"{ckpt_tmp.rstrip('/')}/{DCP}" if remote else Path(ckpt_tmp) / DCP
    writer = d.BucketWriter(out, qualifier, _policy(ckpt_tmp)) if remote else d.Writer(out, qualifier)
    with warnings.catch_warnings():  # one process: DCP says it assumes so, which is the point
        warnings.simplefilter("ignore", UserWarning)
        try:
            d.dcp.save(state, storage_writer=writer, process_group=group, no_dist=group is None)
        except d.CheckpointException as e:  # {rank: (exception, traceback)}, the same on every rank
            failed, (err, _) = min(e.failures.items())
            if remote and not isinstance(err, ShardlineError):  # the store's, named by its URL
                err = ShardlineError(f"train.checkpoint_uri {out}: {type(err).__name__}: {err}; check that the "
                                     "bucket exists, the network, and the AWS_* credentials and endpoint")
            if failed == rank:  # its own: an ENOSPC stays an OSError, which the CLI explains in a line
                raise err from None
            raise RankFailed(failed, err) from None
    chaos.disk_full("checkpoint.hash", qualifier)
    if remote:  # what this rank sent (its shards; rank 0 also .metadata), hashed on the way
        return {f"{DCP}/{name}": meta for name, meta in sorted(writer.fs.written.items())}
    mine = sorted(out.glob(dcp_shards(rank))) + ([out / DCP_METADATA] if rank == 0 else [])
    return {f"{DCP}/{p.name}": {"bytes": p.stat().st_size, "sha256": fsio.sha256_file(p)} for p in mine}


def files_check(path: Path | str, manifest: Manifest, present: set[str] | None = None) -> str | None:
    """Why a sharded checkpoint's dcp/ disagrees with its manifest (None: it agrees); `present`:
    the dcp/ files a store lists (a folder's are listed here)."""
    listed = {n for n in manifest.files if n.startswith(f"{DCP}/")}
    if present is None:
        d = Path(path) / DCP
        present = {f"{DCP}/{p.name}" for p in d.iterdir()} if d.is_dir() else set()
    if f"{DCP}/{DCP_METADATA}" not in listed:
        return f"{DCP}/.metadata is not in the manifest"
    extra = sorted(present - listed)
    if extra:
        return f"{extra[0]} is not in the manifest (a rank's file the save did not gather)"
    try:
        metadata(path)
    except BadInput as e:
        return str(e)
    return None


class _MetadataUnpickler(pickle.Unpickler):
    """DCP's .metadata holds its dataclasses, torch.Size, dtypes and paths: nothing else loads
    (names are matched whole: pickle resolves a dotted name through a module's attributes)."""

    def find_class(self, module: str, name: str):
        import torch

        if (module, name) == ("builtins", "getattr"):  # how Python 3.11.2 pickles an enum member
            return _enum_member
        if (module, name) in _ALLOWED or (module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"it refers to {module}.{name}, which a checkpoint never holds")


def _enum_member(cls, name: str):
    """getattr, for what pickle needs it for here: a member of an enum the unpickler admitted."""
    if isinstance(cls, type) and issubclass(cls, enum.Enum) and isinstance(name, str) and name in cls.__members__:
        return cls[name]
    raise pickle.UnpicklingError(f"it asks for {getattr(cls, '__name__', cls)!r}.{name!r}, which is no enum member")


_ALLOWED = {("torch.distributed.checkpoint.metadata", n) for n in (
    "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata", "TensorProperties",
    "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING")} | {
    ("torch.distributed.checkpoint.filesystem", "_StorageInfo"), ("torch", "Size"),
    ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"), ("pathlib", "PurePosixPath"),
    ("pathlib", "WindowsPath"), ("pathlib", "PureWindowsPath"), ("collections", "OrderedDict")}


@functools.cache
def _dcp() -> SimpleNamespace:
    """DCP, and our writers and readers on it, imported on first use: torch.distributed.checkpoint
    brings DTensor, ~1.5 s at the start of every process that reads or writes no sharded
    checkpoint (eval, export, sample: most commands) otherwise."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader, FsspecWriter
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.metadata import Metadata, TensorStorageMetadata

    class Planted:
        """Chaos point checkpoint.dcp in DCP's write phase."""

        def write_data(self, plan, planner):
            chaos.disk_full("checkpoint.dcp", self._qualifier)
            return super().write_data(plan, planner)

    class Writer(Planted, dcp.FileSystemWriter):
        """DCP's file writer, each file fsynced."""

        def __init__(self, path: Path, qualifier: str):
            super().__init__(path, sync_files=True, thread_count=1)
            self._qualifier = qualifier

    class BucketWriter(Planted, FsspecWriter):
        """DCP's fsspec writer into an object store. No sync_files: a PUT that returned is stored,
        and DCP's stand-in for a stream without a file descriptor is os.sync(), of every disk here."""

        def __init__(self, url: str, qualifier: str, policy: retry.Policy):
            stores.aws_env()  # credentials from the environment only, as for every store (no metadata probe)
            super().__init__(url, sync_files=False, thread_count=1)
            self.fs = bucketio.dcp_filesystem(policy)
            self.path = self.fs.init_path(url)
            self._qualifier = qualifier

    class Safe:
        """DCP's .metadata read by _MetadataUnpickler, from a folder or a store alike."""

        def read_metadata(self, *args, **kwargs) -> Metadata:
            path = self._get_metadata_path()
            try:
                with self.fs.create_stream(path, "rb") as f:
                    metadata = _MetadataUnpickler(io.BytesIO(f.read())).load()
            except (pickle.UnpicklingError, EOFError, AttributeError, ImportError, OSError) as e:
                raise BadInput(f"{path}: not DCP metadata this checkpoint can be read from ({e}); "
                               "nothing was loaded") from None
            entries = getattr(metadata, "state_dict_metadata", None)
            if not isinstance(metadata, Metadata) or not isinstance(entries, dict):
                raise BadInput(f"{path}: not DCP metadata ({type(metadata).__name__}); nothing was loaded")
            # DCP unpickles a non-tensor entry with torch.load(weights_only=False): ours hold none
            odd = next((k for k, m in entries.items() if not isinstance(m, TensorStorageMetadata)), None)
            if odd is not None:
                raise BadInput(f"{path}: {odd!r} is not a tensor, and a Shardline checkpoint holds only tensors; "
                               "nothing was loaded")
            if getattr(metadata, "storage_meta", None) is not None:
                metadata.storage_meta.load_id = self.load_id
            return metadata

    class Reader(Safe, dcp.FileSystemReader):
        pass

    class BucketReader(Safe, FsspecReader):
        def __init__(self, url: str, policy: retry.Policy):
            stores.aws_env()
            super().__init__(url)
            self.fs = bucketio.dcp_filesystem(policy)
            self.path = self.fs.init_path(url)

    return SimpleNamespace(dcp=dcp, CheckpointException=CheckpointException, Writer=Writer, Reader=Reader,
                           BucketWriter=BucketWriter, BucketReader=BucketReader,
                           TensorStorageMetadata=TensorStorageMetadata)


def _reader(path: Path | str):
    """DCP's reader of checkpoint `path`'s dcp/: a folder, or a store's URL (str)."""
    d = _dcp()
    if isinstance(path, str):
        return d.BucketReader(f"{path.rstrip('/')}/{DCP}", _policy(path))
    return d.Reader(Path(path) / DCP)


def _policy(url: str) -> retry.Policy:
    """The retry policy a store's URL carries (shardline.training.bucketio.URL), else the store
    section's defaults."""
    return getattr(url, "policy", None) or retry.STORE


def metadata(path: Path | str) -> Metadata:
    return _reader(path).read_metadata()


def load(path: Path | str, parts: dict, world: int) -> None:
    """Load a sharded checkpoint into the live (possibly sharded) stateful `parts`, by their key in
    it ("model", "optim"); every rank calls it. Each part's own `state_dict()` is the template DCP
    loads into, in its live layout."""
    state = {key: part.state_dict() for key, part in parts.items()}
    _load(state, path, no_dist=world == 1)
    for key, part in parts.items():
        part.load_state_dict(state[key])


def full_state(path: Path | str, what: str = "model") -> dict:
    """Full tensors of one part of a sharded checkpoint, in one process: "model" -> {name: tensor};
    "optim" -> {parameter name: {step, exp_avg, exp_avg_sq}}."""
    import torch

    prefix, d = f"{what}." if what == "model" else "optim.state.", _dcp()
    md = metadata(path)
    flat = {k: torch.empty(m.size, dtype=m.properties.dtype) for k, m in md.state_dict_metadata.items()
            if k.startswith(prefix) and isinstance(m, d.TensorStorageMetadata)}
    nested: dict = {}
    for k, t in flat.items():
        if what == "model":
            nested[k[len(prefix):]] = t
        else:
            name, field = k[len(prefix):].rsplit(".", 1)
            nested.setdefault(name, {})[field] = t
    state = {"model": nested} if what == "model" else {"optim": {"state": nested}}
    _load(state, path, no_dist=True)
    return nested


def _load(state: dict, path: Path | str, no_dist: bool) -> None:
    """dcp.load of `state` from checkpoint `path`; a read that failed with an error of ours (a
    store's fault past the retry policy: one line naming the object) is raised as it is, not as
    DCP's wrapper of every rank's traceback."""
    d = _dcp()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        try:
            d.dcp.load(state, storage_reader=_reader(path), no_dist=no_dist)
        except d.CheckpointException as e:
            err = min(e.failures.items())[1][0]
            if isinstance(err, ShardlineError):
                raise err from None
            raise
