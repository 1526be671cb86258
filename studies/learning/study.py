"""The learning study: does EvoLM learn on one CPU, and how do its regimes compare? (docs/RESULTS.md)

    python -m studies.learning A        # the writer on labelled pairs: no rubric vs base vs trained writer
    python -m studies.learning B        # coevolve vs frozen_rubric vs sequential, same prompts and step budget
    python -m studies.learning C        # ablations: binary vs margin_format reward; unconstrained decoding
    python -m studies.learning results  # rewrite results/earlier.md (A, B, C, demo) from the arms finished so far
    python -m studies.learning demo-compare RUN...  # rubric steps of demo runs side by side
    python -m studies.learning backfill ARM...  # recompute per-question held-out policy scores (older arms)
    python -m studies.learning writers ARM [--writer CKPT]  # one arm of the held-out writers study (resumable)
    python -m studies.learning writers ARM --pairs ultrafeedback  # the same on held-out UltraFeedback training pairs
    python -m studies.learning writers-table  # its table, tests and figure into results/ (docs/RESULTS.md links it)
    python -m studies.learning writers-probe  # does the judge tell a right from a wrong answer when told the value?
    python -m studies.learning writers-study  # the rest of the 1.5B study: both training runs, their arms (resumable)
    python -m studies.learning writers-study --one-at-a-time  # the same, one run after the other on all the cores

Every arm trains SmolLM2-135M-Instruct (both roles) against a frozen SmolLM2 judge in ``yesno``
mode with ``evolm train`` (a subprocess, so each arm is exactly the command a user would type),
then measures on held-out data with the package's own judge and rubric code. Each arm writes
``runs/study/<arm>/result.json`` and the results page is regenerated from all of them, so arms can
run one at a time (``nohup python -m studies.learning A > runs/study/A.log 2>&1 &``).

Statistics: every rate has its n and a 95% interval (Wilson for proportions; a seeded percentile
bootstrap for means of pair credits, which count 1/2 for a tie). Paired comparisons of two writers
on the same pairs use an exact two-sided sign test on the pairs where their credits differ
(McNemar's exact test when credits are 0/1) and a paired bootstrap interval of the difference.
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from evolm import stats
from evolm.eval.policy_inputs import default_data_dir
from evolm.eval.value_probe import VALUE_PROBES

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
DATA = default_data_dir(ROOT) or ROOT / "data"  # ./data (what `python scripts/fetch_data.py` writes), or ../shared/data
OUT = ROOT / "runs" / "study"
FIGURES = HERE / "results"  # everything the study keeps: tables, figures, arms (docs/RESULTS.md links them)
RESULTS = FIGURES / "writers-table.md"  # the writers study's table, written whole; docs/RESULTS.md links it
EARLIER = FIGURES / "earlier.md"  # studies A, B, C and the demo comparison (docs/RESULTS.md summarises them)
EVOLM = [str(Path(sys.executable).parent / "evolm")]
MODEL = "smollm2-135m-instruct"
SEED = 0

# The settings every arm shares (on top of configs/demo-cpu.yaml): the demo's model, judge and sizes,
# constrained rubric decoding (what made rubric steps learnable: see study C), held-out evaluation.
COMMON = ["rubric.constrained=true", f"seed={SEED}",
          # the demo's sizes when these studies ran (configs/demo-cpu.yaml is smaller since): 2 cycles x 2 steps of
          # each role, 2 questions per step, up to 5 criteria in 480 tokens, age window 1-4
          "schedule.cycles=2", "schedule.steps_per_phase=2", "schedule.prompts_per_step=2", "schedule.save_every=2",
          "rubric.max_criteria=5", "rubric.max_new_tokens=480", "grpo.max_completion_length=480",
          "contrast.min_age=1", "contrast.max_age=4"]


# ============================================================================= statistics


def gap_closed(start: Sequence[float], trained: Sequence[float], ceiling: Sequence[float], reps: int = 4000,
               seed: int = SEED) -> tuple[float, tuple[float, float] | None, float]:
    """The share of the gap from ``start`` to ``ceiling`` that ``trained`` closes, from per-pair credits on the same
    pairs: (share, seeded paired percentile bootstrap 95% interval over pairs, share of resamples where the ceiling is
    not above the start). The interval is None when that share exceeds 2.5%: the ratio is then unbounded; else it is
    over the resamples with a gap."""
    n = len(start)
    room = statistics.fmean(ceiling) - statistics.fmean(start)
    share = (statistics.fmean(trained) - statistics.fmean(start)) / room if room > 0 else math.nan
    rng, ratios, no_room = random.Random(seed), [], 0
    for _ in range(reps):
        idx = [rng.randrange(n) for _ in range(n)]
        r = sum(ceiling[i] - start[i] for i in idx)
        if r <= 0:
            no_room += 1
            continue
        ratios.append(sum(trained[i] - start[i] for i in idx) / r)
    ratios.sort()
    if no_room > 0.025 * reps:
        return share, None, no_room / reps
    m = len(ratios)  # the percentiles of the resamples that have a gap (all but at most 2.5%)
    return share, (ratios[int(0.025 * m)], ratios[int(0.975 * m) - 1]), no_room / reps


def wilson(k: float, n: int) -> tuple[float, float]:
    """95% Wilson interval of k successes in n (k may be fractional: ties count 1/2), NaNs for none
    (``evolm.stats.wilson`` on the share)."""
    return (stats.wilson(k / n, n) if n > 0 else None) or (math.nan, math.nan)


def mean_ci(xs: Sequence[float]) -> tuple[float, float]:
    """95% t-interval of a mean (``evolm.stats.sample_interval``), NaNs below two values."""
    return stats.sample_interval(list(xs))[1] or (math.nan, math.nan)


def fmt_ci(v: float | None, ci: Sequence[float] | None, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "—"
    if not ci or any(c is None or math.isnan(c) for c in ci):
        return f"{v:.{digits}f}"
    return f"{v:.{digits}f} [{ci[0]:.{digits}f}, {ci[1]:.{digits}f}]"


# ============================================================================ data (read in place, filtered into runs/)


def _short_pairs(src: Path, dst: Path, n: int, max_chars: int) -> Path:
    """The first ``n`` pairs of ``src`` whose prompt and answers are each under ``max_chars`` characters.

    Long UltraFeedback answers (some are thousands of tokens) make every judge call slow on 2 CPU
    cores and exceed what a 135M judge reads well; the study says so beside its numbers.
    """
    from evolm.eval.pairs import load_pairs

    keep = [p for p in load_pairs(src) if max(len(p.prompt), len(p.better), len(p.worse)) <= max_chars][:n]
    _write(dst, "".join(json.dumps({"prompt": p.prompt, "chosen": p.better, "rejected": p.worse}) + "\n" for p in keep))
    return dst


def _write(dst: Path, text: str) -> None:
    """Replace ``dst`` atomically (arms running side by side read these files while another arm starts)."""
    from evolm.runs.files import atomic_writer

    dst.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(dst) as f:
        f.write(text)


def study_data() -> dict[str, Path]:
    """Held-out and training files for every arm (the same files for every arm)."""
    from evolm.runs.jsonl import split_lines

    d = OUT / "data"
    out = {
        "train_pairs": _short_pairs(DATA / "ultrafeedback_sample" / "train_clean.jsonl", d / "uf_train.jsonl",
                                    400, 1200),
        "uf_eval": _short_pairs(DATA / "ultrafeedback_sample" / "eval_clean.jsonl", d / "uf_eval.jsonl", 60, 1200),
        "llmbar": _short_pairs(DATA / "llmbar" / "Natural.json", d / "llmbar_natural.jsonl", 60, 1200),
        "questions": d / "heldout_questions.jsonl",
        "curve_pairs": d / "uf_eval_curve.jsonl",
    }
    alpaca = json.loads((DATA / "alpaca_eval" / "gpt4_1106_preview_model_outputs.json").read_text(encoding="utf-8"))
    qs = [r["instruction"] for r in alpaca if len(r["instruction"]) <= 200][:24]
    _write(out["questions"], "".join(json.dumps({"prompt": q}) + "\n" for q in qs))
    lines = split_lines(out["uf_eval"].read_text(encoding="utf-8"))[:20]  # the curve during training: 20 pairs
    _write(out["curve_pairs"], "\n".join(lines) + "\n")
    return out


# ============================================================================= training (the CLI, as a user runs it)


def train(name: str, overrides: Sequence[str], log: Path) -> tuple[Path, float]:
    """``evolm train --config configs/demo-cpu.yaml OVERRIDES``; returns the run dir and minutes taken."""
    run_dir = OUT / name
    cmd = [*EVOLM, "train", "--config", "configs/demo-cpu.yaml", f"output_dir={run_dir}", *COMMON, *overrides]
    if (run_dir / "config.yaml").exists():
        cmd = [*EVOLM, "train", "--resume", str(run_dir)]
    t0 = time.time()
    _call(cmd, log, f"training arm {name}")
    return run_dir, (time.time() - t0) / 60


def _call(cmd: Sequence[Any], log: Path, what: str | None = None, env: dict[str, str] | None = None) -> None:
    """Run ``cmd`` from the repository root (``env``: variables set for it), its output appended to ``log``; a
    failure ends the study's command."""
    print(f"$ {' '.join(map(str, cmd))}  (log: {log})", flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)  # a fresh machine has no runs/ yet
    with log.open("a", encoding="utf-8") as f:
        rc = subprocess.call(list(map(str, cmd)), cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                             env={**os.environ, **env} if env else None)
    if rc != 0:
        raise SystemExit(f"{what or ' '.join(map(str, cmd))} failed (exit {rc}): see {log}")


def command(name: str, overrides: Sequence[str]) -> str:
    """The arm's command as a user types it from the repository root (the study's data under runs/study/data)."""
    given = [*COMMON, *(o.replace(f"{ROOT}/", "") for o in overrides)]
    last = {o.split("=", 1)[0]: o for o in given}  # an arm's setting replaces the common one (as evolm reads them)
    kept = [o for o in given if last[o.split("=", 1)[0]] == o]
    return " ".join(["evolm train --config configs/demo-cpu.yaml", f"output_dir=runs/study/{name}", *kept])


def final_checkpoint(run_dir: Path) -> Path:
    from evolm.runs.rundir import complete_checkpoints

    done = complete_checkpoints(run_dir)
    if not done:
        raise SystemExit(f"{run_dir}: no complete checkpoint")
    return done[-1]


def eval_lines(run_dir: Path) -> list[dict[str, Any]]:
    from evolm.runs.records import read_metrics

    return [r.to_json() for r in read_metrics(run_dir) if r.role == "eval"]


def step_lines(run_dir: Path) -> list[dict[str, Any]]:
    from evolm.runs.records import read_metrics

    return [r.to_json() for r in read_metrics(run_dir) if r.role in ("policy", "rubric")]


# ============================================================================= held-out pair accuracy of a writer


def pair_credits(pairs_file: Path, writer: str | None, judge: Any, items_file: Path, constrained: bool = True
                 ) -> dict[str, Any]:
    """Per-pair credit (1 / 0.5 / 0) of the judge with ``writer``'s rubrics (``None``: no rubric).

    One rubric per distinct prompt, written at the training temperature (0.6, seed 0), judged as a run's held-out
    evaluation judges (``heldout.judge_heldout``, ``rubric.invalid=judge_raw``: a rubric that does not parse is
    shown as raw text). The per-pair rows (rubric, both scores, credit) go to ``items_file``.
    """
    from evolm.backends.base import SamplingParams
    from evolm.backends.loading import load_backend
    from evolm.config import RunConfig
    from evolm.eval.pairs import load_pairs
    from evolm.rubrics import WrittenRubric, write_rubrics
    from evolm.runs.jsonl import write_jsonl
    from evolm.training.heldout import judge_heldout

    pairs = load_pairs(pairs_file)
    prompts = list(dict.fromkeys(p.prompt for p in pairs))
    written = {q: WrittenRubric("", None, 0.0) for q in prompts}
    valid = None
    if writer is not None:
        backend = load_backend(writer, dtype="float32", batch_size=16)
        schema = None
        if constrained:
            from evolm.backends.constrained import RUBRIC_SCHEMA as schema
        params = SamplingParams(0.6, 0.95, 480, SEED, json_schema=schema)
        written = dict(zip(prompts, write_rubrics(backend, prompts, params, progress=True), strict=True))
        valid = sum(w.valid for w in written.values()) / len(written)
        del backend
    cfg = RunConfig()
    cfg.rubric.invalid = "judge_raw"
    rows = judge_heldout(cfg, [judge], pairs, written, {}, {})
    write_jsonl(items_file, rows)
    return {"credits": [r["credit"] for r in rows], "validity": valid, "n": len(rows),
            "items": str(items_file.relative_to(ROOT))}


def load_judge(model: str = MODEL, mode: str = "yesno", dtype: str = "float32") -> Any:
    from evolm.backends.loading import load_backend
    from evolm.judge.judge import Judge

    return Judge(load_backend(model, dtype=dtype, batch_size=16), mode=mode)


# ============================================================================= A. the writer on labelled pairs


def study_a(args: argparse.Namespace) -> None:
    data = study_data()
    overrides = ["schedule.regime=rubric_only", "contrast.pairs=labelled", f"data.pairs={data['train_pairs']}",
                 f"schedule.steps_per_phase={args.steps}", "schedule.cycles=1",
                 f"schedule.save_every={max(1, args.steps // 3)}",  # a crash loses a third at most (resumed)
                 f"eval.pairs={data['curve_pairs']}", f"eval.every={args.steps}",
                 f"grpo.learning_rate={args.lr}"]
    OUT.mkdir(parents=True, exist_ok=True)
    writers: list[tuple[str, str | None]] = [("no rubric", None), ("base writer", MODEL)]
    run_dir, minutes, trained = OUT / "A-writer", 0.0, None
    if not args.baselines_only:  # --baselines-only: what does not depend on training, e.g. while the writer trains
        if not args.no_train:
            run_dir, minutes = train("A-writer", overrides, OUT / "A-train.log")
        trained = final_checkpoint(run_dir)
        writers.append(("trained writer", str(trained)))
    judge = load_judge()
    # the trained writer first: a --baselines-only run may still be filling the rest
    done = {(set_name, arm): writer_credits(data[set_name], set_name, arm, writer, judge)
            for arm, writer in reversed(writers) for set_name in ("uf_eval", "llmbar")}
    if trained is None:
        return
    sets = {set_name: {arm: done[set_name, arm] for arm, _ in writers} for set_name in ("uf_eval", "llmbar")}
    result = {"arm": "A", "minutes_training": round(minutes, 1), "command": command("A-writer", overrides),
              "eval_command": "python -m studies.learning A" + (" --no-train" if args.no_train else ""),
              "checkpoint": str(trained.relative_to(ROOT)), "trained_steps": int(trained.name.split("-")[-1]),
              "planned_steps": args.steps, "sets": sets, "curve": eval_lines(run_dir), "steps": step_lines(run_dir)}
    _save("A", result)


