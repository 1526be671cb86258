"""Warm start of the rubric writer: supervised fine-tuning on a seed set of concrete rubrics.

A departure from the paper (docs/FIDELITY.md): the paper's writer (Qwen3-8B) writes usable rubrics
before any training, a 135M model does not. This module teaches it the format and the habit of
concrete criteria ("gives the final answer 18", "has exactly 3 bullet points") before EvoLM's GRPO.

Each seed row ``{prompt, rubric}`` becomes a prompt-completion example: the prompt is the rubric
role's own conversation (``rubrics.rubric_messages``, the same system prompt, one-shot turn and
question the trainer and ``evolm rubric`` send), the completion is the rubric as one compact JSON
object, the layout the rubric grammar decodes (``constrained.RUBRIC_EBNF``). The loss is on the
completion only (TRL's ``SFTTrainer``). The result is a plain model directory (LoRA merged in),
usable wherever evolm takes a model (``evolm rubric --model DIR``, ``model.name: DIR``).

Seed sources: the shipped hand-written set (``builtin:seed``, docs/SEED_RUBRICS.md) and, read in
place from a user's copy, GSM8K *train* questions whose reference answers become value criteria
(``gsm8k_seed``), as RaR turns references into rubric items.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from evolm.errors import InputError, RunError
from evolm.rubrics import RUBRIC_PROMPTS, Rubric, format_validity, rubric_messages
from evolm.runs.jsonl import read_jsonl

BUILTIN_SEEDS = {"builtin:seed": Path(__file__).parents[1] / "data" / "seed_rubrics.jsonl"}


@dataclass
class WarmStartConfig:
    """``evolm sft-rubrics``: supervised warm start of the rubric writer (not part of the paper's method)."""

    model: str = "smollm2-135m-instruct"
    output_dir: str = "runs/sft-rubrics"
    seeds: list = field(default_factory=lambda: ["builtin:seed"])
    gsm8k: str | None = None  # GSM8K train JSONL ({question, answer}); read in place, never copied
    gsm8k_limit: int = 200
    rubric_prompt: str = "v3"
    chat_template_kwargs: dict = field(default_factory=dict)
    epochs: float = 3.0
    learning_rate: float = 5e-5
    batch_size: int = 8  # examples per optimizer step (micro-batches of 1, accumulated)
    lora_r: int = 0  # 0: full fine-tuning
    lora_alpha: int = 16
    keep_adapter: bool = False  # with lora_r: save the LoRA adapter on its base, not merged (a run trains it on)
    max_examples: int = 0  # a seeded sample of the seed rows (0: all)
    train_layers: int = 0  # train only the last N transformer layers (0: all); cheaper backward on a CPU
    detach_prefix: bool = False  # run the shared prompt prefix without gradients (cheaper, slightly inexact)
    save_every: int = 0  # also save the writer every N steps to OUTPUT/partial (0: only at the end)
    max_length: int = 1024
    seed: int = 0
    dtype: str = "auto"
    device: str = "auto"


# ----------------------------------------------------------------------------- seed rows

def _check_rubric(value: Any, where: str) -> dict[str, Any]:
    """The seed row's rubric as an object; a one-line ``InputError`` naming ``where`` for anything but a rubric object
    (or JSON text holding exactly one) that is format-valid."""
    obj = value
    if isinstance(value, str):
        try:
            obj = json.loads(value)
        except ValueError:
            raise InputError(f"{where}: 'rubric' is text that is not one JSON object (text around the JSON?)") from None
        except RecursionError:
            raise InputError(f"{where}: 'rubric' is JSON nested too deeply") from None
    if not isinstance(obj, dict):
        raise InputError(f"{where}: 'rubric' must be an object {{\"criteria\": [...]}}, not a {type(obj).__name__}")
    if Rubric.from_obj(obj) is None:
        raise InputError(f"{where}: 'rubric' holds no criterion")
    if format_validity(json.dumps(obj)) != 1.0:
        raise InputError(f"{where}: 'rubric' is not format-valid (2+ criteria with weights summing to 1)")
    return obj


def load_seed(spec: str) -> list[dict[str, Any]]:
    """``{prompt, rubric, source}`` rows of a seed file (JSONL with ``prompt`` and ``rubric``) or ``builtin:seed``."""
    if spec.startswith("builtin:") and spec not in BUILTIN_SEEDS:
        raise InputError(f"{spec}: no such built-in seed set (known: {', '.join(BUILTIN_SEEDS)})")
    path = BUILTIN_SEEDS.get(spec, Path(spec))
    rows = []
    lines = _line_numbers(path)
    for i, row in enumerate(read_jsonl(path, required=["prompt", "rubric"])):
        where = f"{spec}:{lines[i]}" if i < len(lines) else f"{spec}: row {i + 1}"
        prompt = row["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise InputError(f"{where}: 'prompt' is not a non-empty string")
        rows.append({"prompt": prompt, "rubric": _check_rubric(row["rubric"], where),
                     "source": str(row.get("source", spec))})
    return rows


def _line_numbers(path: Path) -> list[int]:
    """The line number of each non-blank line of a JSONL file (what ``read_jsonl`` reads as its rows, in order)."""
    from evolm.runs.jsonl import split_lines

    if path.name.endswith(".gz"):
        return []
    try:
        text = path.read_bytes().decode("utf-8", "replace")
    except OSError:
        return []
    return [n for n, line in enumerate(split_lines(text), 1) if line.strip()]


_CALC = re.compile(r"<<([^<>=]+)=([^<>]+)>>")
_FINAL = re.compile(r"####\s*(.+?)\s*$")


def _number(text: str) -> str:
    return text.strip().replace(",", "").rstrip(".")


def gsm8k_rubric(answer: str) -> dict[str, Any] | None:
    """A value rubric from a GSM8K reference solution: final answer, up to two intermediate results, one clear answer.

    >>> r = gsm8k_rubric("She sold 48/2 = <<48/2=24>>24 in May.\\nIn all 48+24 = <<48+24=72>>72.\\n#### 72")
    >>> [(c["criterion"], c["weight"]) for c in r["criteria"]]  # doctest: +NORMALIZE_WHITESPACE
    [('Gives the final answer 72.', 0.7), ('Works out 48/2 = 24 along the way.', 0.2),
     ('States one clear final answer.', 0.1)]
    """
    final = _FINAL.search(answer.strip())
    if final is None:
        return None
    value = _number(final.group(1))
    if not value or len(value) > 12:
        return None
    steps = []
    for expr, result in _CALC.findall(answer):
        text = f"Works out {expr.strip()} = {_number(result)} along the way."
        if (_number(result) != value and len(text) <= 80 and text.isascii() and not set(text) & set("\"\\")
                and text not in steps):
            steps.append(text)
    steps = steps[-2:]  # the last intermediate results: closest to the answer, most telling
    levels_final = {"1.0": f"Says {value}.", "0.5": "Right method, slip at end.", "0.0": "Wrong answer."}
    criteria = [{"criterion": f"Gives the final answer {value}.", "weight": [0.8, 0.7, 0.6][len(steps)],
                 "scoring_levels": levels_final}]
    for text, weight in zip(steps, [[], [0.2], [0.2, 0.1]][len(steps)], strict=True):
        criteria.append({"criterion": text, "weight": weight,
                         "scoring_levels": {"1.0": "Correct.", "0.5": "Set up, wrong value.", "0.0": "Missing."}})
    criteria.append({"criterion": "States one clear final answer.", "weight": 0.2 if not steps else 0.1,
                     "scoring_levels": {"1.0": "One clear answer.", "0.5": "Buried in text.",
                                        "0.0": "None or conflicting."}})
    return {"criteria": criteria}


def gsm8k_seed(path: str, limit: int = 200, seed: int = 0) -> list[dict[str, Any]]:
    """``limit`` GSM8K train rows (a seeded sample, 0: all) as seed rows; the file is read where it is."""
    rows = read_jsonl(Path(path), required=["question", "answer"])
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    out = []
    for i in order:
        rubric = gsm8k_rubric(str(rows[i]["answer"]))
        if rubric is not None and str(rows[i]["question"]).strip():
            out.append({"prompt": str(rows[i]["question"]).strip(), "rubric": rubric, "source": "gsm8k-train"})
        if limit and len(out) >= limit:
            break
    return out


def seed_rows(cfg: WarmStartConfig) -> list[dict[str, Any]]:
    """Every seed row the config names, deduplicated by prompt (first kept)."""
    rows = [r for spec in cfg.seeds for r in load_seed(spec)]
    if cfg.gsm8k:
        rows += gsm8k_seed(cfg.gsm8k, cfg.gsm8k_limit, cfg.seed)
    unique = list({r["prompt"]: r for r in reversed(rows)}.values())[::-1]
    if cfg.max_examples and len(unique) > cfg.max_examples:
        picked = sorted(random.Random(cfg.seed).sample(range(len(unique)), cfg.max_examples))
        unique = [unique[i] for i in picked]
    if not unique:
        raise InputError("the seed set is empty")
    return unique


def sft_examples(rows: list[dict[str, Any]], rubric_prompt: str = "v3",
                 chat_template_kwargs: dict | None = None) -> list[dict[str, Any]]:
    """Prompt-completion examples: the rubric role's conversation, then the rubric as compact JSON (the grammar's)."""
    if rubric_prompt not in RUBRIC_PROMPTS:
        raise InputError(f"unknown rubric prompt '{rubric_prompt}' (choose from {', '.join(RUBRIC_PROMPTS)})")
    out = []
    for r in rows:
        ex = {"prompt": rubric_messages(r["prompt"], rubric_prompt),
              "completion": [{"role": "assistant", "content": json.dumps(r["rubric"])}]}
        if chat_template_kwargs:
            ex["chat_template_kwargs"] = dict(chat_template_kwargs)
        out.append(ex)
    return out


# ----------------------------------------------------------------------------- the output directory

# The files a model save writes (transformers' save_pretrained of a model, its tokenizer, a PEFT adapter; our
# sft_rubrics.json): a directory that holds nothing else is a model evolm may replace whole.
_SAVE_FILES = re.compile(
    r"(?:config|generation_config|tokenizer|tokenizer_config|special_tokens_map|added_tokens|adapter_config"
    r"|preprocessor_config|sft_rubrics|(?:model|adapter_model|pytorch_model)\.(?:safetensors|bin)\.index)\.json"
    r"|(?:model|adapter_model)(?:-\d+-of-\d+)?\.safetensors|(?:pytorch_model|adapter_model)(?:-\d+-of-\d+)?\.bin"
    r"|vocab\.(?:json|txt)|merges\.txt|tokenizer\.model|spiece\.model|chat_template\.(?:jinja|json)|README\.md")


def _not_saved(directory: Path) -> list[str]:
    """What ``directory`` holds that no model save writes (a run's ``partial/`` model counts as saved files)."""
    out = []
    for p in sorted(directory.iterdir()):
        if p.is_file() and _SAVE_FILES.fullmatch(p.name):
            continue
        if p.name == "partial" and p.is_dir() and not p.is_symlink() and not _not_saved(p):
            continue
        out.append(p.name)
    return out


def check_output_dir(output: str | Path) -> Path:
    """The output directory, refused in one line before any model loads when it cannot be written.

    The writer is saved into a new sibling directory that then replaces ``output`` whole (``save_atomically``), so
    ``output`` must be a path that is not a file, whose parent can hold a new directory, and, if it exists, an empty
    directory or one that holds only what a model save writes (``_SAVE_FILES``: ``config.json``, weights, tokenizer
    files, ``sft_rubrics.json``...): a directory with anything else (notes, data) is refused, not replaced.
    """
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise InputError(f"--output {output}: exists and is not a directory (the writer is a model directory)")
    if out.is_dir() and (others := _not_saved(out)):
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        raise InputError(f"--output {output}: holds files no model save writes ({shown}); the save replaces the "
                         "directory whole, so give a new or empty directory, or a model directory")
    parent = out.resolve().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"--output {output}: cannot create a directory in {parent}")
    return out


def save_atomically(out: Path, write: Any) -> None:
    """``write(directory)`` into a new sibling of ``out``, then that directory renamed into place as ``out``.

    A run killed while writing leaves ``out`` as it was (the previous model, or nothing) and a
    ``.<name>.saving-<pid>`` sibling that the next save removes; only between the two renames at the end (the old
    ``out`` moved aside, the new one moved in) is ``out`` briefly absent, with the old one intact beside it as
    ``.<name>.old-<pid>``.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for stale in out.parent.glob(f".{out.name}.saving-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = out.parent / f".{out.name}.saving-{os.getpid()}"
    try:
        tmp.mkdir()
        write(tmp)
        for f in tmp.rglob("*"):  # on disk before the rename makes them the model
            if f.is_file():
                with open(f, "rb") as fh:
                    os.fsync(fh.fileno())
    except Exception as e:  # a full disk, a quota (safetensors raises its own error): the partial save goes, the
        # previous model stays
        shutil.rmtree(tmp, ignore_errors=True)
        reason = (e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0] if str(e) else
                  type(e).__name__)
        raise RunError(f"could not save the model to {out}: {reason} (it was left as it was)") from None
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists():
        os.rename(out, old)
    os.rename(tmp, out)
    shutil.rmtree(old, ignore_errors=True)
    fd = os.open(out.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------- training

def tokenize_examples(tokenizer: Any, examples: list[dict[str, Any]], max_length: int) -> tuple[list[int], list[dict]]:
    """The token prefix every example shares, and each example's rest: ``{ids, labels}`` (labels -100 on the prompt).

    An example's tokens are its whole conversation rendered by the chat template; its completion starts
    where the prompt rendered with the generation prompt ends (what generation continues from). Every
    rubric example starts with the same system prompt and worked-example turn (``rubric_messages``): that
    shared prefix is run once per optimizer step instead of once per example, which is the same
    computation (the same tokens, positions and gradients) at a third of the cost on a CPU.
    """
    full, starts = [], []
    for ex in examples:
        kwargs = ex.get("chat_template_kwargs", {})
        prompt_ids = tokenizer.apply_chat_template(ex["prompt"], tokenize=True, add_generation_prompt=True,
                                                   return_dict=False, **kwargs)
        ids = tokenizer.apply_chat_template(ex["prompt"] + ex["completion"], tokenize=True, return_dict=False,
                                            **kwargs)
        if list(ids[: len(prompt_ids)]) != list(prompt_ids):
            raise InputError("the chat template renders the rubric prompt differently with and without its reply")
        full.append(list(ids)[:max_length])
        starts.append(len(prompt_ids))
    shared = 0
    shortest = min(min(starts), min(len(ids) for ids in full))
    while shared < shortest and len({ids[shared] for ids in full}) == 1:
        shared += 1
    prefix = full[0][:shared]
    rest = []
    for ids, start in zip(full, starts, strict=True):
        labels = [-100] * len(ids)
        labels[start:] = ids[start:]
        rest.append({"ids": ids[shared:], "labels": labels[shared:]})
    kept = [r for r in rest if any(x != -100 for x in r["labels"])]
    if not kept:
        raise InputError(f"no example has a rubric token within max_length={max_length} tokens")
    return prefix, kept


def shared_prefix_loss(model: Any, prefix: list[int], batch: list[dict], pad_id: int, detach_prefix: bool = False
                       ) -> Any:
    """Mean next-token loss over the batch's completion tokens, the shared prefix run once for the batch.

    With ``detach_prefix`` the prefix runs without gradients: the loss is the same, the gradient leaves out
    the path through the prefix's keys and values (cheaper: the prefix is a forward pass only).
    """
    import contextlib

    import torch

    device = next(model.parameters()).device
    n, width = len(batch), max(len(b["ids"]) for b in batch)
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    labels = torch.full((n, width), -100, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.long)
    for i, b in enumerate(batch):
        ids[i, : len(b["ids"])] = torch.tensor(b["ids"])
        labels[i, : len(b["labels"])] = torch.tensor(b["labels"])
        mask[i, : len(b["ids"])] = 1
    ids, labels, mask = ids.to(device), labels.to(device), mask.to(device)
    p = len(prefix)
    if p:
        with torch.no_grad() if detach_prefix else contextlib.nullcontext():
            out = model(input_ids=torch.tensor([prefix], device=device), use_cache=True)
        from evolm.backends.hf import cache_kwarg

        kw = cache_kwarg(model)
        cache = getattr(out, kw)
        cache.batch_repeat_interleave(n)
        logits = model(input_ids=ids, attention_mask=torch.cat([torch.ones((n, p), dtype=torch.long, device=device),
                                                                mask], dim=1),
                       **{kw: cache}, use_cache=False).logits
        # the prefix's last position predicts each example's first own token
        logits = torch.cat([out.logits[:, -1:, :].expand(n, 1, -1), logits[:, :-1, :]], dim=1)
        targets = labels
    else:
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1, :]
        targets = labels[:, 1:]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1),
                                             ignore_index=-100)


def warm_start(cfg: WarmStartConfig, progress: bool = True, log: Any = None) -> Path:
    """Fine-tune ``cfg.model`` on the seed set and save the writer (a plain model directory) in ``cfg.output_dir``.

    AdamW, linear warm-up then cosine decay, gradient norm clipped at 1, loss on the rubric tokens only
    (the prompt-completion loss of TRL's ``SFTTrainer``), the shared prompt prefix run once per step
    (``tokenize_examples``). With ``lora_r`` the adapter is trained and merged before saving.
    """
    import math as _math

    import torch
    from tqdm.auto import tqdm

    from evolm.backends.devices import resolve_device
    from evolm.backends.loading import load_model

    out = check_output_dir(cfg.output_dir)
    rows = seed_rows(cfg)
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    model, tokenizer = load_model(cfg.model, device=device, dtype=cfg.dtype)
    prefix, data = tokenize_examples(tokenizer, sft_examples(rows, cfg.rubric_prompt, cfg.chat_template_kwargs),
                                     cfg.max_length)
    n_layers = int(getattr(model.config, "num_hidden_layers", 0) or 0)
    top = list(range(max(0, n_layers - cfg.train_layers), n_layers)) if cfg.train_layers else None
    if cfg.lora_r:
        from peft import LoraConfig, get_peft_model

        # every linear layer inside the transformer blocks (peft's "all-linear" cannot be limited to some layers)
        linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                         if isinstance(m, torch.nn.Linear) and ".layers." in n})
        model = get_peft_model(model, LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, target_modules=linear,
                                                 layers_to_transform=top, task_type="CAUSAL_LM"))
    elif top is not None:
        keep = tuple(f"layers.{i}." for i in top)
        for name, param in model.named_parameters():
            param.requires_grad_(any(k in name for k in keep))
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate, weight_decay=0.0)
    steps_per_epoch = _math.ceil(len(data) / cfg.batch_size)
    total = max(1, _math.ceil(steps_per_epoch * cfg.epochs))
    warmup = max(1, total // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + _math.cos(_math.pi * (step - warmup) / max(1, total - warmup)))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    rng = random.Random(cfg.seed)
    order: list[int] = []
    losses: list[float] = []
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    bar = tqdm(range(total), desc="sft-rubrics", disable=not progress)
    for step in bar:
        if len(order) < cfg.batch_size:
            epoch = list(range(len(data)))
            rng.shuffle(epoch)
            order += epoch
        batch, order = [data[i] for i in order[: cfg.batch_size]], order[cfg.batch_size:]
        loss = shared_prefix_loss(model, prefix, batch, pad, cfg.detach_prefix)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.detach().item())
        bar.set_postfix(loss=f"{losses[-1]:.3f}")
        if log is not None:
            log(step + 1, total, losses[-1])
        if cfg.save_every and (step + 1) % cfg.save_every == 0 and step + 1 < total:
            _save(model, tokenizer, out / "partial", {"step": step + 1, "of": total, "losses": losses})
    model.eval()
    if cfg.lora_r and not cfg.keep_adapter:
        model = model.merge_and_unload()
    sources: dict[str, int] = {}
    for r in rows:
        sources[r["source"]] = sources.get(r["source"], 0) + 1
    summary = {"config": asdict(cfg), "examples": len(data), "sources": sources, "shared_prefix_tokens": len(prefix),
               "steps": total, "losses": [round(x, 4) for x in losses]}
    _save(model, tokenizer, out, summary)
    if cfg.keep_adapter:
        from evolm.backends.loading import name_adapter_base

        name_adapter_base(out, cfg.model)  # the built-in base by its name: the adapter loads on any machine
    return out


def _save(model: Any, tokenizer: Any, where: Path, state: dict[str, Any]) -> None:
    """The model (mid-run: a LoRA adapter on its base, with ``lora_r``), loadable by evolm as a model, with ``state``
    as ``sft_rubrics.json``; saved whole or not at all (``save_atomically``): a kill mid-save keeps the previous one."""
    from evolm.runs.jsonl import dumps

    def write(directory: Path) -> None:
        model.save_pretrained(directory)
        tokenizer.save_pretrained(directory)
        (directory / "sft_rubrics.json").write_text(dumps(state, indent=2) + "\n", encoding="utf-8")

    save_atomically(where, write)
