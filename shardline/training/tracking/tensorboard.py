"""TensorBoard: event files under <log.dir>/tensorboard/<run name>/, one per process that wrote.

Contract: `open(prior, step, rows, config, tags)` starts a writer whose first event tells every
reader (TensorBoard's own, and tensorboard's EventAccumulator in the tests) to drop what earlier
files hold at or past `durable + 1` (SummaryWriter's purge_step), where `durable` is the last step
known flushed before (the state on record), capped at `step`; then it writes `rows` past
`durable` again from train.jsonl. So whatever a killed or rolled-back process wrote past its last
flush, a reader sees each step once, as train.jsonl has it. `flush()` and `close()` return the
new durable step. The lineage goes in as a text summary at the step each process starts from.

Written with tensorboard's own EventFileWriter and protos, the records torch's SummaryWriter
writes (scalars as simple_value, the purge as a file_version event and a SessionLog START at the
purge step, text through the text plugin): torch.utils.tensorboard would import torch into the
trackers' process, 2-3 s of the CPU a training machine is short of.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from shardline.core.filenames import TENSORBOARD


class TensorBoard:
    def __init__(self, root: Path, run_name: str):
        self.dir = Path(root) / TENSORBOARD / run_name
        self.w, self.last = None, 0

    def _add(self, step: int, **fields) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        self.w.add_event(Event(wall_time=time.time(), step=int(step), **fields))

    def open(self, prior: dict | None, step: int, rows: list, config: dict, tags: dict) -> dict:
        from tensorboard.compat.proto.event_pb2 import SessionLog
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        durable = min(int((prior or {}).get("durable", 0)), step)
        # flushes are ours (flush()): its own timer would make "durable" a guess
        self.dir.mkdir(parents=True, exist_ok=True)
        self.w = EventFileWriter(str(self.dir), max_queue_size=10**6, flush_secs=10**6)
        self._add(durable + 1, file_version="brain.Event:2")  # the purge: readers drop what is at or past it
        self._add(durable + 1, session_log=SessionLog(status=SessionLog.START))
        self._text("shardline/lineage", "```json\n" + json.dumps({**config, "tags": tags}, indent=1) + "\n```", step)
        self.last = durable
        self.log([r for r in rows if r[0] > durable])
        return self.flush()

    def _text(self, tag: str, text: str, step: int) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
        from tensorboard.compat.proto.tensor_pb2 import TensorProto
        from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
        from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData

        meta = SummaryMetadata(plugin_data=SummaryMetadata.PluginData(
            plugin_name="text", content=TextPluginData(version=0).SerializeToString()))
        tensor = TensorProto(dtype="DT_STRING", string_val=[text.encode()],
                             tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
        self._add(step, summary=Summary(value=[Summary.Value(tag=tag + "/text_summary", metadata=meta, tensor=tensor)]))

    def log(self, batch: list) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        for s, metrics in batch:
            self._add(s, summary=Summary(value=[Summary.Value(tag=k, simple_value=v) for k, v in metrics.items()]))
            self.last = s

    def flush(self) -> dict:
        self.w.flush()
        return {"durable": self.last}

    def close(self) -> dict:
        self.w.close()
        return {"durable": self.last}
