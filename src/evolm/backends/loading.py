"""Loading models, tokenizers and backends: from a local directory, a LoRA checkpoint, a Hugging Face id, or a
built-in name (``evolm.backends.builtin``). Nothing is downloaded unless the user names a hub id."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from evolm.backends.base import Backend
from evolm.backends.builtin import BUILTIN_MODELS, builtin_model_dir
from evolm.backends.devices import resolve_device, resolve_dtype
from evolm.config import BACKENDS
from evolm.errors import ModelError

HUB_KERNELS = "USE_HUB_KERNELS"
"""transformers' switch for its hub kernels: since 5.x, with the ``kernels`` package installed (a dependency of
transformers 5.25), ``from_pretrained`` replaces layers of a model on a GPU with kernels it downloads from the Hugging
Face Hub (``kernels-community/rotary``, ...): code fetched at load time, and on a machine without the hub a failed
load ("not available in the local cache and Hugging Face Hub is in offline mode"). evolm loads every model with them
off unless this variable is set to a true value (``USE_HUB_KERNELS=1``), and its command line sets it to ``NO``
when unset, so that what TRL loads itself (the reference model) follows (docs/GPU.md, "Install")."""


def hub_kernels() -> bool:
    """Whether models load with transformers' hub kernels: only when ``USE_HUB_KERNELS`` says so."""
    return os.environ.get(HUB_KERNELS, "").strip().lower() in {"1", "true", "y", "yes", "on"}


ADAPTER_CONFIG = "adapter_config.json"  # a LoRA checkpoint (model.lora): the adapter alone, its base named inside


def resolve_model_path(name_or_path: str) -> str:
    """A local directory (absolute) for built-in names and existing paths; anything else is taken as a hub id.

    A LoRA checkpoint (``adapter_config.json``, no ``config.json``) is a model directory too: ``load_weights``
    loads its base and merges the adapter in.
    """
    if name_or_path in BUILTIN_MODELS:
        return str(builtin_model_dir(name_or_path))
    p = Path(name_or_path).expanduser()
    if p.exists():
        if not (p / "config.json").is_file() and not (p / ADAPTER_CONFIG).is_file():
            raise ModelError(f"{name_or_path}: not a model directory (no config.json)")
        return os.path.abspath(p)  # absolute: a LoRA checkpoint records it as its base, read from anywhere
    if name_or_path.count("/") == 1 and not name_or_path.startswith((".", "/", "~")):
        return name_or_path  # hub id: only tried because the user asked for it
    raise ModelError(
        f"unknown model '{name_or_path}': not a directory, a Hugging Face id (owner/name), "
        f"or a built-in name ({', '.join(BUILTIN_MODELS)})"
    )


