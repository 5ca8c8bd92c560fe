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
from shardline.model.shape import ModelConfig, resolve  # noqa: F401


def build(cfg: ModelConfig) -> nn.Module:
    """A freshly initialised network; its weights are drawn from torch's global RNG only. A name
    not built in is a plug-in's: the callable its "shardline.architectures" entry point names."""
    if cfg.arch == "llama":
        from shardline.model.llama import Llama

        return Llama(cfg)
    if cfg.arch == "gpt2":
        from shardline.model.gpt2 import GPT

        return GPT(cfg)
    return plugins.load("architectures", cfg.arch)(cfg)