def writer_credits(pairs_file: Path, set_name: str, arm: str, writer: str | None, judge: Any) -> dict[str, Any]:
    """``pair_credits`` of one writer on one set, kept in ``runs/study/A-credits-SET-ARM.json`` and reused while
    the writer and the pairs are the same (``--baselines-only`` computes the untrained ones ahead)."""
    tag = f"{set_name}-{arm.split()[0]}"
    cache = OUT / f"A-credits-{tag}.json"
    key = {"writer": writer, "pairs": str(pairs_file.relative_to(ROOT)),
           "pairs_sha": hashlib.sha256(pairs_file.read_bytes()).hexdigest()}
    if cache.exists():
        kept = json.loads(cache.read_text(encoding="utf-8"))
        if kept.get("key") == key:
            return kept["result"]
    result = pair_credits(pairs_file, writer, judge, OUT / f"A-items-{tag}.jsonl")
    _write(cache, json.dumps({"key": key, "result": result}, indent=1))
    return result


# ============================================================================= B and C. regimes and ablations


ARMS = {
    "B-coevolve": ["schedule.regime=coevolve"],
    "B-frozen_rubric": ["schedule.regime=frozen_rubric", "schedule.cycles=2", "schedule.steps_per_phase=4"],
    "B-sequential": ["schedule.regime=sequential"],
    "C-binary": ["schedule.regime=coevolve", "rubric.reward=binary"],
    "C-unconstrained": ["schedule.regime=coevolve", "rubric.constrained=false"],
}
# Same step budget for every arm: coevolve and sequential do 2 cycles x 2 steps of each role (8 steps);
# frozen_rubric has one role, so it gets 8 policy steps (2 cycles x 4).


def run_arm(name: str, data: dict[str, Path]) -> dict[str, Any]:
    overrides = [*ARMS[name], f"eval.questions={data['questions']}", f"eval.pairs={data['curve_pairs']}",
                 "eval.every=8"]  # held-out evaluation at the start and the end (each costs ~8 min on 2 cores)
    run_dir, minutes = train(name, overrides, OUT / f"{name}.log")
    from evolm.eval.rubric_stats import run_rubric_stats

    dirs = [run_dir / "stage1-writer", run_dir / "stage2-policy"] if (run_dir / "stage1-writer").exists() else [run_dir]
    stats, evals, steps = [], [], []
    for d in dirs:
        stats += [s.to_json() for s in run_rubric_stats(d)]
        evals += [{**e, "stage": d.name} for e in eval_lines(d)]
        steps += [{**e, "stage": d.name} for e in step_lines(d)]
    return {"arm": name, "minutes_training": round(minutes, 1), "command": command(name, overrides),
            "curve": evals, "steps": steps, "rubric_stats": stats, "paired": paired_change(dirs)}


def paired_change(dirs: Sequence[Path]) -> dict[str, Any] | None:
    """First vs last held-out evaluation of a run, item by item (``heldout/step-*.jsonl``; None if not kept).

    Policy: the same questions under the same fixed rubrics, end score minus start score per question.
    Pairs: the same pairs, end credit minus start credit (each evaluation with its writer's rubric)."""
    from evolm.runs.jsonl import read_jsonl
    from evolm.training.heldout import HELDOUT_DIR

    files = sorted(f for d in dirs for f in (d / HELDOUT_DIR).glob("step-*.jsonl"))
    if len(files) < 2:
        return None
    first, last = read_jsonl(files[0]), read_jsonl(files[-1])
    out: dict[str, Any] = {"first": files[0].name, "last": files[-1].name}
    for kind, key, ident in (("question", "score", "question"), ("pair", "credit", "prompt")):
        a = {r[ident]: r[key] for r in first if r["kind"] == kind and r.get(key) is not None}
        b = {r[ident]: r[key] for r in last if r["kind"] == kind and r.get(key) is not None}
        common = [k for k in a if k in b]
        if common:
            diff = [b[k] - a[k] for k in common]
            up, down, p = stats.sign_test([b[k] for k in common], [a[k] for k in common])
            out[kind] = {"n": len(common), "mean_diff": statistics.fmean(diff), "ci": stats.bootstrap_mean(diff),
                         "up": up, "down": down, "p": p}
    return out


def study_bc(which: str, only: str | None = None) -> None:
    data = study_data()
    OUT.mkdir(parents=True, exist_ok=True)
    for name in [a for a in ARMS if a.startswith(which) and only in (None, a)]:
        if (OUT / f"{name}.json").exists():
            print(f"{name}: done already ({OUT / f'{name}.json'})")
            continue
        _save(name, run_arm(name, data))


def backfill_policy(name: str) -> None:
    """Per-question policy scores, start and end, for an arm run before held-out items were kept.

    The held-out policy score is deterministic given the weights: greedy answers (``RunConfig.pair_answer_tokens``,
    the run's system prompt) scored by the frozen float32 ``yesno`` judge under the run's fixed evaluation rubrics
    (``eval_rubrics.jsonl``). So the start (the base model) and the end (the last checkpoint) are recomputed here,
    checked against the means the run logged, and written as ``heldout/step-*.jsonl`` items (questions only:
    the pairs' rubrics were sampled inside training and cannot be redrawn)."""
    from evolm.backends.base import SamplingParams
    from evolm.backends.loading import load_backend
    from evolm.config import load_config
    from evolm.runs.jsonl import read_jsonl, write_jsonl
    from evolm.training.contrast import policy_messages
    from evolm.training.heldout import EVAL_RUBRICS_FILE, heldout_items_path, judge_heldout, summarize_heldout

    run_dir = OUT / name
    policy_dir = run_dir / "stage2-policy" if (run_dir / "stage2-policy").exists() else run_dir
    cfg = load_config(str(policy_dir / "config.yaml"))
    fixed = {r["question"]: r["text"] for r in read_jsonl(policy_dir / EVAL_RUBRICS_FILE)}
    logged = [e for e in eval_lines(policy_dir) if e.get("heldout_policy_score") is not None]
    judge = load_judge()
    params = SamplingParams(0.0, 1.0, cfg.pair_answer_tokens, cfg.seed)
    for weights, line in ((MODEL, logged[0]), (str(final_checkpoint(policy_dir)), logged[-1])):
        backend = load_backend(weights, dtype="float32", batch_size=16)
        qs = list(fixed)
        answers = dict(zip(qs, backend.generate([policy_messages(q, cfg.model.system_prompt) for q in qs], params),
                           strict=True))
        del backend
        rows = judge_heldout(cfg, [judge], [], {}, answers, fixed)  # judged as the run's evaluation judges them
        mean = summarize_heldout(line["step"], rows, {}).heldout_policy_score
        print(f"{name} step {line['step']}: recomputed {mean:.4f}, logged {line['heldout_policy_score']:.4f}")
        out = heldout_items_path(policy_dir, line["step"])
        out.parent.mkdir(exist_ok=True)
        write_jsonl(out, [{**r, "recomputed": True} for r in rows])
    result = json.loads((OUT / f"{name}.json").read_text(encoding="utf-8"))
    result["paired"] = paired_change([policy_dir])
    _save(name, result)


# ============================================================================= W. writers on held-out labelled pairs

# The study's judge, and where its arms are kept: in the repository (rubrics, judged items, summaries as text), so that
# `writers-table` regenerates the tables on a fresh clone. Another judge's arms (--judge) go to
# runs/study/writers/judge-NAME, on this machine only.
JUDGE = "qwen2.5-coder-1.5b-instruct"
# The writers study's judge weights (held-out arms, probe and the 1.5B training configs): float32, the weights every
# CPU computes natively (bfloat16 cost 3.1x less than float32 on an AMX Xeon but 5.4x more on the 2-core AVX2 EPYC the
# training runs ran on: docs/PERFORMANCE.md). `--judge-dtype bfloat16` judges an arm with other weights; such arms are
# kept apart, in WRITERS/bfloat16 (the study's first arms were judged so, docs/RESULTS.md).
JUDGE_DTYPE = "float32"
WRITERS = FIGURES / "writers"
HELDOUT_FILE = WRITERS / "heldout_pairs.jsonl"  # the 100 held-out LLMBar pairs (MIT), kept beside the arms
HANDWRITTEN = HERE / "data" / "handwritten_rubrics.jsonl"
WRITER_ARMS = ("none", "hand", "base", "strong", "warm", "warm-evolm-half", "warm-evolm", "warm-evolm2", "warm-seq",
               "warm-grpo-half", "warm-grpo")
PLANNED_ARMS = ("none", "hand", "base", "strong", "warm", "warm-evolm-half", "warm-evolm", "warm-grpo-half",
                "warm-grpo")  # the 1.5B study's arms
TRAINED_FROM_WARM = ("warm-evolm-half", "warm-evolm", "warm-grpo-half", "warm-grpo")  # trained from the warm start
ARM_LABELS = {"none": "no rubric", "hand": "hand-written rubrics (ceiling)", "base": "base writer (SmolLM2-135M)",
              "strong": "stronger fixed writer (untrained)",
              "warm": "warm-started writer (SFT)",
              "warm-evolm-half": "warm start + EvoLM, halfway (100 rubric-step questions)",
              "warm-evolm": "warm start + EvoLM (temporal contrast)",
              "warm-evolm2": "warm start + EvoLM, 2 cycles",
              "warm-seq": "warm start + sequential (writer stage, policy frozen)",
              "warm-grpo-half": "warm start + labelled-pair GRPO, halfway (100 rubric-step questions)",
              "warm-grpo": "warm start + labelled-pair GRPO"}
HELDOUT_SETS = (("Natural.json", None), ("Adversarial_Neighbor.json", 33))  # (LLMBar file, pairs kept; None: all)
HELDOUT_MAX_CHARS, HELDOUT_PAIRS = 1200, 100
WRITE_CHUNK, JUDGE_CHUNK = 8, 10  # prompts per saved rubric chunk, pairs per saved judging chunk (resume points)


def _judge_id(dtype: str | None = None) -> dict[str, str]:
    """The judge an arm's key names: the study's judge in ``dtype`` (default: the weights this command judges with; an
    arm saved before keys named a judge was judged in float32)."""
    return {"model": JUDGE, "dtype": dtype or JUDGE_DTYPE}


def writers_pairs() -> Path:
    """The held-out pairs: of LLMBar Natural and the first 33 Adversarial Neighbor pairs whose prompt and answers are
    each under ``HELDOUT_MAX_CHARS`` characters (87 + 33 = 120 pairs, 120 distinct prompts), the ``HELDOUT_PAIRS``
    shortest (twice the prompt plus both answers: what the judge reads), in file order, with the set's name kept.
    The 100 shortest are 69 Natural + 31 Neighbor and cost the judge 57% of all 120: on 2 shared CPU cores a judge
    forward pass costs ~1.7 CPU-seconds, and an arm reads 200-1000 of them."""
    from evolm.eval.pairs import load_pairs

    dst = HELDOUT_FILE
    if dst.exists():  # kept in the repository: the study's pairs whether or not the data sets are on this machine
        return dst
    rows = []
    for name, n in HELDOUT_SETS:
        keep = [p for p in load_pairs(DATA / "llmbar" / name)
                if max(len(p.prompt), len(p.better), len(p.worse)) <= HELDOUT_MAX_CHARS][:n]
        rows += [{"prompt": p.prompt, "chosen": p.better, "rejected": p.worse, "set": name.removesuffix(".json")}
                 for p in keep]
    cost = sorted(range(len(rows)), key=lambda i: (2 * len(rows[i]["prompt"]) + len(rows[i]["chosen"])
                                                   + len(rows[i]["rejected"]), i))
    rows = [rows[i] for i in sorted(cost[:HELDOUT_PAIRS])]
    _write(dst, "".join(json.dumps(r) + "\n" for r in rows))
    return dst


# The labelled writer's rubrics made the judge agree with UltraFeedback's labels on its own not-yet-trained-on pairs,
# and did not move LLMBar (docs/RESULTS.md): learning that stays in its distribution, or none? A second held-out set
# asks, in the training distribution: UltraFeedback training pairs no run trained on. Both 1.5B runs dealt out the same
# 200 of the 514 training questions under data.max_prompt_tokens (the same seed and order: the EvoLM run's policy
# questions, whose answers its rubric steps contrast, and the labelled run's pairs); the other 314 were never a rubric-
# step or policy question. Of those, the pairs with a strict preference (GPT-4 ratings) whose answers are each under
# HELDOUT_MAX_CHARS, in file order: 99 pairs, kept beside their arms.
EVOLM_RUN = ("configs/learning/judge-1b5/evolm.yaml", "runs/learning/judge-1b5/evolm")  # the study's two training runs:
LABELLED_RUN = ("configs/learning/judge-1b5/labelled.yaml", "runs/learning/judge-1b5/labelled")  # (config, run dir)
UF_DIR = "ultrafeedback"  # WRITERS/ultrafeedback: the arms on these pairs
UF_ARMS = ("none", "warm", "warm-grpo", "warm-evolm")
UF_TRAINED = 200  # rubric-step questions of each run (50 steps x 4), the first policy questions of the EvoLM run


def uf_heldout_rows(pairs: Sequence[Any], trained: set[str], scores: dict[str, tuple[float, float]],
                    max_chars: int = HELDOUT_MAX_CHARS) -> list[dict[str, Any]]:
    """The held-out UltraFeedback rows: of ``pairs`` (``contrast.Pair``, in file order) those whose question is not in
    ``trained``, whose chosen answer was rated strictly higher (``scores``: question -> (chosen, rejected)) and whose
    answers are each at most ``max_chars`` characters."""
    return [{"prompt": p.question, "chosen": p.a_pos, "rejected": p.a_neg, "set": "UltraFeedback"}
            for p in pairs if p.question not in trained and scores[p.question][0] > scores[p.question][1]
            and max(len(p.a_pos), len(p.a_neg)) <= max_chars]