def _adapter_config(path: str | Path) -> dict | None:
    """A LoRA checkpoint directory's ``adapter_config.json`` (``{}`` when unreadable); ``None`` for anything else:
    full weights (a ``config.json``), a built-in name, a hub id."""
    import json

    path = Path(path).expanduser()
    if (path / "config.json").is_file() or not (path / ADAPTER_CONFIG).is_file():
        return None
    try:
        config = json.loads((path / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def adapter_base(path: str) -> str | None:
    """The base model a LoRA checkpoint directory names (``base_model_name_or_path``), or ``None`` for full weights."""
    config = _adapter_config(path)
    if config is None:
        return None
    base = config.get("base_model_name_or_path")
    if not isinstance(base, str) or not base:
        raise ModelError(f"{path}: a LoRA adapter whose {ADAPTER_CONFIG} names no base model (base_model_name_or_path)")
    return base


def name_adapter_base(path: str | Path, model: str) -> None:
    """A LoRA checkpoint of a built-in model names its base by the built-in name, not by the folder it is installed
    in on this machine, so that the adapter loads on any machine that has the built-in model (``evolm rubric --model
    CHECKPOINT``). Nothing changes for a full-weights checkpoint or another base."""
    import json

    config = Path(path) / ADAPTER_CONFIG
    if model not in BUILTIN_MODELS or not config.is_file():
        return
    data = json.loads(config.read_text(encoding="utf-8"))
    if data.get("base_model_name_or_path") in (model, str(builtin_model_dir(model))):
        data["base_model_name_or_path"] = model
        tmp = config.with_name(config.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, config)


def base_model_name(name_or_path: str) -> str:
    """The model a LoRA checkpoint was trained on, as its ``adapter_config.json`` names it (a built-in name where
    ``name_adapter_base`` wrote one); ``name_or_path`` itself for full weights."""
    return adapter_base(resolve_model_path(name_or_path)) or name_or_path


def adapter_rank(name_or_path: str) -> int:
    """The LoRA rank (``r``) of a LoRA checkpoint directory; 0 for anything else (full weights, a name, a hub id)."""
    r = (_adapter_config(name_or_path) or {}).get("r")
    return r if isinstance(r, int) and r > 0 else 0


def _with_adapter(model: Any, path: str, trainable: bool = False) -> Any:
    """``model`` (the base) with the LoRA adapter at ``path`` merged in: a plain transformers model again. With
    ``trainable`` the adapter stays apart and trains on (a ``PeftModel``): a run that goes on training a warm start."""
    try:
        from peft import PeftModel
    except ImportError:
        raise ModelError(f"{path} is a LoRA adapter checkpoint: loading it needs peft (pip install 'evolm[lora]')") \
            from None
    import warnings

    with warnings.catch_warnings():  # peft reads transformers' deprecated ``is_gradient_checkpointing``
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        if trainable:
            peft = PeftModel.from_pretrained(model, path, is_trainable=True)
            # the adapter names its base as saved (a built-in name); while it trains, the folder the base was loaded
            # from, so that peft's save finds its config.json there instead of asking the hub for a repository that
            # does not exist. Each checkpoint names the built-in again (name_adapter_base).
            peft.active_peft_config.base_model_name_or_path = model.name_or_path
            return peft
        return PeftModel.from_pretrained(model, path).merge_and_unload()


def require_hub_files(repo_id: str, what: str = "model") -> None:
    """Refuse at once, in one line, a hub id that is not in the local Hugging Face cache when the hub is out of
    reach (``HF_HUB_OFFLINE`` set, or no connection to it): transformers would retry for a minute first.

    A local directory (or a cached id) passes untouched, and so does an id the hub can be asked for.
    """
    if os.path.isdir(repo_id):
        return
    from urllib.parse import urlparse

    from huggingface_hub import constants, try_to_load_from_cache

    if any(isinstance(try_to_load_from_cache(repo_id, f), str) for f in ("config.json", ADAPTER_CONFIG)):
        return
    missing = f"cannot load {what} '{repo_id}': not in the Hugging Face cache ({constants.HF_HUB_CACHE})"
    if constants.HF_HUB_OFFLINE:
        raise ModelError(f"{missing}, and HF_HUB_OFFLINE is set: download it where the hub is reachable, or "
                         "give a local directory")
    url = urlparse(constants.ENDPOINT)
    import socket

    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=5).close()
    except OSError as e:
        raise ModelError(f"{missing}, and {url.hostname} cannot be reached ({e.strerror or e}): "
                         "give a local directory, or download it first") from None


def load_tokenizer(name_or_path: str) -> Any:
    """The tokenizer, with a pad token and left padding (what batched generation needs)."""
    from transformers import AutoTokenizer

    path = resolve_model_path(name_or_path)
    base = adapter_base(path)
    if base and not (Path(path) / "tokenizer_config.json").is_file():  # a LoRA checkpoint saved without one
        path = resolve_model_path(base)
    require_hub_files(path, "tokenizer")
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot load tokenizer from '{name_or_path}': {str(e).splitlines()[0]}") from None
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


def load_model(name_or_path: str, device: str = "auto", dtype: str = "auto", sharded: bool = False,
               train_adapter: bool = False) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for a local dir, a built-in name, or a hub id the user gave.

    ``train_adapter`` (the policy of a LoRA run): a LoRA checkpoint stays a trainable ``PeftModel`` on its base
    instead of being merged, so that the run trains that same adapter on (a warm start's, ``evolm sft-rubrics
    --keep-adapter``) and its checkpoints load on the base.

    ``sharded=True`` is for the policy alone, loaded after its ``GRPOConfig`` (``run.run``): under ZeRO-3,
    transformers then builds it under ``deepspeed.zero.Init``, each process holding its shard, and the trainer's
    DeepSpeed engine gathers what it uses. Every other model (judge, reward model, fixed writer or answerer) is
    loaded whole (``whole_model``): no engine ever wraps it.
    """
    from transformers import AutoModelForCausalLM

    model = load_weights(AutoModelForCausalLM, name_or_path, device, dtype, sharded=sharded,
                         train_adapter=train_adapter)
    return model, load_tokenizer(name_or_path)


@contextmanager
def whole_model() -> Iterator[None]:
    """Models loaded inside it are whole on this process, also under a ZeRO-3 training launch.

    While a ZeRO-3 DeepSpeed config is alive (TRL's ``GRPOConfig`` under ``accelerate launch`` with ZeRO-3 registers
    it with transformers), ``from_pretrained`` builds every model under ``deepspeed.zero.Init``: its weights
    partitioned over the processes and gathered only by a DeepSpeed engine's hooks. evolm's in-process judge,
    reward model and fixed writer or answerer are never wrapped in an engine, so sharded their first forward would
    fail. transformers reads that config through one module global (``is_deepspeed_zero3_enabled``); it is unset
    while the model loads and put back after, so the trainer's own models still shard.
    """
    from transformers.integrations import deepspeed as hf_deepspeed

    saved = hf_deepspeed._hf_deepspeed_config_weak_ref
    if not hf_deepspeed.is_deepspeed_zero3_enabled():
        yield
        return
    hf_deepspeed.unset_hf_deepspeed_config()
    try:
        yield
    finally:
        hf_deepspeed._hf_deepspeed_config_weak_ref = saved


def _is_partitioned(model: Any) -> bool:
    """A model built under ``deepspeed.zero.Init``: its parameters carry DeepSpeed's ``ds_id``."""
    return any(hasattr(p, "ds_id") for p in model.parameters())


def load_weights(auto_class: Any, name_or_path: str, device: str = "auto", dtype: str = "auto", what: str = "model",
                 sharded: bool = False, train_adapter: bool = False) -> Any:
    """``auto_class.from_pretrained`` on the resolved path, on the resolved device, in eval mode.

    A LoRA checkpoint loads its base (``adapter_config.json``'s ``base_model_name_or_path``) with the adapter merged in.
    The model is whole on this process (``whole_model``) unless ``sharded`` (the policy: see ``load_model``); a
    model ZeRO-3 partitioned stays where DeepSpeed put its shards.
    """
    from contextlib import nullcontext

    path = resolve_model_path(name_or_path)
    dev = resolve_device(device)
    base = adapter_base(path)
    require_hub_files(resolve_model_path(base) if base else path, what)
    try:
        with nullcontext() if sharded else whole_model():
            model = auto_class.from_pretrained(resolve_model_path(base) if base else path,
                                               dtype=resolve_dtype(dtype, dev), use_kernels=hub_kernels())
            if base:
                model = _with_adapter(model, path, trainable=train_adapter)
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot load {what} '{name_or_path}': {str(e).splitlines()[0]}") from None
    return (model if _is_partitioned(model) else model.to(dev)).eval()


def load_backend(
    spec: str,
    backend: str = "hf",
    device: str = "auto",
    dtype: str = "auto",
    base_url: str | list[str] | None = None,
    api_key_env: str = "OPENAI_API_KEY",
    batch_size: int = 8,
    timeout: float = 120.0,
    max_retries: int = 2,
    deadline: float = 0.0,
    max_concurrency: int = 32,
    requests_per_minute: float = 0.0,
    tokens_per_minute: float = 0.0,
    max_reply_mb: float = 8.0,
    fallback_model: str | None = None,
) -> Backend:
    """A generation backend for ``spec`` (a model for ``hf``/``vllm``, a served model name for ``openai``).

    ``timeout`` (seconds one request attempt may take in all) and ``max_retries`` apply to ``openai``,
    and so do ``deadline`` (seconds a request may take in all, retries included; 0: the default),
    ``max_concurrency``, ``requests_per_minute`` and ``tokens_per_minute`` (each per endpoint of
    ``base_url``, which may name several: ``evolm.backends.pool``), ``max_reply_mb`` (the most of a
    reply read, MiB after decompression) and ``fallback_model`` (the model a generation request still
    failing after its retries is sent to, at the same endpoints).
    """
    if backend == "hf":
        from evolm.backends.hf import HFBackend

        model, tokenizer = load_model(spec, device=device, dtype=dtype)
        return HFBackend(model, tokenizer, batch_size=batch_size)
    if backend == "openai":
        from evolm.backends.openai import OpenAIBackend

        return OpenAIBackend(model=spec, base_url=base_url, api_key_env=api_key_env, timeout_s=timeout,
                             max_retries=max_retries, deadline_s=deadline or None, max_concurrency=max_concurrency,
                             requests_per_minute=requests_per_minute, tokens_per_minute=tokens_per_minute,
                             max_reply_mb=max_reply_mb, fallback_model=fallback_model)
    if backend == "vllm":
        from evolm.backends.vllm import VLLMBackend

        path = resolve_model_path(spec)
        require_hub_files(path)
        if adapter_base(path):
            raise ModelError(f"{spec} is a LoRA adapter checkpoint: the vllm backend loads full weights "
                             "(use backend hf, which merges the adapter)")
        return VLLMBackend(model=path, dtype="auto" if dtype == "auto" else dtype)
    raise ModelError(f"unknown backend '{backend}' (choose from {', '.join(BACKENDS)})")


def count_generated_tokens(model: Any, on_tokens: Callable[[int], None] | None) -> Any:
    """Tell ``on_tokens(n)`` as ``model`` decodes ``n`` tokens (one per row of a one-position forward), whoever calls
    its ``generate`` (TRL, evolm); returns the hook's handle (``.remove()``), or None when ``on_tokens`` is None. The
    hook sits on the input embeddings, which every forward calls as a module, also under PEFT (whose wrappers call
    ``forward`` directly)."""
    if on_tokens is None:
        return None

    def hook(_module: Any, args: tuple[Any, ...]) -> None:
        ids = args[0] if args else None
        if getattr(ids, "ndim", 0) == 2 and ids.shape[1] == 1:  # a [B, 1] decoding step
            on_tokens(int(ids.shape[0]))
    return model.get_input_embeddings().register_forward_pre_hook(hook)
