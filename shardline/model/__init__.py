"""The networks the train stage trains, and their one way in and out of Hugging Face.

Owns the shape of a network (`config`: `ModelConfig`, resolved from params.yaml's model section,
and the parameter and FLOP counts MFU uses), the two architectures (`gpt2`, `llama`; a plug-in
adds others, each a `common.CausalLM`: docs/extending.md), attention over packed documents
(`attention`) and the mapping to and from transformers (`hf`). Nothing here
knows of training loops, ranks or checkpoints: recompute, compile and sharding are applied to a
model's `blocks` from outside (shardline.training), as torchtitan's parallelize does.
"""

from __future__ import annotations

from torch import nn

from shardline.core import plugins
from shardline.model.common import CausalLM
from shardline.model.shape import ModelConfig, resolve  # noqa: F401


def build(cfg: ModelConfig) -> nn.Module:
    """A freshly initialised network; its weights are drawn from torch's global RNG only. A name
    not built in is a plug-in's: the callable its "shardline.architectures" entry point names,
    which must make a `common.CausalLM` (else one line naming the plug-in); one whose class does
    not say `document_attention` is refused under train.attention document (it would train
    across documents while the record said it did not); one that keeps no `cfg` is given it."""
    if cfg.arch == "llama":
        from shardline.model.llama import Llama

        return Llama(cfg)
    if cfg.arch == "gpt2":
        from shardline.model.gpt2 import GPT

        return GPT(cfg)
    made = plugins.load("architectures", cfg.arch)(cfg)
    where = plugins.where("architectures", cfg.arch)
    if not isinstance(made, CausalLM):
        raise plugins.PluginError(f"{where} made {plugins.kind_of(made)}, not a shardline.model.common.CausalLM: "
                                  "its class must subclass CausalLM (docs/extending.md, 'An architecture')")
    lacks = [a for a in ("blocks",) if not isinstance(getattr(made, a, None), nn.ModuleList)]
    try:
        made.lookups()
    except NotImplementedError:
        lacks.append("lookups()")
    if lacks:  # what the trainer reads of every network: MFU's count, recompute and compile per block
        raise plugins.PluginError(f"{where}: {type(made).__name__} does not define {' or '.join(lacks)}, which "
                                  "every architecture has (docs/extending.md, 'An architecture')")
    if cfg.attention == "document" and not made.document_attention:
        raise plugins.PluginError(
            f"{where}: train.attention is document, but {type(made).__name__} does not say it restarts attention "
            "at each document (no `document_attention = True` on its class); set train.attention: causal in "
            "params.yaml")
    if getattr(made, "cfg", None) is None:
        made.cfg = cfg  # what MFU, the card, export and sample read its shape from
    return made