def _labelled_deal() -> tuple[Any, Any, list[list[Any]]]:
    """The labelled run's config, its training prompts fitted under ``data.max_prompt_tokens`` and the pairs its
    first ``UF_TRAINED`` rubric-step questions were dealt, step by step: the package's own fitting and deal (it needs
    the warm start's tokenizer)."""
    from evolm.config import load_config
    from evolm.training.plan import Plan
    from evolm.training.prompt_length import fit_prompt_set

    cfg = load_config(str(ROOT / LABELLED_RUN[0]))
    fit = fit_prompt_set(cfg)
    plan, n = Plan(cfg, fit.questions, fit.references, fit.pairs), cfg.schedule.prompts_per_step
    return cfg, fit, [plan.labelled.take(r, n) for r in range(UF_TRAINED // n)]


def uf_pairs() -> Path:
    """The held-out UltraFeedback pairs (``uf_heldout_rows``), built once from the two runs' configs and kept in the
    repository."""
    dst = WRITERS / UF_DIR / "heldout_pairs.jsonl"
    if dst.exists():
        return dst
    from evolm.config import load_config
    from evolm.training.plan import Plan
    from evolm.training.prompt_length import fit_prompt_set

    labelled, fit_l, dealt = _labelled_deal()
    evolm = load_config(str(ROOT / EVOLM_RUN[0]))
    plan_e, n = Plan(evolm, fit_prompt_set(evolm).questions), evolm.schedule.prompts_per_step
    trained = {p.question for step in dealt for p in step}
    trained |= {plan_e.policy_question(s, slot) for s in range(UF_TRAINED // n) for slot in range(n)}
    scores = {r["prompt"]: (r["metadata"]["score_chosen"], r["metadata"]["score_rejected"])
              for r in _jsonl(ROOT / str(labelled.data.pairs))}
    rows = uf_heldout_rows(fit_l.pairs, trained, scores)
    _write(dst, "".join(json.dumps(r) + "\n" for r in rows))
    print(f"{len(rows)} held-out UltraFeedback pairs ({len(trained)} training questions left out) -> {dst}")
    return dst


# Each training run's own rubric-step pairs, judged with no rubric: do the writer's rubrics change the judge's verdict
# on the pairs it is rewarded on, or do the pairs decide? The labelled run's in-training votes rose from 47 / 45 (steps
# 1-25) to 60 / 29 (steps 26-50): a writer that learned, or later pairs easier for the judge (``_train_pairs_lines``)?
TRAIN_SETS = {"labelled-train": LABELLED_RUN, "evolm-train": EVOLM_RUN}  # pair set -> (config, run directory)


def _sample_pairs(samples_dir: Path, source: str) -> list[dict[str, Any]]:
    """A run's rubric-step pairs from its samples (``samples/phase-*-rubric.jsonl``, one row per sampled rubric), one
    row per (step, slot) in that order: the better answer (the fresh one of a temporal pair) as ``chosen``."""
    pairs: dict[tuple[int, int], dict[str, Any]] = {}
    for f in sorted(samples_dir.glob("phase-*-rubric.jsonl")):
        for r in _jsonl(f):
            if r.get("role") == "rubric" and r.get("a_pos") is not None and r.get("a_neg") is not None:
                pairs.setdefault((int(r["step"]), int(r["slot"])), {
                    "prompt": r["question"], "chosen": r["a_pos"], "rejected": r["a_neg"], "set": source,
                    "step": int(r["step"]), "slot": int(r["slot"])})
    return [pairs[k] for k in sorted(pairs)]


def train_pairs(name: str) -> Path:
    """The pairs of ``TRAIN_SETS[name]``'s rubric steps in the order the run met them (``step``, ``slot``), built once
    and kept in the repository: the labelled run's by the package's deal (``_labelled_deal``; equal to its recorded
    samples), the EvoLM run's temporal pairs from its samples once it has finished on this machine."""
    dst = WRITERS / name / "heldout_pairs.jsonl"
    if dst.exists():
        return dst
    config, run = TRAIN_SETS[name]
    if name == "labelled-train":
        rows = [{"prompt": p.question, "chosen": p.a_pos, "rejected": p.a_neg, "set": "UltraFeedback train",
                 "step": r + 1} for r, step in enumerate(_labelled_deal()[2]) for p in step]
    elif not _finished(ROOT / run, config):
        raise SystemExit(f"--pairs {name}: {run} has not finished on this machine: its rubric-step pairs are not "
                         "all made")
    else:
        rows = _sample_pairs(ROOT / run / "samples", "EvoLM temporal")
    _write(dst, "".join(json.dumps(r) + "\n" for r in rows))
    return dst


PAIR_SETS = ("llmbar", UF_DIR, *TRAIN_SETS)


def pair_set(name: str) -> tuple[Path, Path]:
    """(where a pair set's arms are kept, its pairs): ``llmbar`` (the study's held-out pairs), ``ultrafeedback``
    (``uf_pairs``) or a run's own rubric-step pairs (``train_pairs``)."""
    if name == "llmbar":
        return WRITERS, writers_pairs()
    return WRITERS / name, (uf_pairs() if name == UF_DIR else train_pairs(name))


def _jsonl(path: Path) -> list[dict[str, Any]]:
    from evolm.runs.records import read_lenient

    return read_lenient(path).rows if path.exists() else []


def _append(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write("".join(json.dumps(r) + "\n" for r in rows))
        f.flush()
        os.fsync(f.fileno())


def handwritten_rubrics() -> dict[str, str]:
    """prompt -> rubric JSON text, from ``data/handwritten_rubrics.jsonl`` (how they were written: its header
    row and docs/RESULTS.md)."""
    rows = [r for r in _jsonl(HANDWRITTEN) if "prompt" in r]
    return {r["prompt"]: json.dumps({"criteria": r["criteria"]}) for r in rows}


def _write_rubrics(writer: str, prompts: Sequence[str],
                   decoding: dict[str, Any]) -> Iterator[tuple[list[str], list[str]]]:
    """``writer``'s rubrics for ``prompts`` with an arm key's ``decoding`` (greedy, under the rubric grammar), as
    (prompts, rubrics) chunks of ``WRITE_CHUNK``: how an arm's rubrics are written (``writer_arm``) and written again
    (``writers_check``), batch for batch."""
    from evolm.backends.base import SamplingParams
    from evolm.backends.constrained import rubric_schema
    from evolm.backends.loading import load_backend
    from evolm.rubrics import rubric_messages

    backend = load_backend(writer, dtype="float32", batch_size=WRITE_CHUNK)
    params = SamplingParams(decoding["temperature"], 1.0, decoding["max_new_tokens"], SEED,
                            json_schema=rubric_schema(decoding.get("max_criteria", 5)))
    for i in range(0, len(prompts), WRITE_CHUNK):
        chunk = list(prompts[i:i + WRITE_CHUNK])
        yield chunk, backend.generate([rubric_messages(q, decoding["prompt"]) for q in chunk], params)


FIVE_PROMPTS = HERE / "data" / "five_prompts.jsonl"  # results/five_prompts.md's everyday prompts


def five_rubrics(arm: str, writer: str, decoding: dict[str, Any]) -> Path:
    """``writer``'s rubrics for the 5 everyday prompts, decoded as its arm, kept beside the arm as
    ``ARM-five.jsonl`` (rows as ``evolm rubric`` writes them, which ``bench/rubrics_md.py`` lays side by side): a
    trained writer's checkpoint lives in ``runs/``, which a new machine does not have, so its five rubrics are
    written with its arm's rubrics (once)."""
    from evolm.rubrics import read_written

    out = WRITERS / f"{arm}-five.jsonl"
    if not out.exists():
        prompts = [r["prompt"] for r in _jsonl(FIVE_PROMPTS)]
        rows = [{"prompt": q, **read_written(t).fields()}
                for chunk, texts in _write_rubrics(writer, prompts, decoding)
                for q, t in zip(chunk, texts, strict=True)]
        _write(out, "".join(json.dumps(r) + "\n" for r in rows))
        print(f"{arm}: the 5 everyday prompts' rubrics -> {out}", flush=True)
    return out


def writer_arm(arm: str, writer: str | None, max_tokens: int, write_only: bool = False,
               max_criteria: int = 5, pairs_name: str = "llmbar") -> dict[str, Any] | None:
    """One arm of the writers study, resumable: rubrics (greedy, constrained, one per prompt) are appended to
    ``WRITERS/ARM-rubrics.jsonl`` and judged pairs to ``ARM-items.jsonl`` in small chunks, so a killed run resumes
    where it stopped; ``ARM.json`` is the summary ``writers-table`` reads. ``write_only``: stop once the rubrics are
    written (their statistics show in ``writers-table``; a later run judges them). ``pairs_name``: the held-out pair
    set (``pair_set``); the arms of ``ultrafeedback`` are kept in ``WRITERS/ultrafeedback``."""
    from evolm.config import RunConfig
    from evolm.eval.pairs import load_pairs
    from evolm.rubrics import WrittenRubric, read_written
    from evolm.training.heldout import judge_heldout

    where, pairs_file = pair_set(pairs_name)
    pairs = load_pairs(pairs_file)
    sets = [r["set"] for r in _jsonl(pairs_file)]
    prompts = list(dict.fromkeys(p.prompt for p in pairs))
    key = {"arm": arm, "writer": writer,  # judged pairs are kept per pair (prompt, answers): a new subset reuses them
           "decoding": None if writer is None else {"temperature": 0.0, "max_new_tokens": max_tokens,
                                                    "constrained": True, "prompt": "v3",
                                                    **({"max_criteria": max_criteria} if max_criteria != 5 else {})}}
    if arm == "hand":
        key["rubrics_sha"] = hashlib.sha256(HANDWRITTEN.read_bytes()).hexdigest()
    where.mkdir(parents=True, exist_ok=True)
    rub_file, items_file, key_file, summary = (where / f"{arm}{end}" for end in ("-rubrics.jsonl", "-items.jsonl",
                                                                               "-key.json", ".json"))
    old = json.loads(key_file.read_text(encoding="utf-8")) if key_file.exists() else None
    if writer and (adapter := ROOT / writer / "adapter_model.safetensors").is_file():  # a training run's checkpoint:
        key["writer_sha"] = hashlib.sha256(adapter.read_bytes()).hexdigest()  # another run's at the same path differs
    elif old and old.get("writer") == writer and "writer_sha" in old:  # its checkpoint is gone (another machine):
        key["writer_sha"] = old["writer_sha"]  # the rubrics it wrote stand
    key["judge"] = _judge_id()
    old = old or key
    if old != key:
        same_rubrics = {k: v for k, v in old.items() if k != "judge"} == {k: v for k, v in key.items() if k != "judge"}
        print(f"{arm}: {'the judge' if same_rubrics else 'writer, pairs or decoding'} changed: "
              f"{'judging the rubrics again' if same_rubrics else 'starting the arm afresh'}", flush=True)
        for f in (items_file,) if same_rubrics else (rub_file, items_file):
            f.unlink(missing_ok=True)
        summary.unlink(missing_ok=True)  # the finished arm's summary is the old judge's
    key_file.write_text(json.dumps(key, indent=1), encoding="utf-8")
    before = json.loads(summary.read_text(encoding="utf-8")) if summary.exists() else None  # a finished arm
    t0 = time.time()
    rubrics = {r["prompt"]: r["text"] for r in _jsonl(rub_file)}
    if arm == "none":
        rubrics = dict.fromkeys(prompts, "")
    elif arm == "hand":
        rubrics = handwritten_rubrics()
        missing = [q for q in prompts if q not in rubrics]
        if missing:
            raise SystemExit(f"{HANDWRITTEN}: no rubric for {len(missing)} held-out prompts "
                             f"(first: {missing[0][:60]!r})")
    elif any(q not in rubrics for q in prompts):
        for chunk, texts in _write_rubrics(writer, [q for q in prompts if q not in rubrics], key["decoding"]):
            _append(rub_file, [{"prompt": q, "text": t} for q, t in zip(chunk, texts, strict=True)])
            rubrics.update(zip(chunk, texts, strict=True))
            print(f"{arm}: {len(rubrics)}/{len(prompts)} rubrics written ({(time.time() - t0) / 60:.1f} min)",
                  flush=True)
        if where == WRITERS:  # while the writer is at hand (a finished arm is only read back); once per writer
            five_rubrics(arm, writer, key["decoding"])
    minutes_write = (time.time() - t0) / 60
    if write_only:
        print(f"{arm}: {len(rubrics)} rubrics in {rub_file} ({minutes_write:.1f} min); not judged (--write-only)")
        return None
    written = {q: (WrittenRubric("", None, 0.0) if not rubrics[q] else read_written(rubrics[q])) for q in prompts}
    done = {(r["prompt"], r["chosen"], r["rejected"]): r for r in _jsonl(items_file)}
    todo_pairs = [p for p in pairs if (p.prompt, p.better, p.worse) not in done]
    if todo_pairs:
        judge = load_judge(JUDGE, dtype=JUDGE_DTYPE)
        cfg = RunConfig()
        cfg.rubric.invalid = "judge_raw"
        for i in range(0, len(todo_pairs), JUDGE_CHUNK):
            rows = judge_heldout(cfg, [judge], todo_pairs[i:i + JUDGE_CHUNK], written, {}, {})
            _append(items_file, rows)
            done.update({(r["prompt"], r["chosen"], r["rejected"]): r for r in rows})
            n_done = sum((p.prompt, p.better, p.worse) in done for p in pairs)
            print(f"{arm}: {n_done}/{len(pairs)} pairs judged ({(time.time() - t0) / 60:.1f} min)", flush=True)
    rows = [done[(p.prompt, p.better, p.worse)] for p in pairs]
    from evolm.eval.rubric_stats import rubric_stats

    result = {"arm": arm, "label": ARM_LABELS[arm], "key": key, "n": len(rows), "sets": sets,
              "pairs_sha": hashlib.sha256(pairs_file.read_bytes()).hexdigest(),
              "credits": [r["credit"] for r in rows],
              "validity": None if arm == "none" else statistics.fmean(w.valid for w in written.values()),
              "stats": None if arm == "none" else rubric_stats([w.rubric for w in written.values()]).to_json(),
              "extra_stats": None if arm == "none" else _copy_stats(written),
              **({k: before[k] for k in ("minutes", "minutes_write") if k in before} if before and not todo_pairs
                 else {"minutes": round((time.time() - t0) / 60, 1), "minutes_write": round(minutes_write, 1)}),
              "rubrics": str(rub_file.relative_to(ROOT)) if writer else None,
              "items": str(items_file.relative_to(ROOT))}
    summary.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(f"{arm}: pair accuracy {statistics.fmean(result['credits']):.3f} (n={len(rows)}) "
          f"-> {summary}")
    return result


def _copy_stats(written: dict[str, Any]) -> dict[str, float]:
    """What the base writer's rubrics go wrong with: a criterion repeated within its rubric, a criterion copied from
    the rubric prompt's one-shot example (its first three words, or its scoring levels, are the example's), a
    criterion that repeats the question's own text (first 60 characters)."""
    from evolm.rubrics import _EXAMPLE

    def head(text: str) -> str:
        return " ".join(text.strip().lower().split()[:3])

    heads = {head(c["criterion"]) for c in _EXAMPLE["criteria"]}
    levels = [dict(c["scoring_levels"]) for c in _EXAMPLE["criteria"]]
    crits = [(q, [c.criterion.strip().lower() for c in w.rubric.criteria]) for q, w in written.items() if w.rubric]
    copied = [head(c.criterion) in heads or dict(c.scoring_levels) in levels
              for w in written.values() if w.rubric for c in w.rubric.criteria]
    flat = [(q, c) for q, cs in crits for c in cs]
    if not flat:
        return {}
    return {"rubrics_with_repeat": statistics.fmean(len(set(cs)) < len(cs) for _, cs in crits),
            "criteria_from_example": statistics.fmean(copied),
            "criteria_copying_question": statistics.fmean(q.strip().lower()[:60] in c for q, c in flat)}


def training_overlap(pairs_file: Path) -> dict[str, int | None]:
    """Held-out prompts also found in a training source (first 60 characters, case and spacing ignored): the warm
    start's seed set (``builtin:seed``), GSM8K train (its GSM8K seed rubrics) and the UltraFeedback train pairs
    (labelled-pair GRPO); None for a source not on this machine (not checked)."""
    from evolm.training.sft import BUILTIN_SEEDS

    def norm(text: str) -> str:
        return " ".join(text.lower().split())[:60]

    held = {norm(r["prompt"]) for r in _jsonl(pairs_file)}
    sources = {"seed rubrics": BUILTIN_SEEDS["builtin:seed"], "GSM8K train": DATA / "gsm8k" / "train.jsonl",
               "UltraFeedback train": DATA / "ultrafeedback_sample" / "train_clean.jsonl"}
    return {name: len(held & {norm(r.get("prompt") or r.get("question") or "") for r in _jsonl(path)})
            if path.exists() else None for name, path in sources.items()}


def writers_check(arm: str, writer: str, limit: int) -> int:
    """Does ``writer`` write the kept rubrics of ``arm``? The first ``limit`` held-out prompts, with the arm's decoding
    (its key) and chunking, against ``ARM-rubrics.jsonl``: how a writer retrained on another machine (``runs/`` is
    machine-local) is shown to be the one the arm was measured with. Returns the number of rubrics that differ."""
    from evolm.eval.pairs import load_pairs

    key_file, rub_file = WRITERS / f"{arm}-key.json", WRITERS / f"{arm}-rubrics.jsonl"
    if not key_file.exists() or not rub_file.exists():
        raise SystemExit(f"writers-check: no kept rubrics of arm '{arm}' in {WRITERS}")
    decoding = json.loads(key_file.read_text(encoding="utf-8"))["decoding"]
    if not decoding:
        raise SystemExit(f"writers-check: arm '{arm}' has no writer")
    kept = {r["prompt"]: r["text"] for r in _jsonl(rub_file)}
    prompts = [q for q in dict.fromkeys(p.prompt for p in load_pairs(writers_pairs())) if q in kept][:limit]
    same = done = 0
    for chunk, texts in _write_rubrics(writer, prompts, decoding):
        same, done = same + sum(t == kept[q] for q, t in zip(chunk, texts, strict=True)), done + len(chunk)
        print(f"writers-check {arm}: {same} of {done} rubrics identical to the kept ones", flush=True)
    return len(prompts) - same


def writers_probe(model: str = JUDGE, mode: str = "yesno") -> dict[str, Any]:
    """P(Yes) of the frozen ``yesno`` judge ``model`` (or its score in another probability ``mode``: ``prob``, the
    expected 0-9 digit) for a right and a wrong short answer, under a criterion that names the expected value and under
    the judge's own generic criterion (no rubric): ``probe_file``. A judge that cannot tell them apart here cannot
    use a rubric."""
    from evolm.judge.judge import JudgeItem
    from evolm.rubrics import Criterion, Rubric

    judge = load_judge(model, mode, JUDGE_DTYPE)
    items = []
    for q, crit, right, wrong in VALUE_PROBES:
        rubric = Rubric((Criterion(crit, 1.0),))
        items += [JudgeItem(q, a, r) for r in (rubric, None) for a in (right, wrong)]
    scores = [j.score for j in judge.score(items)]
    rows = [{"question": q, "criterion": c, "right_rubric": scores[4 * i], "wrong_rubric": scores[4 * i + 1],
             "right_none": scores[4 * i + 2], "wrong_none": scores[4 * i + 3]}
            for i, (q, c, _, _) in enumerate(VALUE_PROBES)]
    WRITERS.mkdir(parents=True, exist_ok=True)
    probe_file(model, mode).write_text(
        json.dumps({"judge": model, "mode": mode, "dtype": JUDGE_DTYPE, "rows": rows}, indent=1), encoding="utf-8")
    print(_probe_line(rows, mode, model, JUDGE_DTYPE))
    return {"rows": rows}


def probe_file(model: str = JUDGE, mode: str = "yesno") -> Path:
    """Where ``writers_probe`` keeps the probe of judge ``model`` in ``mode``: ``probe-NAME[-MODE].json`` beside the
    study's arms (in the repository), whichever judge the arms use; ``-DTYPE`` ends the name of a probe of weights other
    than float32."""
    suffix = ("" if mode == "yesno" else f"-{mode}") + ("" if JUDGE_DTYPE == "float32" else f"-{JUDGE_DTYPE}")
    return FIGURES / "writers" / f"probe-{Path(model).name}{suffix}.json"


def _probe_line(rows: Sequence[dict[str, Any]], mode: str = "yesno", model: str = JUDGE,
                dtype: str = "float32") -> str:
    value = "P(Yes)" if mode == "yesno" else f"{mode} score"
    gap_r = [r["right_rubric"] - r["wrong_rubric"] for r in rows]
    gap_n = [r["right_none"] - r["wrong_none"] for r in rows]
    up, down, p = stats.sign_test(gap_r, [0.0] * len(gap_r))
    flags = ("" if model == JUDGE else f" --judge {model}") + ("" if mode == "yesno" else f" --judge-mode {mode}")
    return (f"Probe of `{Path(model).name}` in {dtype} ({len(rows)} short questions, a right and a wrong one-line "
            "answer each; "
            f"`python -m studies.learning writers-probe{flags}`): {value} right minus wrong under "
            "a criterion naming the expected value "
            f"{fmt_ci(statistics.fmean(gap_r), stats.bootstrap_mean(gap_r))} "
            f"(right higher in {up}, wrong higher in {down}, "
            f"sign test p {p:.3g}); under the judge's generic criterion (no rubric) "
            f"{fmt_ci(statistics.fmean(gap_n), stats.bootstrap_mean(gap_n))}; mean {value} under the value criterion "
            f"{statistics.fmean(r['right_rubric'] for r in rows):.3f} (right) vs "
            f"{statistics.fmean(r['wrong_rubric'] for r in rows):.3f} (wrong).")


def _moved_line(res: dict[str, dict[str, Any]]) -> str | None:
    """How far each writer trained from the warm start moved from it: its rubrics, prompt by prompt, the same text as
    the warm start's, and their mean character similarity (difflib's ratio)."""
    def texts(arm: str) -> dict[str, str]:
        path = WRITERS / f"{arm}-rubrics.jsonl"
        return {r["prompt"]: r["text"] for r in _jsonl(path)} if path.exists() else {}

    warm = texts("warm")
    parts = []
    for arm in (a for a in TRAINED_FROM_WARM if a in res and warm):
        both = [(warm[q], t) for q, t in texts(arm).items() if q in warm]
        if both:
            same = sum(a == b for a, b in both)
            ratio = statistics.fmean(difflib.SequenceMatcher(None, a, b).ratio() for a, b in both)
            parts.append(f"{ARM_LABELS[arm]} {same} of {len(both)} (mean character similarity {ratio:.2f})")
    return ("Rubrics word for word the warm start's (greedy decoding, prompt by prompt): " + "; ".join(parts) + "."
            if parts else None)


def _length_line(res: dict[str, dict[str, Any]], order: Sequence[tuple[str, str, str]]) -> str:
    """How often each arm's judge prefers the longer answer, beside how often the human label does (a diagnosis:
    a judge that reads length, not the rubric, ranks pairs the same whatever the rubric says)."""
    cells = []
    differ = [k for k in order if len(k[1]) != len(k[2])]
    human = statistics.fmean(len(k[1]) > len(k[2]) for k in differ) if differ else None
    for _a, r in res.items():
        rows = [x for x in _jsonl(ROOT / r["items"]) if x.get("kind") == "pair"] if r.get("items") else []
        keys = {(x["prompt"], x["chosen"], x["rejected"]): x for x in rows}
        pairs = [keys[k] for k in keys if len(k[1]) != len(k[2])]
        if not pairs:
            continue
        judged = [x for x in pairs if x["score_chosen"] is not None and x["score_rejected"] is not None
                  and x["score_chosen"] != x["score_rejected"]]
        longer = statistics.fmean((x["score_chosen"] > x["score_rejected"]) == (len(x["chosen"]) > len(x["rejected"]))
                                  for x in judged) if judged else math.nan
        gap = statistics.fmean(abs(x["score_chosen"] - x["score_rejected"]) for x in judged) if judged else math.nan
        cells.append(f"{r['label']} {longer:.2f} (mean score gap {gap:.3f})")
    if human is None or not cells:
        return ""
    return (f"The judge prefers the longer answer (share of pairs with answers of different lengths): "
            f"{'; '.join(cells)}. The human label prefers the longer answer in {human:.2f} of them.")


def _drop_flat_line(res: dict[str, dict[str, Any]]) -> str:
    """``rewards.drop_flat_criteria`` on the held-out pairs, for the arms whose items keep each answer's per-criterion
    readings: a pair's two answers as one group, its flat criteria (``rewards.FLAT_SPREAD``) dropped from both scores
    by the library's own ``drop_flat``, the credit recomputed; against the arm's credit, a sign test."""
    from evolm.eval.pairs import pair_credit
    from evolm.scores import CriterionScore
    from evolm.training.judging import RowReward, drop_flat, flat_positions

    def crit(readings: list[list[float]]) -> tuple[CriterionScore, ...]:
        return tuple(CriterionScore(str(k), w, v) for k, (w, v) in enumerate(readings))

    cells = []
    for r in res.values():
        rows = [x for x in _jsonl(ROOT / r["items"]) if x.get("kind") == "pair"] if r.get("items") else []
        rows = [x for x in rows if x.get("criteria_chosen") and x.get("criteria_rejected")]
        if not rows or len(rows) < len(r["credits"]):
            continue
        before, after, flat_share = [], [], []
        for x in rows:
            raw = [RowReward(x["score_chosen"], score=x["score_chosen"], criteria=(crit(x["criteria_chosen"]),)),
                   RowReward(x["score_rejected"], score=x["score_rejected"], criteria=(crit(x["criteria_rejected"]),))]
            flat = flat_positions(raw, ["g", "g"], policy=True)
            kept = drop_flat(raw, ["g", "g"], flat)
            before.append(x["credit"])
            after.append(pair_credit(kept[0].score, kept[1].score))
            flat_share += flat.get("g", [])
        up, down, p = stats.sign_test(after, before)
        cells.append(f"{r['label']} {statistics.fmean(after):.3f} against {statistics.fmean(before):.3f} "
                     f"({up} pairs better, {down} worse, sign test p {p:.3g}; {statistics.fmean(flat_share):.2f} of "
                     f"criteria flat across a pair)")
    if not cells:
        return ""
    return ("With `rewards.drop_flat_criteria` (a criterion whose P(Yes) differs by less than 0.05 between a pair's "
            "two answers dropped from both scores, as the option does in a policy group), held-out pair accuracy: "
            + "; ".join(cells) + ".")


def _other_weights_line(res: dict[str, dict[str, Any]]) -> str:
    """The same arms judged with other weights of the study's judge (``WRITERS/DTYPE/``, e.g. the bfloat16 record):
    each finished arm's accuracy there against here, and the pairs whose credit changed."""
    cells = []
    for folder in sorted(d for d in WRITERS.glob("*") if d.is_dir() and d.name != JUDGE_DTYPE):
        for a, r in res.items():
            if r.get("partial") or not (f := folder / f"{a}.json").exists():
                continue
            other = json.loads(f.read_text(encoding="utf-8"))
            if other.get("pairs_sha") != r.get("pairs_sha") or len(other["credits"]) != len(r["credits"]):
                continue
            up, down, p = stats.sign_test(other["credits"], r["credits"])
            there, here = statistics.fmean(other["credits"]), statistics.fmean(r["credits"])
            cells.append(f"{r['label']} {there:.3f} in {folder.name} against {here:.3f} "
                         f"(better there on {up} pairs, worse on {down}, p {p:.3g})")
    if not cells:
        return ""
    return ("The same rubrics judged with other weights of the judge (`writers-table --judge-dtype DTYPE`): "
            + "; ".join(cells) + ".")


def _diff_row(a: str, b: str, res: dict[str, dict[str, Any]]) -> list[Any]:
    """Arm ``a`` against arm ``b`` on the pairs both judged: better / worse, sign test p, mean difference and its
    paired bootstrap interval, n."""
    da = dict(zip(map(tuple, res[a]["keys"]), res[a]["credits"], strict=True))
    db = dict(zip(map(tuple, res[b]["keys"]), res[b]["credits"], strict=True))
    common = [k for k in da if k in db]
    ca, cb = [da[k] for k in common], [db[k] for k in common]
    up, down, p = stats.sign_test(ca, cb)
    diff = [x - y for x, y in zip(ca, cb, strict=True)]
    return [a, b, up, down, p, statistics.fmean(diff), stats.bootstrap_mean(diff), len(common)]


def _partial_arm(arm: str, order: list[tuple[str, str, str]], pairs_name: str = "llmbar") -> dict[str, Any] | None:
    """An unfinished arm from its saved chunks: the credits of the held-out pairs judged so far and the statistics
    of the rubrics written so far; ``None`` when no held-out pair is judged yet."""
    from evolm.eval.rubric_stats import rubric_stats
    from evolm.rubrics import read_written

    where, pairs_file = pair_set(pairs_name)
    judged = {(r["prompt"], r["chosen"], r["rejected"]): r for r in _jsonl(where / f"{arm}-items.jsonl")}
    keys = [k for k in order if k in judged]
    if not keys and not (where / f"{arm}-rubrics.jsonl").exists():
        return None
    sets = {(r["prompt"], r["chosen"], r["rejected"]): r["set"] for r in _jsonl(pairs_file)}
    texts = ({q: json.dumps({"criteria": c}) for q, c in ((r["prompt"], r["criteria"]) for r in _jsonl(HANDWRITTEN)
                                                         if "prompt" in r)} if arm == "hand" else
             {r["prompt"]: r["text"] for r in _jsonl(where / f"{arm}-rubrics.jsonl")})
    prompts = {k[0] for k in order}
    written = {q: read_written(t) for q, t in texts.items() if q in prompts and t}
    return {"arm": arm, "label": ARM_LABELS[arm], "partial": True, "keys": keys,
            "credits": [judged[k]["credit"] for k in keys], "sets": [sets[k] for k in keys],
            "validity": statistics.fmean(w.valid for w in written.values()) if written else None,
            "stats": rubric_stats([w.rubric for w in written.values()]).to_json() if written else None,
            "extra_stats": _copy_stats(written) if written else None,
            "items": str(where / f"{arm}-items.jsonl")}  # absolute: ROOT / it is itself


def _judged_arms(names: Sequence[str], pairs_name: str = "llmbar"
                 ) -> tuple[dict[str, dict[str, Any]], list[tuple[str, str, str]]]:
    """The arms of ``names`` judged on a held-out pair set so far, in that order: finished (``ARM.json``) or, marked
    partial, the pairs judged so far (``_partial_arm``); with the set's pairs in order. An arm judged on other pairs
    or by another judge is left out, in one printed line."""
    where, pairs_file = pair_set(pairs_name)
    sha = hashlib.sha256(pairs_file.read_bytes()).hexdigest()
    res = {a: json.loads((where / f"{a}.json").read_text(encoding="utf-8")) for a in names
           if (where / f"{a}.json").exists()}
    stale = [a for a, r in res.items()
             if r.get("pairs_sha") != sha or r.get("key", {}).get("judge", _judge_id("float32")) != _judge_id()]
    if stale:
        print(f"left out ({pairs_name}: judged on other pairs or by another judge; rerun `python -m studies.learning "
              "writers ARM`): " + ", ".join(stale))
    res = {a: r for a, r in res.items() if a not in stale}
    order = [(r["prompt"], r["chosen"], r["rejected"]) for r in _jsonl(pairs_file)]
    for r in res.values():
        r["keys"] = order
    for a in names:  # an arm still running (or stopped): the pairs judged so far, marked partial
        if a not in res and a not in stale and (part := _partial_arm(a, order, pairs_name)) is not None:
            res[a] = part
    return {a: res[a] for a in names if a in res}, order


def _comparisons(res: dict[str, dict[str, Any]], comps: Sequence[tuple[str, str]], n_pairs: int
                 ) -> tuple[list[list[Any]], list[str]]:
    """``_diff_row`` for each pair of arms of ``comps`` that both judged pairs, and their table's lines."""
    tests = [_diff_row(a, b, res) for a, b in comps
             if a in res and b in res and res[a]["credits"] and res[b]["credits"]]
    lines = ["", "| comparison | pairs better / worse | exact sign test p | "
             "accuracy difference [95% paired bootstrap CI] |", "|---|---|---|---|"]
    for a, b, up, down, p, d, ci, n in tests:
        on = f" (on the {n} pairs both judged)" if n < n_pairs else ""
        lines.append(f"| {ARM_LABELS[a]} vs {ARM_LABELS[b]}{on} | {up} / {down} | {p:.3g} | {fmt_ci(d, ci)} |")
    return tests, lines


UF_COMPARISONS = (("warm", "none"), ("warm-grpo", "none"), ("warm-evolm", "none"), ("warm-grpo", "warm"),
                  ("warm-evolm", "warm"), ("warm-evolm", "warm-grpo"))


def _uf_lines() -> list[str]:
    """The arms on the held-out UltraFeedback pairs (``uf_pairs``), once one has judged a pair: accuracy and rubric
    statistics per arm, and the paired comparisons that ask whether a trained writer learned within its training
    distribution."""
    if not (WRITERS / UF_DIR / "heldout_pairs.jsonl").exists():
        return []
    res, order = _judged_arms(UF_ARMS, UF_DIR)
    res = {a: r for a, r in res.items() if r["credits"]}
    if not res:
        return []
    lines = ["", f"The same writers on {len(order)} held-out UltraFeedback pairs, training pairs no run trained on "
             "(the training distribution; `python -m studies.learning writers ARM --pairs ultrafeedback`):", "",
             "| arm | n | pair accuracy [95% Wilson CI] | rubric validity | label-only | specific value | "
             "rubrics repeating a criterion |", "|---|---|---|---|---|---|---|"]
    for r in res.values():
        c, s, x = r["credits"], r.get("stats") or {}, r.get("extra_stats") or {}
        label = r["label"] + (f" — partial, {len(c)} of {len(order)} pairs judged so far" if r.get("partial") else "")
        lines.append(f"| {label} | {len(c)} | {fmt_ci(sum(c) / len(c), wilson(sum(c), len(c)))} | "
                     f"{_f(r.get('validity'))} | {_f(s.get('label_only'))} | {_f(s.get('specific_value'))} | "
                     f"{_f(x.get('rubrics_with_repeat'))} |")
    lines += _comparisons(res, UF_COMPARISONS, len(order))[1]
    if missing := [a for a in UF_ARMS if a not in res or res[a].get("partial")]:
        lines += ["", "Not finished on these pairs: " + ", ".join(ARM_LABELS[a] for a in missing) + "."]
    return lines


def _train_pairs_lines(name: str) -> list[str]:
    """A run's own rubric-step pairs (``train_pairs``), once the no-rubric arm has judged them: per half of the run,
    the judge with no rubric against the judge under the rubrics the writer wrote for those pairs in training
    (``training/RUN-pairs.jsonl``: the majority of a pair's sampled rubrics), pair by pair. A half where both side
    with the better answer alike was easy or hard for the judge whatever the rubric; a writer that learned shows as
    rubrics right where no rubric was wrong."""
    from evolm.config import load_config

    config, run = TRAIN_SETS[name]
    if not (WRITERS / name / "heldout_pairs.jsonl").exists():
        return []
    res, order = _judged_arms(("none",), name)
    votes = _jsonl(FIGURES / "training" / f"{Path(run).name}-pairs.jsonl")
    if "none" not in res or not votes:
        return []
    cfg = load_config(str(ROOT / config))
    half_at, n = cfg.total_steps // 2, cfg.schedule.prompts_per_step
    where = [(r["step"], r.get("slot", i % n)) for i, r in enumerate(_jsonl(WRITERS / name / "heldout_pairs.jsonl"))]
    credit = dict(zip(res["none"]["keys"], res["none"]["credits"], strict=True))
    rubric = {(v["step"], v["slot"]): (v["higher"] > v["lower"]) - (v["higher"] < v["lower"]) for v in votes}
    rows: dict[str, list[tuple[int, int]]] = {}
    for key, (step, slot) in zip(order, where, strict=True):
        if key in credit and (step, slot) in rubric:
            half = f"1-{half_at}" if step <= half_at else f"{half_at + 1}-{cfg.total_steps}"
            rows.setdefault(half, []).append((int(2 * credit[key]) - 1, rubric[(step, slot)]))
    better = "the label" if name == "labelled-train" else "the newer answer"
    lines = ["", f"{'The labelled' if name == 'labelled-train' else 'The EvoLM'} run's own {len(order)} rubric-step "
             f"pairs, in the order it met them: the judge with no rubric (`python -m studies.learning writers none "
             f"--pairs {name}`) against the judge under the rubrics the writer wrote for each pair in training (the "
             "majority of its sampled rubrics), pair by pair:", "",
             f"| steps | pairs | no rubric: for / against {better} | the writer's rubrics in training: for / against | "
             "rubrics right where no rubric was wrong / the reverse (sign test p) |", "|---|---|---|---|---|"]
    for half, xs in rows.items():
        right = sum(r == 1 and n == -1 for n, r in xs)
        wrong = sum(r == -1 and n == 1 for n, r in xs)
        p = stats.sign_test([1.0] * right + [0.0] * wrong, [0.5] * (right + wrong))[2]
        lines.append(f"| {half}{' — partial' if res['none'].get('partial') else ''} | {len(xs)} | "
                     f"{sum(n == 1 for n, _ in xs)} / {sum(n == -1 for n, _ in xs)} | "
                     f"{sum(r == 1 for _, r in xs)} / {sum(r == -1 for _, r in xs)} | {right} / {wrong} ({p:.2g}) |")
    return lines


def writers_table(write_doc: bool = True) -> dict[str, Any]:
    """The writers study's tables from ``runs/study/writers/*.json`` (the arms finished so far), as markdown lines,
    printed; with ``write_doc`` also into results/writers-table.md with its figure."""
    res, order = _judged_arms(WRITER_ARMS)
    lines = ["| arm | n | pair accuracy [95% Wilson CI] | LLMBar Natural | Adversarial Neighbor | rubric validity |",
             "|---|---|---|---|---|---|"]
    for _a, r in res.items():
        c = r["credits"]
        if not c:
            continue
        cells = []
        for s in ("Natural", "Adversarial_Neighbor"):
            cs = [x for x, t in zip(c, r["sets"], strict=True) if t == s]
            cells.append(fmt_ci(sum(cs) / len(cs), wilson(sum(cs), len(cs))) + f" (n={len(cs)})" if cs else "—")
        v = "—" if r["validity"] is None else f"{r['validity']:.2f}"
        label = r["label"] + (f" — partial, {len(c)} of {len(order)} pairs judged so far" if r.get("partial") else "")
        lines.append(f"| {label} | {len(c)} | {fmt_ci(sum(c) / len(c), wilson(sum(c), len(c)))} | "
                     f"{cells[0]} | {cells[1]} | {v} |")
    comps = [(a, "none") for a in res if a != "none"] + [("warm-evolm-half", "warm"), ("warm-evolm", "warm"),
                                                         ("warm-evolm", "warm-evolm-half"), ("warm-evolm2", "warm"),
                                                         ("warm-evolm2", "warm-evolm"), ("warm-seq", "warm"),
                                                         ("warm-evolm2", "warm-seq"), ("warm-grpo", "warm"),
                                                         ("warm-grpo", "warm-evolm2"), ("warm-grpo-half", "warm"),
                                                         ("warm-evolm-half", "warm-grpo-half"), ("warm", "base"),
                                                         ("hand", "base"), ("strong", "base"), ("hand", "warm"),
                                                         ("warm-evolm", "warm-grpo"), ("hand", "warm-evolm-half"),
                                                         ("hand", "warm-grpo-half"),
                                                         ("hand", "warm-evolm")]
    tests, comparison_lines = _comparisons(res, comps, len(order))
    lines += comparison_lines
    for trained in TRAINED_FROM_WARM:  # each trained writer's share of the warm start's gap to the ceiling
        if not all(a in res and res[a]["credits"] and not res[a].get("partial") for a in ("warm", trained, "hand")):
            continue
        acc = {a: statistics.fmean(res[a]["credits"]) for a in ("warm", trained, "hand")}
        room, gain = acc["hand"] - acc["warm"], acc[trained] - acc["warm"]
        share, ci, no_room = gap_closed(*(res[a]["credits"] for a in ("warm", trained, "hand")))
        interval = (f"95% paired bootstrap interval [{ci[0]:.0%}, {ci[1]:.0%}]" if ci else
                    f"no bounded 95% interval: the ceiling is not above the warm start in {no_room:.0%} of "
                    "bootstrap resamples")
        said = f" ({share:.0%}; {interval})." if room > 0 else " (the warm start is at the ceiling)."
        lines += ["", f"Of the gap from the warm start to the ceiling ({room:+.3f}), {ARM_LABELS[trained]} closes "
                  f"{gain:+.3f}{said}"]
    lines += ["", "| arm | rubrics parsed | criteria/rubric | label-only | specific value | constraint | "
              "criterion chars | rubrics repeating a criterion | criteria copied from the prompt's example |",
              "|---|---|---|---|---|---|---|---|---|"]
    for a, r in res.items():
        s, x = r.get("stats"), r.get("extra_stats") or {}
        if not s:
            continue
        label = r["label"]
        if r.get("partial") and (WRITERS / f"{a}-key.json").exists():
            writer = json.loads((WRITERS / f"{a}-key.json").read_text(encoding="utf-8")).get("writer")
            label += f" — partial{f', `{writer}`' if writer else ''}"
        lines.append(f"| {label} | {s['n_rubrics']}/{s['n_rubrics'] + s['n_unparsed']} | "
                     f"{_f(s['criteria_per_rubric'])} | {_f(s['label_only'])} | {_f(s['specific_value'])} | "
                     f"{_f(s['constraint'])} | {_f(s['criterion_chars'], 0)} | {_f(x.get('rubrics_with_repeat'))} | "
                     f"{_f(x.get('criteria_from_example'))} |")
    lines += _uf_lines() + _training_lines() + [x for name in TRAIN_SETS for x in _train_pairs_lines(name)]
    lines += _heldout_policy_lines()
    if moved := _moved_line(res):
        lines += ["", moved]
    lines += ["", _length_line(res, order)]
    if drop_line := _drop_flat_line(res):
        lines += ["", drop_line]
    if weights_line := _other_weights_line(res):
        lines += ["", weights_line]
    for path in sorted((FIGURES / "writers").glob("probe-*.json")):  # every judge probed, in each mode
        probe = json.loads(path.read_text(encoding="utf-8"))
        lines += ["", _probe_line(probe["rows"], probe["mode"], probe["judge"], probe.get("dtype", "float32"))]
    overlap = training_overlap(writers_pairs())
    lines += ["", "Held-out prompts found in a training source: " +
              ", ".join(f"{name} {n}" if n is not None else f"{name} not checked (its data is not on this machine: "
                        "`python scripts/fetch_data.py`)" for name, n in overlap.items()) + "."]
    missing = [a for a in PLANNED_ARMS if a not in res or res[a].get("partial")]
    if missing:
        lines += ["", "Not finished: " + ", ".join(ARM_LABELS[a] for a in missing) + " (`python -m studies.learning "
                  "writers-study` trains and judges what is left; `writers ARM` resumes or starts one arm)."]
    print("\n".join(lines))
    full = {a: r for a, r in res.items() if not r.get("partial")}
    out = {"lines": lines, "tests": tests, "results": res}
    if write_doc:  # results/writers-table.md and its figures: the study's judge's arms only
        if full:
            _figure_writers(full, FIGURES / "writers.png")
        _figure_training(FIGURES / "training.png")
        _put_writers_section(lines)
    return out


# The study's training runs with the 1.5B judge: (label, config, run directory). writers-table copies each run's step
# records into results/training/NAME-metrics.jsonl (runs/ is machine-local) and summarises them from there.
TRAINING_RUNS = (("warm start + EvoLM, first run: fresh answers cut at 64 tokens (stopped)",
                  "configs/learning/judge-1b5/evolm.yaml", "runs/learning/judge-1b5/evolm-cut64"),
                 ("warm start + EvoLM, second run: lost with its machine",
                  "configs/learning/judge-1b5/evolm.yaml", "runs/learning/judge-1b5/evolm-lost"),
                 ("warm start + EvoLM, third run (the judge in float32, on a 2-core EPYC): lost with its machine "
                  "past step 50, records kept to step 49; its step-50 writer is the halfway arm",
                  "configs/learning/judge-1b5/evolm.yaml", "runs/learning/judge-1b5/evolm-lost2"),
                 ("warm start + EvoLM (temporal contrast; the judge in float32, on a 2-core EPYC)", *EVOLM_RUN),
                 ("warm start + labelled-pair GRPO, first run: lost with its machine",
                  "configs/learning/judge-1b5/labelled.yaml", "runs/learning/judge-1b5/labelled-lost"),
                 ("warm start + labelled-pair GRPO, second run: lost with its machine",
                  "configs/learning/judge-1b5/labelled.yaml", "runs/learning/judge-1b5/labelled-lost2"),
                 ("warm start + labelled-pair GRPO, third run (the judge in float32, on a 2-core EPYC): lost with its "
                  "machine at its halfway, before its step-25 writer was judged",
                  "configs/learning/judge-1b5/labelled.yaml", "runs/learning/judge-1b5/labelled-lost3"),
                 ("warm start + labelled-pair GRPO (the judge in float32, on a 2-core EPYC)", *LABELLED_RUN))


# What the study trains from, and the arms its two training runs end in: (arm, config, run directory).
WARM_START = "runs/learning/judge-1b5/sft-writer"
STUDY_RUNS = (("warm-evolm", *EVOLM_RUN), ("warm-grpo", *LABELLED_RUN))
# One run at a time (--one-at-a-time), in this order: the labelled run first since 2026-12-04, because the EvoLM
# writer's halfway arm is in (no change from the warm start) and the labelled run, rubric steps only, reaches its own
# halfway in about a quarter of the EvoLM run's time: the matched comparison at 100 rubric-step questions, and
# whether this writer learns at all from pairs the judge agrees with.
ONE_AT_A_TIME = ("warm-grpo", "warm-evolm")
# A checkpoint kept on the way (the run keeps only its last few), as its own arm: (run directory, step, arm). EvoLM's
# step 50 (25 rubric steps) and the labelled run's step 25 (it has rubric steps only): 100 of their 200 rubric-step
# questions.
KEPT_CHECKPOINTS = ((EVOLM_RUN[1], 50, "warm-evolm-half"), (LABELLED_RUN[1], 25, "warm-grpo-half"))
KEPT_DIR = "kept"  # RUN/kept/checkpoint-N: where they are copied


def _finished(run_dir: Path, config: str) -> bool:
    """Whether ``run_dir`` has a complete checkpoint of its config's last step."""
    from evolm.config import load_config
    from evolm.runs.rundir import checkpoint_state, complete_checkpoints

    done = complete_checkpoints(run_dir) if run_dir.is_dir() else []
    return bool(done) and checkpoint_state(done[-1]).step >= load_config(str(ROOT / config)).total_steps


def keep_checkpoint(run_dir: Path, step: int) -> Path | None:
    """Copy ``run_dir``'s complete checkpoint of ``step`` to ``run_dir/kept/`` (once) before the run's rotation
    (``grpo.save_total_limit``) deletes it; the copy, or None while there is none."""
    from evolm.runs.rundir import complete_checkpoints

    kept = run_dir / KEPT_DIR / f"checkpoint-{step}"
    if not kept.is_dir():
        found = [c for c in complete_checkpoints(run_dir) if c.name == kept.name] if run_dir.is_dir() else []
        if not found:
            return None
        part = kept.with_name(kept.name + ".part")  # a copy cut short is never taken for a checkpoint
        shutil.rmtree(part, ignore_errors=True)
        shutil.copytree(found[0], part)
        part.rename(kept)
    return kept


def _resumable(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run to resume. A folder a run left before its first complete checkpoint (stopped
    in its first step) can neither be resumed nor started over (`evolm train` refuses both): it is moved aside, to
    ``RUN.no-checkpoint-N``, and the run starts from its config."""
    from evolm.runs.rundir import complete_checkpoints

    if not run_dir.is_dir():
        return False
    if complete_checkpoints(run_dir):
        return True
    _aside(run_dir, "starting afresh")
    return False


def _aside(run_dir: Path, then: str, why: str = "no complete checkpoint (stopped in its first step)") -> None:
    n = 1
    while (aside := run_dir.with_name(f"{run_dir.name}.no-checkpoint-{n}")).exists():
        n += 1
    run_dir.rename(aside)
    print(f"{run_dir}: {why}: moved to {aside}; {then}", file=sys.stderr, flush=True)


def _arm_call(arm: str, writer: Path | None, log: Path, env: dict[str, str] | None = None,
              pairs_name: str = "llmbar") -> None:
    """A held-out arm (``writer``: a trained writer's checkpoint, the warm start, or None for no rubric), decoded as
    the warm arm it is compared with (resumable; a finished arm is only read back)."""
    decoding = json.loads((WRITERS / "warm-key.json").read_text(encoding="utf-8"))["decoding"]
    how = [] if writer is None else ["--writer", writer.relative_to(ROOT), "--max-tokens", decoding["max_new_tokens"],
                                     "--max-criteria", decoding.get("max_criteria", 5)]
    pairs = ["--pairs", pairs_name] if pairs_name != "llmbar" else []
    _call([sys.executable, "-m", "studies.learning", "writers", arm, *how, *pairs], log, env=env)


def other_pair_arms() -> None:
    """The arms on the study's other pair sets of the writers this machine has: on the held-out UltraFeedback pairs
    (``uf_pairs``) no rubric, the warm start and each training run's final checkpoint; on each finished run's own
    rubric-step pairs (``train_pairs``) no rubric. A finished arm is left as it is; one whose run has not finished
    here is said in one line (its checkpoint and samples live in ``runs/``, on the machine that trained it)."""
    runs = {"warm-grpo": LABELLED_RUN, "warm-evolm": EVOLM_RUN}
    todo = [(arm, UF_DIR, runs.get(arm)) for arm in UF_ARMS] + [("none", name, run) for name, run in TRAIN_SETS.items()]
    for arm, pairs_name, run in todo:
        if (WRITERS / pairs_name / f"{arm}.json").exists():
            continue
        if run is not None and not _finished(ROOT / run[1], run[0]):
            print(f"{arm} on {pairs_name}: {run[1]} has not finished on this machine: not judged", flush=True)
            continue
        writer = (None if arm == "none" else ROOT / WARM_START if arm == "warm"
                  else final_checkpoint(ROOT / runs[arm][1]))
        _arm_call(arm, writer, ROOT / WARM_START.rsplit("/", 1)[0] / f"{arm}-{pairs_name}.log", pairs_name=pairs_name)


def _in_thread(errors: list[BaseException], fn: Callable[..., Any], *args: Any) -> threading.Thread:
    """``fn(*args)`` started in a thread whose failure is appended to ``errors`` (raised by ``_raise_any`` once the
    work beside it has ended, so one failed part does not cut the others short)."""

    def run() -> None:
        try:
            fn(*args)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - reported by _raise_any
            errors.append(e)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _raise_any(errors: list[BaseException]) -> None:
    if errors:
        raise SystemExit("; ".join(str(e) for e in errors))


def _study_chain(arm: str, config: str, run: str, poll_s: float = 30.0) -> None:
    """One training run of the study to its end (started, or resumed from its last checkpoint), then its writer's
    held-out arm from the final checkpoint. A checkpoint of ``KEPT_CHECKPOINTS`` is copied as soon as it is complete
    and its arm written and judged at once, at one thread beside the training (the halfway answer does not wait for
    the end); one the run had passed before is judged after it, if it was kept. Keeping the records and keeping a
    checkpoint are tried apart; one that fails (a full disk, say) is said in one line and tried again at the next
    poll: the watcher lives as long as the training."""
    run_dir = ROOT / run
    log = run_dir.parent / f"{run_dir.name}.log"
    keep = {step: kept_arm for r, step, kept_arm in KEPT_CHECKPOINTS  # the checkpoints whose arms are still to
            if r == run and not (WRITERS / f"{kept_arm}.json").exists()}  # judge (not those judged elsewhere)
    if not keep and (WRITERS / f"{arm}.json").exists():  # every arm judged: nothing to train
        return
    started: dict[int, threading.Thread] = {}
    errors: list[BaseException] = []

    def said(what: str, fn: Callable[..., Any], *args: Any) -> None:  # a failure (a full disk, say) in one line
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - the training goes on; the watcher tries again at its next poll
            print(f"{run}: {what} failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)

    def start_kept(step: int) -> None:
        if step not in started and (kept := keep_checkpoint(run_dir, step)) is not None:
            started[step] = _in_thread(errors, _arm_call, keep[step], kept, log.with_name(f"{keep[step]}.log"),
                                       {"OMP_NUM_THREADS": "1"})

    if not _finished(run_dir, config):
        stop = threading.Event()

        def watch() -> None:  # until training ends: the step records and each checkpoint to keep once complete
            while not stop.wait(poll_s):
                said(f"keeping the step records (again in {poll_s:g} s)", keep_records, run)
                for step in keep:
                    said(f"keeping checkpoint {step} (again in {poll_s:g} s)", start_kept, step)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            _call([*EVOLM, "train", *(["--resume", run] if _resumable(run_dir) else ["--config", config])], log)
        finally:
            stop.set()
            watcher.join()
            said("keeping the step records", keep_records, run)
    for step in keep:
        start_kept(step)
        if step not in started:
            print(f"{run}: checkpoint {step} was not kept (the run passed it elsewhere): no {keep[step]} arm",
                  file=sys.stderr)
    _arm_call(arm, final_checkpoint(run_dir), log.with_name(f"{arm}.log"))
    for t in started.values():
        t.join()
    _raise_any(errors)


def writers_study(one_at_a_time: bool = False) -> None:
    """The 1.5B study's remaining work in one resumable command: the warm start if this machine lacks it (rebuilt,
    then checked against the kept warm arm's rubrics), both training runs side by side (one thread each), each
    followed by its writer's held-out arm, then the arms on the other pair sets (``other_pair_arms``) and the
    tables. Run it again after an interruption; finished parts are skipped. ``one_at_a_time``: one run after the
    other (``ONE_AT_A_TIME`` says the order and why), each on all the cores (the same total time on 2 cores, and the
    first run's answers in a fraction of it)."""
    if not (ROOT / WARM_START).exists():
        _call([*EVOLM, "sft-rubrics", "--output", WARM_START, "--gsm8k", DATA / "gsm8k" / "train.jsonl",
               "--gsm8k-limit", 200, "--epochs", 2, "--train-layers", 12, "--detach-prefix"],
              ROOT / f"{WARM_START}.log")
        if writers_check("warm", WARM_START, 40):
            raise SystemExit(f"{WARM_START} does not write the kept warm arm's rubrics: the runs would not start from "
                             "the writer the warm arm measured")
    if one_at_a_time:
        runs = {arm: (arm, config, run) for arm, config, run in STUDY_RUNS}
        for arm in ONE_AT_A_TIME:
            _study_chain(*runs[arm])
        other_pair_arms()
        writers_table()
        return
    os.environ["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", "1")  # two runs share the cores
    errors: list[BaseException] = []
    for t in [_in_thread(errors, _study_chain, *spec) for spec in STUDY_RUNS]:
        t.join()
    _raise_any(errors)
    other_pair_arms()
    writers_table()


def _pair_votes(samples_dir: Path) -> list[dict[str, Any]]:
    """Per rubric-step pair of a run (``samples/phase-*-rubric.jsonl``: one row per sampled rubric, a step's rows of
    one question judging the same pair): how many of its rubrics made the judge score the pair's better answer (the
    fresh one of a temporal pair, the chosen one of a labelled pair) higher, and how many lower."""
    pairs: dict[tuple[int, int], dict[str, Any]] = {}
    for f in sorted(samples_dir.glob("phase-*-rubric.jsonl")):
        for r in _jsonl(f):
            if r.get("role") != "rubric" or r.get("s_pos") is None or r.get("s_neg") is None:
                continue
            d = pairs.setdefault((int(r["step"]), int(r["slot"])), {"step": int(r["step"]), "slot": int(r["slot"]),
                                                                    "source": r.get("pair_source"), "higher": 0,
                                                                    "lower": 0})
            d["higher"] += r["s_pos"] > r["s_neg"]
            d["lower"] += r["s_pos"] < r["s_neg"]
    return [pairs[k] for k in sorted(pairs)]


def _pairs_cell(votes: Sequence[dict[str, Any]]) -> str:
    """The judge's preference over a run's rubric-step pairs, one vote per pair (the majority of its rubrics): pairs
    where it preferred the better answer / the other, and an exact sign test (a pair's rubrics judge the same two
    answers, so the pair, not the judgement, is the unit)."""
    if not votes:
        return "—"
    up = sum(v["higher"] > v["lower"] for v in votes)
    down = sum(v["higher"] < v["lower"] for v in votes)
    _, _, p = stats.sign_test([1.0] * up + [0.0] * down, [0.5] * (up + down))
    return f"{up} / {down} of {len(votes)} (p {p:.2g})"


def keep_records(run: str, say: bool = False) -> list[dict[str, Any]]:
    """Copy run folder ``run``'s step records (and its rubric steps' pair votes) to ``results/training/`` when
    they are the kept copy's run (the same first step's record: a resumed run keeps it, a new one not) and at least as
    long; the kept steps. ``writers-study`` calls it as the run goes, so the records of a run lost with its machine
    are in the working tree up to its last step; ``say``: report a run folder that was not copied, and why."""
    kept_dir = FIGURES / "training"
    src, kept = ROOT / run / "metrics.jsonl", kept_dir / f"{Path(run).name}-metrics.jsonl"
    steps = _jsonl(kept)
    if not src.exists():
        return steps
    fresh = [r for r in _jsonl(src) if r.get("role") in ("policy", "rubric")]
    if steps and fresh and fresh[0] != steps[0]:
        if say:
            print(f"writers-table: {src} is another run than {kept} (their first steps differ): kept {kept}; rename "
                  "it and give it its own row in TRAINING_RUNS to keep both", file=sys.stderr)
        return steps
    if len(fresh) < len(steps):  # a stale run folder: the kept copy is further on
        if say:
            print(f"writers-table: {src} has {len(fresh)} steps, {kept} more: kept the longer", file=sys.stderr)
        return steps
    if fresh and fresh != steps:  # polled every 30 s by writers-study: written when a step was added
        _write(kept, "".join(json.dumps(r) + "\n" for r in fresh))
        logged = {int(r["step"]) for r in fresh}  # a step's samples are written before its record
        if votes := [v for v in _pair_votes(ROOT / run / "samples") if v["step"] in logged]:
            _write(kept_dir / f"{Path(run).name}-pairs.jsonl", "".join(json.dumps(v) + "\n" for v in votes))
    if fresh:  # the held-out evaluations' items and the fixed rubrics they were judged under (eval.questions)
        from evolm.training.heldout import EVAL_RUBRICS_FILE, HELDOUT_DIR

        for f in [*sorted((ROOT / run / HELDOUT_DIR).glob("step-*.jsonl")), ROOT / run / EVAL_RUBRICS_FILE]:
            dst = heldout_dir(run) / f.name
            if f.is_file() and (not dst.exists() or dst.read_bytes() != f.read_bytes()):
                _write(dst, f.read_text(encoding="utf-8"))
    return fresh


def heldout_dir(run: str) -> Path:
    """Where run ``run``'s held-out evaluation items are kept (``results/training/NAME-heldout/``)."""
    return FIGURES / "training" / f"{Path(run).name}-heldout"


def _heldout_policy_lines() -> list[str]:
    """Per training run with held-out evaluations kept: the policy's mean judge score on the held-out questions at
    each evaluation (under the fixed rubrics the initial writer wrote at step 0), and the change from step 0 to the
    last one, paired by question (bootstrap interval, sign test)."""
    lines = []
    for label, _config, run in TRAINING_RUNS:
        evals = {}
        for f in sorted(heldout_dir(run).glob("step-*.jsonl")):
            scores = {r["question"]: r["score"] for r in _jsonl(f) if r.get("kind") == "question"
                      and r.get("score") is not None}
            if scores:
                evals[int(f.stem.split("-")[-1])] = scores
        if not evals:
            continue
        cells = [f"step {step}: {fmt_ci(statistics.fmean(sc.values()), mean_ci(list(sc.values())))} (n = {len(sc)})"
                 for step, sc in sorted(evals.items())]
        first, last = min(evals), max(evals)
        change = ""
        qs = [q for q in evals[first] if q in evals[last]]
        if last != first and qs:
            a, b = [evals[last][q] for q in qs], [evals[first][q] for q in qs]
            diff = [x - y for x, y in zip(a, b, strict=True)]
            up, down, p = stats.sign_test(a, b)
            lo, hi = stats.bootstrap_mean(diff)
            change = (f"; step {first} → {last}: {statistics.fmean(diff):+.3f} [{lo:+.3f}, {hi:+.3f}], higher on "
                      f"{up} questions, lower on {down} (sign test p = {p:.2g}, n = {len(qs)})")
        lines.append(f"- {label}: {'; '.join(cells)}{change}.")
    if not lines:
        return []
    return ["", "The policy on held-out questions (`eval.questions`: UltraFeedback eval prompts, answered greedily, "
            "judged under the fixed rubrics the warm-started writer wrote for them at step 0; mean judge score, 95% "
            "interval):", "", *lines]


def _training_lines() -> list[str]:
    """A row per training run of the study: its steps so far, their length in rubric-step questions, wall time, and
    the rubric steps' reward spread (the std of the judge's reward across one question's sampled rubrics). A run
    folder's records replace the kept copy when they are the same run (the same first step's record) and longer."""
    from evolm.config import load_config

    kept_dir = FIGURES / "training"
    rows = []
    for label, config, run in TRAINING_RUNS:
        steps = keep_records(run, say=True)
        pairs_kept = kept_dir / f"{Path(run).name}-pairs.jsonl"
        if not steps:
            continue
        sched = load_config(str(ROOT / config)).schedule
        planned = sched.cycles * sched.steps_per_phase * sched.prompts_per_step
        rubric = [r for r in steps if r["role"] == "rubric"]
        policy = [r for r in steps if r["role"] == "policy"]
        ends = " → ".join(f"{r['reward_mean']:.3f}" for r in policy[:1] + policy[-1:]) or "—"
        spread = ", ".join(f"{r['reward_std']:.3f}" for r in rubric if r.get("reward_std") is not None) or "—"
        judged = [(r["pair_accuracy"], r.get("pair_judgements") or 0) for r in rubric
                  if r.get("pair_accuracy") is not None]
        n_judged = sum(n for _, n in judged)
        # over every judgement: each step weighted by its judgements (a plain mean where no step counted them)
        acc = (sum(a * n for a, n in judged) / n_judged if n_judged
               else statistics.fmean(a for a, _ in judged) if judged else None)
        rows.append(f"| {label} (`{config}`) | {len(policy)} + {len(rubric)} | "
                    f"{len(rubric) * sched.prompts_per_step} of {planned} | "
                    f"{sum(r.get('seconds') or 0 for r in steps) / 3600:.1f} h | "
                    f"{ends} | {spread} | "
                    f"{f'{acc:.3f} ({n_judged} judgements)' if acc is not None else '—'} | "
                    f"{_pairs_cell(_jsonl(pairs_kept))} |")
    if not rows:
        return []
    return ["", "| training run | steps so far (policy + rubric) | rubric-step questions (of planned) | wall time "
            "(2 shared cores) | policy reward, first → last step | rubric steps' reward spread (std across a "
            "question's rubrics), per step | judge's accuracy on the rubric steps' pairs | pairs where the judge "
            "preferred the newer (EvoLM) or human-chosen (labelled) answer under most of the pair's rubrics / the "
            "other (exact sign test) |",
            "|---|---|---|---|---|---|---|---|", *rows]


def _figure_writers(res: dict[str, dict[str, Any]], path: Path) -> None:
    """Held-out pair accuracy per arm with its 95% Wilson interval (a PNG)."""
    from matplotlib.figure import Figure

    probe = probe_file()
    fig = Figure(figsize=(11, 4.4) if probe.exists() else (8, 4.2))
    ax = fig.add_subplot(1, 2, 1) if probe.exists() else fig.add_subplot(1, 1, 1)
    if probe.exists():  # the probe: P(Yes) for the right vs the wrong answer under a criterion naming the value
        rows = json.loads(probe.read_text(encoding="utf-8"))["rows"]
        bx = fig.add_subplot(1, 2, 2)
        bx.scatter([r["wrong_rubric"] for r in rows], [r["right_rubric"] for r in rows], s=18,
                   label="criterion names the value")
        bx.scatter([r["wrong_none"] for r in rows], [r["right_none"] for r in rows], s=18, marker="x",
                   label="no rubric")
        lo = min(min(r[k] for k in ("right_rubric", "wrong_rubric", "right_none", "wrong_none")) for r in rows) - 0.02
        hi = max(max(r[k] for k in ("right_rubric", "wrong_rubric", "right_none", "wrong_none")) for r in rows) + 0.02
        bx.plot([lo, hi], [lo, hi], color="#cc4444", linewidth=0.8, linestyle=":")
        bx.set_xlabel("P(Yes), wrong answer", fontsize=8)
        bx.set_ylabel("P(Yes), right answer", fontsize=8)
        bx.set_title(f"Probe: {len(rows)} questions, right vs wrong one-line answer", fontsize=9)
        bx.legend(fontsize=7)
        bx.grid(alpha=0.3)
    for i, r in enumerate(res.values()):
        c = r["credits"]
        acc = sum(c) / len(c)
        lo, hi = wilson(sum(c), len(c))
        ax.errorbar([i], [acc], yerr=[[acc - lo], [hi - acc]], fmt="o", capsize=4, color="#1f77b4")
    ax.axhline(0.5, color="#cc4444", linewidth=0.8, linestyle=":")
    names = [r["label"].split(" (")[0].replace("warm start + ", "warm + ") for r in res.values()]
    ax.set_xticks(range(len(res)), names, fontsize=7, rotation=35, ha="right")
    ax.set_ylabel("held-out pair accuracy")
    ax.set_title(f"Frozen {Path(JUDGE).name} yesno judge ({JUDGE_DTYPE}), LLMBar held-out pairs "
                 f"(n={len(next(iter(res.values()))['credits'])})", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _figure_training(path: Path) -> bool:
    """The study's training runs from their kept step records (``results/training/``): the policy steps' reward,
    and per rubric step the judge's accuracy on the temporal (or labelled) pairs and the reward spread across a
    question's rubrics. False when no run has records."""
    from matplotlib.figure import Figure

    runs = [(label.split(" (")[0], _jsonl(FIGURES / "training" / f"{Path(run).name}-metrics.jsonl"))
            for label, _, run in TRAINING_RUNS]
    runs = [(label, steps) for label, steps in runs if steps]
    if not runs:
        return False
    fig = Figure(figsize=(13, 4.4))
    panels = (("policy", "reward_mean", "policy steps' reward (judge score, training questions)"),
              ("rubric", "pair_accuracy", "rubric steps: judge's accuracy on the step's pairs"),
              ("rubric", "reward_std", "rubric steps: reward spread across a question's rubrics"))
    for i, (role, key, title) in enumerate(panels):
        ax = fig.add_subplot(1, 3, i + 1)
        for label, steps in runs:
            ys = [r.get(key) for r in steps if r.get("role") == role]
            if any(y is not None for y in ys):
                ax.plot(range(1, len(ys) + 1), ys, marker=".", linewidth=1, label=label)
        if key == "pair_accuracy":
            ax.axhline(0.5, color="#cc4444", linewidth=0.8, linestyle=":")
        ax.set_xlabel(f"{role} step", fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3)
    handles = {}
    for ax in fig.axes:
        for h, label in zip(*ax.get_legend_handles_labels(), strict=True):
            handles.setdefault(label, h)
    fig.legend(list(handles.values()), list(handles), loc="lower center", ncol=min(3, len(handles)), fontsize=7)
    fig.tight_layout(rect=(0, 0.06 * ((len(handles) + 2) // 3), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return True


def _put_writers_section(lines: Sequence[str]) -> None:
    """Write the writers study's table into its own file in results/ (docs/RESULTS.md links it; no doc is rewritten)."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote the table into {RESULTS}")


# ============================================================================= results page


def _save(name: str, result: dict[str, Any]) -> None:
    (OUT / f"{name}.json").write_text(json.dumps(result, indent=1), encoding="utf-8")
    write_results()


def _load() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(OUT.glob("*.json"))}


def _section_a(r: dict[str, Any]) -> list[str]:
    out = ["## A. The rubric writer on labelled pairs", "",
           f"Training: `{r['command'].replace(f'{ROOT}/', '')}`; the trained writer is `{r['checkpoint']}` "
           f"({r.get('trained_steps', '?')} of {r.get('planned_steps', '?')} planned rubric steps). "
           f"Evaluation: `{r['eval_command']}` (SmolLM2-135M judge, `yesno` mode; one rubric per distinct prompt at "
           "T=0.6, constrained decoding, judged as the runs' held-out evaluation judges: `heldout.judge_heldout`; "
           "per-pair rows in `runs/study/A-items-*.jsonl`).", ""]
    for set_name, label in (("uf_eval", "UltraFeedback held-out pairs (eval_clean.jsonl, answers <= 1200 chars)"),
                            ("llmbar", "LLMBar Natural")):
        arms = r["sets"][set_name]
        out += [f"### {label}", "", "| writer | n | pair accuracy [95% CI] | rubric validity |", "|---|---|---|---|"]
        for arm, v in arms.items():
            c = v["credits"]
            acc = sum(c) / len(c)
            validity = "—" if v["validity"] is None else f"{v['validity']:.2f}"
            out.append(f"| {arm} | {len(c)} | {fmt_ci(acc, stats.bootstrap_mean(c))} | {validity} |")
        out.append("")
        out += ["| comparison | better / worse (pairs that differ) | sign test p | mean difference [95% CI] |",
                "|---|---|---|---|"]
        for a, b in (("trained writer", "base writer"), ("base writer", "no rubric"), ("trained writer", "no rubric")):
            ca, cb = arms[a]["credits"], arms[b]["credits"]
            up, down, p = stats.sign_test(ca, cb)
            diff = [x - y for x, y in zip(ca, cb, strict=True)]
            out.append(f"| {a} vs {b} | {up} / {down} | {p:.3f} | "
                       f"{fmt_ci(statistics.fmean(diff), stats.bootstrap_mean(diff))} |")
        out.append("")
    curve = [e for e in r["curve"] if e.get("heldout_pair_accuracy") is not None]
    if curve:
        out += ["Held-out pair accuracy during training (20 UltraFeedback eval pairs, the current writer's rubrics):",
                "", "| step | accuracy [95% CI] | n |", "|---|---|---|"]
        for e in curve:
            n = e.get("heldout_pairs") or 0
            acc = e["heldout_pair_accuracy"]
            out.append(f"| {e['step']} | {fmt_ci(acc, wilson(acc * n, n))} | {n} |")
        out.append("")
    steps = r.get("steps", [])
    if steps:
        first, last = steps[: max(1, len(steps) // 4)], steps[-max(1, len(steps) // 4):]
        out += ["Training rubric steps (first vs last quarter):", "",
                "| | reward mean | reward std | pair accuracy | rubric validity |", "|---|---|---|---|---|"]
        for label, part in (("first", first), ("last", last)):
            cells = [statistics.fmean([s[k] for s in part if s.get(k) is not None] or [math.nan])
                     for k in ("reward_mean", "reward_std", "pair_accuracy", "rubric_validity")]
            out.append(f"| {label} {len(part)} steps | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
        out.append("")
    return out


def _writer_curve(r: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The evaluations that measure ``key``'s model: a sequential run's writer is its stage 1 (stage 2 trains the
    policy under that frozen writer, so its pair accuracy measures a writer nobody uses)."""
    return [e for e in r["curve"] if e.get(key) is not None
            and not (key != "heldout_policy_score" and e.get("stage") == "stage2-policy")]


def _last_eval(r: dict[str, Any], key: str, n_key: str) -> tuple[float | None, int, dict | None]:
    lines = _writer_curve(r, key)
    return (lines[-1][key], lines[-1].get(n_key) or 0, lines[-1]) if lines else (None, 0, None)


def _first_eval(r: dict[str, Any], key: str, n_key: str) -> tuple[float | None, int]:
    lines = _writer_curve(r, key)
    return (lines[0][key], lines[0].get(n_key) or 0) if lines else (None, 0)


def _policy_ci(line: dict | None) -> tuple[float, float] | None:
    if not line or line.get("heldout_policy_score_std") is None or not line.get("heldout_questions"):
        return None
    m, s, n = line["heldout_policy_score"], line["heldout_policy_score_std"], line["heldout_questions"]
    h = 1.96 * s / math.sqrt(n)
    return (m - h, m + h)


def _section_bc(title: str, arms: dict[str, dict[str, Any]], figure: str) -> list[str]:
    _figure_bc(arms, FIGURES / figure)
    names = " ".join(f"runs/study/{n}" for n in arms)
    out = [title, "", f"![start and end of each arm, 95% intervals]({figure})", "",
           "Pair accuracy and validity measure the model in the rubric role at the start and after training (a "
           "sequential run: its stage-1 writer, the one its policy stage uses); the policy score, the final policy.",
           "",
           f"Every curve of these runs overlaid, with a table of final values: `evolm report {names} --output "
           f"comparison.html`.", "",
           "| arm | minutes | policy judge score, start → end [95% CI] | held-out pair accuracy start → end "
           "| rubric validity start → end |", "|---|---|---|---|---|"]
    for name, r in arms.items():
        cells = []
        for key, n_key, kind in (("heldout_policy_score", "heldout_questions", "mean"),
                                 ("heldout_pair_accuracy", "heldout_pairs", "prop"),
                                 ("heldout_validity", "heldout_questions", "prop")):
            v0, n0 = _first_eval(r, key, n_key)
            v1, n1, line = _last_eval(r, key, n_key)
            ci = _policy_ci(line) if kind == "mean" else (wilson(v1 * n1, n1) if v1 is not None else None)
            cells.append("—" if v1 is None else f"{v0:.3f} → {fmt_ci(v1, ci)} (n={n1})")
        out.append(f"| {name} | {r['minutes_training']} | " + " | ".join(cells) + " |")
    paired = {name: r.get("paired") for name, r in arms.items()}
    out += ["", "The same change item by item (first vs last held-out evaluation; `heldout/step-*.jsonl`): "
            "policy score end minus start per question (same fixed rubrics), pair credit end minus start per "
            "pair; exact sign test on the items that changed, paired bootstrap 95% CI of the mean difference:", "",
            "| arm | policy score change [95% CI] (n) | up / down, sign test p | pair credit change [95% CI] (n) "
            "| up / down, sign test p |", "|---|---|---|---|---|"]
    for name, pr in paired.items():
        cells = []
        for kind in ("question", "pair"):
            c = (pr or {}).get(kind)
            cells += (["—", "—"] if not c else
                      [f"{fmt_ci(c['mean_diff'], c['ci'])} ({c['n']})", f"{c['up']} / {c['down']}, p = {c['p']:.3f}"])
        note = "" if pr else " (items not kept: run before `heldout/` existed)"
        out.append(f"| {name}{note} | " + " | ".join(cells) + " |")
    out += ["", "Rubric statistics of the policy steps' rubrics, first vs last phase (`evolm eval stats`'s rules):", "",
            "| arm | phase | rubrics | criteria/rubric | label-only | specific value | criterion chars |",
            "|---|---|---|---|---|---|---|"]
    for name, r in arms.items():
        rows = [s for s in r.get("rubric_stats", []) if s.get("source") == "policy"] or r.get("rubric_stats", [])
        for s in (rows[:1] + rows[-1:]) if len(rows) > 1 else rows:
            st = s
            out.append(f"| {name} | {s.get('phase', '?')} | {st.get('n_rubrics')} | "
                       f"{_f(st.get('criteria_per_rubric'))} | {_f(st.get('label_only'))} | "
                       f"{_f(st.get('specific_value'))} | {_f(st.get('criterion_chars'), 0)} |")
    out.append("")
    out += ["Commands (from the repository root; `python -m studies.learning B|C` writes runs/study/data first):", ""]
    out += [f"- {name}: `{r['command'].replace(f'{ROOT}/', '')}`" for name, r in arms.items()] + [""]
    return out


def _figure_bc(arms: dict[str, dict[str, Any]], path: Path) -> None:
    """Start and end of each arm's held-out policy score and pair accuracy, with 95% intervals (a PNG)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.6))
    panels = (("heldout_policy_score", "heldout_questions", "held-out policy judge score (fixed rubrics)"),
              ("heldout_pair_accuracy", "heldout_pairs", "held-out judge pair accuracy (writer's rubrics)"))
    for i, (key, n_key, title) in enumerate(panels):
        ax = fig.add_subplot(1, 2, i + 1)
        for j, (_name, r) in enumerate(arms.items()):
            lines = _writer_curve(r, key)
            for k, (e, marker) in enumerate(((lines[0], "o"), (lines[-1], "s")) if lines else ()):
                v, n = e[key], e.get(n_key) or 0
                lo, hi = _policy_ci(e) if key == "heldout_policy_score" else wilson(v * n, n)
                ax.errorbar([j + (0.15 if k else -0.15)], [v], yerr=[[v - lo], [hi - v]], fmt=marker, capsize=3,
                            color="#888888" if k == 0 else "#1f77b4",
                            label=("start" if k == 0 else "end") if j == 0 else None)
        ax.set_xticks(range(len(arms)), [n.split("-", 1)[1] for n in arms], fontsize=8)
        ax.set_xlim(-0.6, len(arms) - 0.4)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        if key == "heldout_pair_accuracy":
            ax.axhline(0.5, color="#cc4444", linewidth=0.8, linestyle=":")
        ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _f(v: Any, digits: int = 2) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def demo_compare(runs: Sequence[str]) -> None:
    """Rubric steps of demo runs side by side: validity per rubric sample, reward spread, judge pair accuracy."""
    from evolm.runs.records import read_lenient, read_metrics

    rows = []
    for run in runs:
        d = Path(run)
        samples = [r for p in sorted((d / "samples").glob("*-rubric.jsonl")) for r in read_lenient(p).rows]
        valid = [float(r.get("rubric_valid") or 0) for r in samples]
        steps = [m for m in read_metrics(d) if m.role == "rubric"]
        stds = [m.reward_std for m in steps if m.reward_std is not None]
        wins = [1.0 if (r.get("s_pos") or 0) > (r.get("s_neg") or 0)
                else 0.5 if r.get("s_pos") == r.get("s_neg") else 0.0 for r in samples]
        rows.append({"run": d.name, "config": (d / "config.yaml").read_text(encoding="utf-8"), "n_samples": len(valid),
                     "validity": sum(valid) / max(1, len(valid)), "validity_ci": wilson(sum(valid), len(valid)),
                     "reward_std": stds, "pair_credit": sum(wins) / max(1, len(wins)),
                     "pair_credit_ci": stats.bootstrap_mean(wins), "steps": len(steps)})
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "demo-compare.json").write_text(json.dumps({"arm": "demo-compare", "rows": rows}, indent=1),
                                           encoding="utf-8")
    write_results()


def _section_demo(r: dict[str, Any]) -> list[str]:
    out = ["## Demo runs: rubric steps, unconstrained vs constrained rubric decoding", "",
           "`python -m studies.learning demo-compare RUN...` over `bash scripts/demo.sh` runs "
           "(rubric-step samples).", "",
           "| run | rubric steps | rubric samples | validity [95% CI] | reward std per step | "
           "pair credit (a+ over a-) [95% CI] |",
           "|---|---|---|---|---|---|"]
    for row in r["rows"]:
        stds = ", ".join(f"{x:.3f}" for x in row["reward_std"]) or "—"
        out.append(f"| {row['run']} | {row['steps']} | {row['n_samples']} | "
                   f"{fmt_ci(row['validity'], row['validity_ci'], 2)} | {stds} | "
                   f"{fmt_ci(row['pair_credit'], row['pair_credit_ci'], 2)} |")
    return out + [""]


def write_results() -> None:
    results = _load()
    lines = ["# Earlier studies: learning at the demo's scale (A, B, C)", "",
             "Generated by `python -m studies.learning results` from `runs/study/*.json` (each arm: "
             "`python -m studies.learning A|B|C`). SmolLM2-135M-Instruct in both roles, a frozen SmolLM2-135M judge "
             "(`yesno`), the demo's sizes (configs/demo-cpu.yaml) with constrained rubric decoding unless an arm says "
             "otherwise; 2 CPU cores, no GPU (A's earlier attempts and the demo comparison: an Intel Xeon; A's final "
             "run, B and C: an AMD EPYC; a judge of the initial model reads TRL's float32 reference copy). Intervals "
             "are 95%.", "",
             "**In short** (details and diagnosis at the end): at the demo's scale (135M model and judge, 8 steps) "
             "no arm changes a held-out number in a way a sign test tells from noise (p >= 0.12); the policy's "
             "held-out judge score rises by 0.005-0.015, the writer's held-out pair accuracy does not move, and the "
             "judge ranks most pairs the same whatever the rubric. Study A: the writer trained on labelled pairs does "
             "not beat the base writer on held-out pairs (UltraFeedback 2 better / 2 worse of 60, sign test p 1.00; "
             "LLMBar Natural 3 / 4, p 1.00). Study C: unconstrained, no rubric parses (validity 0.00) and rubric steps "
             "have almost no reward spread; constrained, every rubric parses, which is all it changes here.", ""]
    if "A" in results:
        lines += _section_a(results["A"])
    b = {k: v for k, v in results.items() if k.startswith("B-")}
    if b:
        lines += _section_bc("## B. Co-evolution vs frozen_rubric vs sequential", b, "B.png")
    c = {k: v for k, v in results.items() if k.startswith("C-") or k == "B-coevolve"}
    if any(k.startswith("C-") for k in c):
        lines += _section_bc("## C. Ablations (B-coevolve is the reference: margin_format, constrained)", c, "C.png")
    if "demo-compare" in results:
        lines += _section_demo(results["demo-compare"])
    notes = ROOT / "docs" / "results_notes.md"
    if notes.exists():
        lines += [notes.read_text(encoding="utf-8")]
    EARLIER.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {EARLIER}")


def main() -> None:
    global WRITERS, JUDGE, JUDGE_DTYPE
    p = argparse.ArgumentParser(prog="python -m studies.learning", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("study", choices=["A", "B", "C", "results", "demo-compare", "backfill", "writers", "writers-table",
                                          "writers-probe", "writers-check", "writers-study"])
    p.add_argument("runs", nargs="*", help="demo-compare: run directories of `bash scripts/demo.sh`; writers: the arm "
                   f"({', '.join(WRITER_ARMS)})")
    p.add_argument("--writer", help="writers: the writer's weights (base: default the base model; warm, warm-evolm, "
                   "warm-evolm2, warm-seq, warm-grpo: a checkpoint directory)")
    p.add_argument("--judge", help="writers, writers-table, writers-probe: another yesno judge (default: the study's, "
                   f"{_judge_id()['model']}; another judge's arms are kept apart in runs/study/writers/judge-NAME)")
    p.add_argument("--judge-dtype", choices=["float32", "bfloat16"], default=JUDGE_DTYPE, help="writers, "
                   f"writers-table, writers-probe: the judge's weights (default {JUDGE_DTYPE}, the study's; arms "
                   "judged with other weights are kept apart, in the arms' folder's DTYPE/ subfolder)")
    p.add_argument("--judge-mode", choices=["yesno", "prob"], default="yesno", help="writers-probe: the judge's "
                   "probability mode (default yesno, the study's; prob: the expected 0-9 digit)")
    p.add_argument("--limit", type=int, default=40, help="writers-check: the first N held-out prompts (default 40)")
    p.add_argument("--pairs", choices=PAIR_SETS, default="llmbar", help="writers: the pairs judged (default llmbar, "
                   "the study's 100 held-out LLMBar pairs; ultrafeedback: 99 UltraFeedback training pairs no run "
                   "trained on, the training distribution; labelled-train, evolm-train: a run's own rubric-step pairs, "
                   "in the order it met them, for no rubric); arms on other pairs are kept in the arms' folder's SET/")
    p.add_argument("--write-only", action="store_true", help="writers: write the arm's rubrics and stop (judged later)")
    p.add_argument("--max-tokens", type=int, default=480, help="writers: rubric token budget (default 480, what the "
                   "rubric grammar's 5 criteria fit)")
    p.add_argument("--max-criteria", type=int, choices=range(2, 6), default=5, help="writers: the most criteria the "
                   "rubric grammar allows (default 5; 3 with --max-tokens 320 is what the learning configs train with)")
    p.add_argument("--steps", type=int, default=12, help="study A: rubric steps of training (default 12)")
    p.add_argument("--lr", type=float, default=2e-5, help="study A: learning rate (default 2e-5)")
    p.add_argument("--no-train", action="store_true", help="study A: compare the writers with A-writer's last "
                   "complete checkpoint as it stands (a run stopped early)")
    p.add_argument("--baselines-only", action="store_true", help="study A: judge the held-out pairs with no rubric "
                   "and with the base writer's rubrics only (cached for the full comparison)")
    p.add_argument("--one-at-a-time", action="store_true", help="writers-study: one run to its end after the "
                   "other (the labelled one first), each on all the cores (default: side by side, one thread each)")
    p.add_argument("--arm", choices=sorted(ARMS), help="B or C: run this arm only (arms can run side by side, e.g. "
                   "two at a time with OMP_NUM_THREADS=1 each on a 2-core machine)")
    args = p.parse_args()
    study_judge = (not args.judge or args.judge == JUDGE) and args.judge_dtype == JUDGE_DTYPE
    if args.judge and args.judge != JUDGE and args.study in ("writers", "writers-table"):
        WRITERS, JUDGE = OUT / "writers" / f"judge-{Path(args.judge).name}", args.judge
    if args.judge_dtype != JUDGE_DTYPE:
        WRITERS, JUDGE_DTYPE = WRITERS / args.judge_dtype, args.judge_dtype
    if args.study == "writers":
        if len(args.runs) != 1 or args.runs[0] not in WRITER_ARMS:
            p.error(f"writers takes one arm: {', '.join(WRITER_ARMS)}")
        arm = args.runs[0]
        writer = None if arm in ("none", "hand") else args.writer or (MODEL if arm == "base" else None)
        if (arm.startswith("warm") or arm == "strong") and not writer:
            p.error(f"writers {arm} needs --writer CHECKPOINT")
        if arm == "hand" and args.pairs != "llmbar":
            p.error(f"writers hand: the hand-written rubrics are for the LLMBar pairs only, not --pairs {args.pairs}")
        writer_arm(arm, writer, args.max_tokens, args.write_only, args.max_criteria, args.pairs)
    elif args.study == "writers-check":
        if len(args.runs) != 1 or not args.writer:
            p.error("writers-check takes one arm and --writer DIR (e.g. writers-check warm --writer DIR)")
        sys.exit(1 if writers_check(args.runs[0], args.writer, args.limit) else 0)
    elif args.study == "writers-study":
        writers_study(args.one_at_a_time)
    elif args.study == "writers-probe":
        writers_probe(args.judge or JUDGE, args.judge_mode)
    elif args.study == "writers-table":
        writers_table(write_doc=study_judge)  # results/writers-table.md holds the study's judge's table
    elif args.study == "results":
        write_results()
    elif args.study == "demo-compare":
        demo_compare(args.runs)
    elif args.study == "backfill":  # per-question policy scores of arms run before heldout/ items were kept
        for name in args.runs:
            backfill_policy(name)
    elif args.study == "A":
        study_a(args)
    else:
        if args.arm and not args.arm.startswith(args.study):
            p.error(f"--arm {args.arm} is not an arm of study {args.study}")
        study_bc(args.study, args.arm)
