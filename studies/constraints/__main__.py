"""EvoLM where the better answer is known: the study's steps, each writing into studies/constraints/results/.

  survey      sample the policy's answers to the survey prompts (every family, one constraint each) and check them:
              the base pass rate per family, and natural pairs (a compliant and a non-compliant answer to one prompt)
  visibility  what the frozen judge can see per family: its pair accuracy with the constraint stated as the only
              criterion, against no rubric, on the survey's natural pairs
  answers     sample answers to the held-out prompts from a model (run it for each model at hand) and check them
  pairs       the held-out pairs: per held-out prompt, a compliant and a non-compliant answer (natural pairs)
  arm         judge the held-out pairs under one writer's rubrics (none, stated, or a model/adapter that writes them)
  table       the held-out table from the kept arm files: accuracy per arm, Wilson intervals, sign tests
  train-pairs run (c)'s labelled pairs: per training question whose answers in a run's policy steps differ in the
              constraints they follow, the answer following the most (chosen) and the one following the fewest
  warmstart   the writer's warm-start seed set: each training prompt with a rubric that states its constraints as
              criteria (trained families only), for `evolm sft-rubrics --seed-set ... --lora-r 16 --keep-adapter`
  keep        copy a writer's LoRA adapter into results/adapters/NAME in bfloat16 (the adapter and its config alone,
              its base named by the built-in name): what a fresh clone loads with `evolm rubric --model`
  progress    a training run's course per step: constraints followed, newer answer better, rubrics naming them
  watch       a training run's precondition (is the newer answer better?); with --stop, end the run when it fails

Build the prompt sets first: `python scripts/build_constraint_prompts.py` (after `python scripts/fetch_data.py`).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from evolm.errors import EvolmError
from evolm.eval.constraints import precondition, stated_rubric
from evolm.runs.jsonl import append_jsonl, read_jsonl, write_jsonl
from evolm.runs.machine import load_average, machine
from evolm.runs.rundir import LOCK_FILE
from evolm.stats import sign_p
from evolm.stats import wilson as wilson_share

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
LOAD_AT_START = load_average()  # before the study's own work: a result's machine says whether another job shared it
POLICY = "smollm2-135m-instruct"
JUDGE = "qwen2.5-coder-1.5b-instruct"  # the study's one judge: yesno, float32, evolm's default defences
JUDGE_MODE, JUDGE_DTYPE = "yesno", "float32"  # float32: a score does not depend on its batch


def wilson(k: float, n: int) -> tuple[float, float]:
    """Wilson 95% interval of k successes in n (a tie's half credit counts 1/2)."""
    return wilson_share(k / n, n) or (float("nan"), float("nan")) if n else (float("nan"), float("nan"))


def stamp() -> dict[str, Any]:
    """When, where, and with which evolm: the judge's defences are code, so a result names the commit it ran (the
    checkout that ``evolm`` was imported from, which may be a worktree pinned at a run's commit)."""
    import subprocess

    import evolm

    where = Path(evolm.__file__).parent
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=where, capture_output=True, text=True).stdout
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "machine": machine(LOAD_AT_START),
            "evolm_commit": commit.strip() or "unknown"}


def judge_code() -> str:
    """sha256 of the judge's code (src/evolm/judge/*.py, prompts and defences, with backends/base.py's neutralising of
    control text and rubrics.py's rendering): an arm's key holds it, and the table
    refuses arms judged by different code, so that a later change to the defences cannot silently change the
    study's judge (run the study's steps from a checkout of the run's commit instead)."""
    import hashlib

    import evolm.judge

    src = Path(evolm.judge.__file__).parents[1]
    h = hashlib.sha256()
    for f in [*sorted((src / "judge").glob("*.py")), src / "backends" / "base.py", src / "rubrics.py"]:
        h.update(f.relative_to(src).as_posix().encode() + b"\0" + f.read_bytes())  # with the text it neutralises
    return h.hexdigest()[:16]


def short(family: str) -> str:
    return family.split(":", 1)[1]


# ============================================================================= survey: base pass rates


def survey(args: argparse.Namespace, out_name: str | None = None) -> None:
    from evolm.backends.base import SamplingParams
    from evolm.backends.loading import load_backend
    from evolm.config import RunConfig
    from evolm.eval.constraints import check
    from evolm.training.contrast import policy_messages

    rows = read_jsonl(args.prompts, required=["prompt", "constraints", "families"])
    by_family: dict[str, list[dict]] = collections.defaultdict(list)
    for r in rows:
        if len(by_family[r["families"][0]]) < args.per_family:
            by_family[r["families"][0]].append(r)
    chosen = [r for f in by_family for r in by_family[f] if not args.families or f in args.families.split(",")]
    system = RunConfig().model.system_prompt
    name = out_name or f"survey-{args.model.replace('/', '_')}"
    partial = RESULTS / f"{name}.partial.jsonl"  # the answers so far: an interrupted survey goes on from them
    done = {(r["prompt"], r["sample"]): r for r in (read_jsonl(partial) if partial.is_file() else [])}
    todo = [(r, s) for r in chosen for s in range(args.samples) if (r["prompt"], s) not in done]
    t0 = time.time()
    if todo:
        backend = load_backend(args.model, dtype="float32", batch_size=args.batch_size)
        params = SamplingParams(args.temperature, 0.95, args.max_new_tokens, args.seed)
        chunk = 4 * args.batch_size
        for i in range(0, len(todo), chunk):
            part = todo[i:i + chunk]
            answers = backend.generate([policy_messages(r["prompt"], system) for r, _ in part], params,
                                       progress=True)
            rows = [{"prompt": r["prompt"], "question": r["question"], "constraints": r["constraints"],
                     "family": r["families"][0], "sample": s, "model": args.model, "answer": a,
                     "passed": check(a, r["question"], r["constraints"])} for (r, s), a in zip(part, answers)]
            append_jsonl(partial, rows)
            done.update(((r["prompt"], r["sample"]), r) for r in rows)
            print(f"{len(done)} of {len(chosen) * args.samples} answers kept in {partial}", flush=True)
    seconds = time.time() - t0
    out = [done[(r["prompt"], s)] for r in chosen for s in range(args.samples)]
    write_jsonl(RESULTS / f"{name}.jsonl", out)
    partial.unlink(missing_ok=True)
    table = survey_table(out)
    (RESULTS / f"{name}.json").write_text(json.dumps(
        {"model": args.model, "samples": args.samples, "temperature": args.temperature,
         "max_new_tokens": args.max_new_tokens, "seconds": round(seconds, 1), **stamp(), "families": table},
        indent=1) + "\n")
    print_survey(table, args.model)


def survey_table(rows: list[dict]) -> dict[str, dict[str, Any]]:
    per: dict[str, list[dict]] = collections.defaultdict(list)
    for r in rows:
        per[r["family"]].append(r)
    out = {}
    for f, rs in per.items():
        k = sum(r["passed"][0] for r in rs)
        prompts = collections.defaultdict(list)
        for r in rs:
            prompts[r["prompt"]].append(r["passed"][0])
        mixed = sum(1 for v in prompts.values() if any(v) and not all(v))
        out[f] = {"answers": len(rs), "passed": k, "pass_rate": k / len(rs), "ci": wilson(k, len(rs)),
                  "prompts": len(prompts), "mixed_prompts": mixed}
    return out


def print_survey(table: dict[str, dict[str, Any]], model: str) -> None:
    print(f"\nbase pass rate per family ({model}):")
    print(f"{'family':32} {'answers':>7} {'pass rate':>10} {'95% CI':>15} {'prompts mixed':>14}")
    for f, t in sorted(table.items(), key=lambda kv: -kv[1]["pass_rate"]):
        lo, hi = t["ci"]
        print(f"{short(f):32} {t['answers']:>7} {t['pass_rate']:>10.3f} {f'[{lo:.2f}, {hi:.2f}]':>15} "
              f"{t['mixed_prompts']:>7} / {t['prompts']}")


# ============================================================================= visibility: what the judge sees


def natural_pairs(rows: list[dict], per_family: int) -> list[dict]:
    """Per prompt with a compliant and a non-compliant answer, one pair: both from one model where some model gave
    both (the first such model), so that the pair differs in the constraint more than in the model's quality."""
    by_prompt: dict[str, list[dict]] = collections.defaultdict(list)
    for r in rows:
        by_prompt[r["prompt"]].append(r)
    pairs, count = [], collections.Counter()
    for prompt, rs in by_prompt.items():
        good = [r for r in rs if all(r["passed"])]
        bad = [r for r in rs if not any(r["passed"])]
        f = rs[0]["family"]
        if not (good and bad) or count[f] >= per_family:
            continue
        g, b = next(((g, b) for m in dict.fromkeys(r["model"] for r in rs)
                     for g in good if g["model"] == m for b in bad if b["model"] == m), (good[0], bad[0]))
        count[f] += 1
        pairs.append({"prompt": prompt, "question": rs[0]["question"], "constraints": rs[0]["constraints"],
                      "family": f, "chosen": g["answer"], "rejected": b["answer"],
                      "chosen_model": g["model"], "rejected_model": b["model"]})
    return pairs


EDITS = {  # per family, the smallest change that breaks the constraint and keeps the rest of the answer
    "detectable_content:postscript": lambda a: re.split(r"\s*P\.S\.", a, maxsplit=1)[0],
    "detectable_format:title": lambda a: re.sub(r"<<([^\n]*?)>>", r"\1", a),
    "detectable_format:number_bullet_lists": lambda a: re.sub(r"(?m)^(\s*)[*-]\s+", r"\1", a),
    "detectable_format:number_highlighted_sections": lambda a: re.sub(r"\*([^\n*]+)\*", r"\1", a),
    "detectable_content:number_placeholders": lambda a: re.sub(r"\[([^\]]*)\]", r"\1", a),
    "startend:end_checker": lambda a: a.rstrip()[: a.rstrip().rfind(" ")] if " " in a.strip() else "",
    "detectable_format:json_format": lambda a: a.strip().strip("`").replace("{", "").replace("}", ""),
}


COMPLY = {  # per family the policy seldom meets, the smallest change that makes a non-compliant answer comply
    "startend:quotation": lambda a, kw: f'"{a.strip()}"',
    "change_case:english_capital": lambda a, kw: a.upper(),
    "startend:end_checker": lambda a, kw: f"{a.rstrip()} {kw['end_phrase']}",
    "detectable_format:json_format": lambda a, kw: json.dumps({"answer": a.strip()}, ensure_ascii=False),
}


def edited_pairs(rows: list[dict], per_family: int) -> list[dict]:
    """Per compliant answer, the same answer edited only to break its constraint (kept where the checker agrees
    that the edit breaks it): the judge's view of the constraint alone, the content held fixed."""
    from evolm.eval.constraints import check

    pairs, count = [], collections.Counter()
    for r in rows:
        f = r["family"]
        if f in COMPLY and not any(r["passed"]) and count[f] < per_family:  # the compliant answer is the edited one
            fixed = COMPLY[f](r["answer"], r["constraints"][0].get("kwargs") or {})
            if all(check(fixed, r["question"], r["constraints"])):
                count[f] += 1
                pairs.append({"prompt": r["prompt"], "question": r["question"], "constraints": r["constraints"],
                              "family": f, "chosen": fixed, "rejected": r["answer"], "kind": "edited",
                              "chosen_model": r["model"] + " (edited)", "rejected_model": r["model"]})
            continue
        if not all(r["passed"]) or f not in EDITS or count[f] >= per_family:
            continue
        broken = EDITS[f](r["answer"]).strip()
        if broken and broken != r["answer"].strip() and not any(check(broken, r["question"], r["constraints"])):
            count[f] += 1
            pairs.append({"prompt": r["prompt"], "question": r["question"], "constraints": r["constraints"],
                          "family": f, "chosen": r["answer"], "rejected": broken, "kind": "edited",
                          "chosen_model": r["model"], "rejected_model": r["model"] + " (edited)"})
    return pairs


def load_judge(model: str = JUDGE, mode: str = JUDGE_MODE) -> Any:
    from evolm.backends.loading import load_backend
    from evolm.judge.judge import Judge

    return Judge(load_backend(model, dtype=JUDGE_DTYPE, batch_size=8), mode=mode)


def credit(s_pos: float | None, s_neg: float | None) -> float:
    if s_pos is None or s_neg is None:
        return 0.5
    return 1.0 if s_pos > s_neg else 0.5 if s_pos == s_neg else 0.0


def visibility(args: argparse.Namespace) -> None:
    from evolm.judge.judge import JudgeItem

    rows = [r for f in args.survey for r in read_jsonl(f)]
    pairs = [{**p, "kind": "natural"} for p in natural_pairs(rows, args.pairs)]
    pairs += edited_pairs(rows, max(0, args.pairs))
    if args.families:
        pairs = [p for p in pairs if p["family"] in args.families.split(",")]
    judge = load_judge(args.judge, args.mode)
    items = []
    for p in pairs:
        rubric = stated_rubric(p["constraints"])
        for answer in (p["chosen"], p["rejected"]):
            items.append(JudgeItem(p["prompt"], answer))
            items.append(JudgeItem(p["prompt"], answer, rubric=rubric))
    t0 = time.time()
    scores = [j.score for j in judge.score(items, progress=True)]
    seconds = time.time() - t0
    out = []
    for i, p in enumerate(pairs):
        none_pos, stated_pos, none_neg, stated_neg = scores[4 * i:4 * i + 4]
        out.append({**p, "none": [none_pos, none_neg], "stated": [stated_pos, stated_neg],
                    "credit_none": credit(none_pos, none_neg), "credit_stated": credit(stated_pos, stated_neg)})
    name = args.judge.replace("/", "_") + (f"-{args.mode}" if args.mode != JUDGE_MODE else "") + \
        (f"-{args.tag}" if args.tag else "")
    write_jsonl(RESULTS / f"visibility-{name}.jsonl", out)
    table = visibility_table(out)
    (RESULTS / f"visibility-{name}.json").write_text(json.dumps(
        {"judge": args.judge, "mode": args.mode, "dtype": JUDGE_DTYPE, "seconds": round(seconds, 1), **stamp(),
         "families": table}, indent=1) + "\n")
    print_visibility(table, f"{args.judge}, {args.mode}")


def visibility_table(rows: list[dict]) -> dict[str, dict[str, Any]]:
    per: dict[str, list[dict]] = collections.defaultdict(list)
    for r in rows:
        per[r["family"]].append(r)
        per[f"{r['family']} ({r.get('kind', 'natural')})"].append(r)
    per["all"] = rows
    out = {}
    for f, rs in per.items():
        n = len(rs)
        none, stated = sum(r["credit_none"] for r in rs), sum(r["credit_stated"] for r in rs)
        up = sum(r["credit_stated"] > r["credit_none"] for r in rs)
        down = sum(r["credit_stated"] < r["credit_none"] for r in rs)
        p = sign_p(up, down)
        out[f] = {"pairs": n, "none": none / n, "stated": stated / n, "lift": (stated - none) / n,
                  "stated_ci": wilson(stated, n), "better": up, "worse": down, "sign_p": p}
    return out


def print_visibility(table: dict[str, dict[str, Any]], judge: str) -> None:
    print(f"\nthe judge's pair accuracy per family ({judge}, {JUDGE_DTYPE}): constraint stated vs none")
    print(f"{'family (pairs)':44} {'pairs':>5} {'none':>6} {'stated':>7} {'lift':>6} {'better/worse':>13} "
          f"{'sign p':>7}")
    for f, t in sorted(table.items(), key=lambda kv: (kv[0] == "all", kv[0])):
        print(f"{short(f) if f != 'all' else 'all':44} {t['pairs']:>5} {t['none']:>6.3f} {t['stated']:>7.3f} "
              f"{t['lift']:>+6.3f} {t['better']:>6} / {t['worse']:<4} {t['sign_p']:>7.3f}")


# ============================================================================= the held-out set


def answers(args: argparse.Namespace) -> None:
    """Held-out answers from one model, checked (natural pairs need a model that sometimes complies); with
    ``--policy NAME``, a trained policy's answers for the policy table (results/policies/NAME.jsonl), kept apart from
    the answers that ``pairs`` reads."""
    args.prompts, args.families, args.per_family = args.heldout, "", 10**9
    if args.policy:  # a trained policy's pass rate, not a source of held-out pairs
        (RESULTS / "policies").mkdir(exist_ok=True)
        survey(args, out_name=f"policies/{args.policy}")
    else:
        survey(args, out_name=f"heldout-answers-{args.model.replace('/', '_')}")


def pairs(args: argparse.Namespace) -> None:
    rows = [r for f in args.answers for r in read_jsonl(f)]
    split = {r["prompt"]: r["split"] for r in read_jsonl(args.heldout)}
    out = [{**p, "split": split.get(p["prompt"], "?")} for p in natural_pairs(rows, 10**9)]
    write_jsonl(RESULTS / "heldout-pairs.jsonl", out)
    counts = collections.Counter((p["split"], short(p["family"])) for p in out)
    print(f"{len(out)} held-out pairs: " + ", ".join(f"{f} ({s}) {n}" for (s, f), n in sorted(counts.items())))


def arm(args: argparse.Namespace) -> None:
    """The held-out pairs judged under one writer's rubrics: ``none``, ``stated`` (the ceiling) or a model."""
    from evolm.judge.judge import JudgeItem
    from evolm.rubrics import render_rubric

    ps = read_jsonl(RESULTS / "heldout-pairs.jsonl")
    written: dict[str, Any] = {}
    if args.writer not in ("none", "stated"):
        from evolm.backends.base import SamplingParams
        from evolm.backends.constrained import rubric_schema
        from evolm.backends.loading import load_backend
        from evolm.rubrics import write_rubrics

        backend = load_backend(args.writer, dtype="float32", batch_size=16)
        qs = list(dict.fromkeys(p["prompt"] for p in ps))
        params = SamplingParams(0.6, 0.95, 320, args.seed, json_schema=rubric_schema(3))
        written = dict(zip(qs, write_rubrics(backend, qs, params, progress=True), strict=True))
        del backend
    judge, items = load_judge(args.judge), []
    for p in ps:
        rubric = stated_rubric(p["constraints"]) if args.writer == "stated" else \
            written[p["prompt"]].rubric if p["prompt"] in written else None
        items += [JudgeItem(p["prompt"], a, rubric=rubric) for a in (p["chosen"], p["rejected"])]
    scores = [j.score for j in judge.score(items, progress=True)]
    out = []
    for i, p in enumerate(ps):
        w = written.get(p["prompt"])
        text = render_rubric(w.rubric) if w is not None and w.rubric else None
        out.append({"prompt": p["prompt"], "family": p["family"], "split": p["split"], "s_pos": scores[2 * i],
                    "s_neg": scores[2 * i + 1], "credit": credit(scores[2 * i], scores[2 * i + 1]), "rubric": text,
                    "names_constraint": names_constraint(text, p["constraints"]) if text else None})
    key = {"writer": args.writer, "judge": args.judge, "mode": JUDGE_MODE, "dtype": JUDGE_DTYPE,
           "defences": "evolm default", "judge_code": judge_code(), **stamp()}
    write_jsonl(RESULTS / "arms" / f"{args.name}.jsonl", [{"key": key}, *out])
    n, k = len(out), sum(r["credit"] for r in out)
    print(f"{args.name}: pair accuracy {k / n:.3f} (n = {n})")


def train_pairs(args: argparse.Namespace) -> None:
    """Run (c)'s labelled pairs (``contrast.pairs: labelled``): from the policy steps' sample files of the runs given,
    per (step, question) group whose answers follow different numbers of constraints, the first answer following the
    most as ``chosen`` and the first following the fewest as ``rejected``. Training questions only: the held-out set
    stays unseen by every writer."""
    out = []
    for run in args.runs:
        groups: dict[tuple[int, str], list[dict]] = collections.defaultdict(list)
        for f in sorted((run / "samples").glob("*-policy.jsonl")):
            for r in read_jsonl(f):
                groups[r["step"], r["question"]].append(r)
        for (step, question), rs in groups.items():
            hi = max(rs, key=lambda r: r["constraints_passed"])
            lo = min(rs, key=lambda r: r["constraints_passed"])
            if hi["constraints_passed"] > lo["constraints_passed"]:
                out.append({"prompt": question, "chosen": hi["completion"], "rejected": lo["completion"],
                            "constraints": rs[0]["constraints"], "source": f"{run.name} step {step}"})
    if not out:
        raise EvolmError(f"no question's answers differ in the constraints followed in {[str(r) for r in args.runs]}")
    write_jsonl(args.out, out)
    print(f"wrote {len(out)} labelled pairs ({len({p['prompt'] for p in out})} questions) to {args.out}")


STATED = {  # a trained family's constraint as a criterion the constrained writer can write (80 characters at most)
    "detectable_format:title": "Has a title wrapped in double angular brackets, like <<title>>.",
    "detectable_content:postscript": "Ends with a postscript that starts with P.S.",
}
LEVELS_STATED = {"1.0": "Done as asked.", "0.5": "Done, wrong form.", "0.0": "Missing."}
LEVELS_CONTENT = {"1.0": "Correct and complete.", "0.5": "Partly right.", "0.0": "Wrong or missing."}


def warmstart(args: argparse.Namespace) -> None:
    """A seed row per training prompt: its constraints as criteria (STATED), beside one content criterion: the GSM8K
    reference's final answer where the question is GSM8K's, else a plain one. Trained families only: the held-out
    families stay unseen by every writer, so that the table's held-out rows measure transfer."""
    import random

    from evolm.rubrics import format_validity
    from evolm.training.sft import gsm8k_rubric

    gsm = {str(r["question"]).strip(): str(r["answer"]) for r in read_jsonl(args.gsm8k)}
    rng, rows = random.Random(args.seed), []
    for r in read_jsonl(args.prompts):
        if any(c["id"] not in STATED for c in r["constraints"]):
            raise EvolmError(f"{args.prompts}: no stated criterion for {r['constraints']} (STATED)")
        reference = gsm8k_rubric(gsm[r["question"].strip()]) if r["question"].strip() in gsm else None
        content = reference["criteria"][0]["criterion"] if reference else \
            "Answers the question asked, correctly and completely."  # the first: "Gives the final answer X."
        share = 0.5 / len(r["constraints"])
        criteria = [{"criterion": STATED[c["id"]], "weight": share, "scoring_levels": LEVELS_STATED}
                    for c in r["constraints"]]
        criteria.insert(rng.randrange(len(criteria) + 1),
                        {"criterion": content, "weight": 0.5, "scoring_levels": LEVELS_CONTENT})
        rubric = {"criteria": criteria}
        if format_validity(json.dumps(rubric)) < 1:
            raise EvolmError(f"a warm-start rubric is not format-valid: {rubric}")
        rows.append({"prompt": r["prompt"], "rubric": rubric, "source": "constraints-stated"})
    write_jsonl(args.out, rows)
    print(f"{len(rows)} seed rows ({sum('final answer' in json.dumps(x) for x in rows)} with a GSM8K final answer) "
          f"-> {args.out}")


ADAPTERS = RESULTS / "adapters"
MAX_ADAPTER_MB = 20.0  # the repository keeps a study's adapters, never a checkpoint or a run carry


def keep(args: argparse.Namespace) -> None:
    """A LoRA adapter (a checkpoint or a warm start) as ``results/adapters/NAME``: ``adapter_config.json`` and the
    adapter's tensors in bfloat16; nothing else of the checkpoint (optimizer, buffer, tokenizer: the base's is used)."""
    import torch
    from safetensors.torch import load_file, save_file

    from evolm.backends.builtin import BUILTIN_MODELS
    from evolm.backends.loading import ADAPTER_CONFIG

    src, out = args.adapter, ADAPTERS / args.name
    config = json.loads((src / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    if config.get("base_model_name_or_path") not in BUILTIN_MODELS:
        raise EvolmError(f"{src}: its base is {config.get('base_model_name_or_path')!r}, not a built-in name: "
                         "it would not load on another machine")
    tensors = {k: v.to(torch.bfloat16).contiguous() for k, v in load_file(src / "adapter_model.safetensors").items()}
    out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, out / "adapter_model.safetensors", metadata={"format": "pt"})
    (out / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    mb = (out / "adapter_model.safetensors").stat().st_size / 2**20
    if mb > MAX_ADAPTER_MB:
        raise EvolmError(f"{out}: {mb:.1f} MB, over the {MAX_ADAPTER_MB:g} MB an adapter may take in the repository")
    print(f"{out}: {len(tensors)} tensors, {mb:.1f} MB (bfloat16), base {config['base_model_name_or_path']}")


def names_constraint(rubric_text: str, constraints: list[dict]) -> bool:
    """Whether some criterion names each of the prompt's constraints (``evolm.eval.rubric_naming.names``)."""
    from evolm.eval.rubric_naming import names

    return all(names(rubric_text, c) for c in constraints)


def paired(rows: list[dict], other: list[dict] | None) -> str:
    """Paired sign test of an arm against another on the same pairs: better / worse, p (ties dropped)."""
    if other is None:
        return "-"
    base = {r["prompt"]: r["credit"] for r in other}
    up = sum(r["credit"] > base.get(r["prompt"], r["credit"]) for r in rows)
    down = sum(r["credit"] < base.get(r["prompt"], r["credit"]) for r in rows)
    return f"{up} / {down}, p = {sign_p(up, down):.3f}" if up + down else "0 / 0"


def margin_test(rows: list[dict], other: list[dict] | None) -> str:
    """Wilcoxon signed-rank test of an arm's paired margin (s+ minus s-) against another's on the same pairs: the
    median margin difference, the matched-pairs rank-biserial correlation r (-1 to 1: the share of rank weight for the
    arm minus against it) and p; pairs whose margins are equal are dropped (scipy's "wilcox" zero method)."""
    if other is None:
        return "-"
    from scipy.stats import rankdata, wilcoxon

    theirs = {r["prompt"]: r["s_pos"] - r["s_neg"] for r in other}
    d = [r["s_pos"] - r["s_neg"] - theirs[r["prompt"]] for r in rows if r["prompt"] in theirs]
    d = [x for x in d if abs(x) > 1e-12]
    if len(d) < 2:
        return f"n = {len(d)}"
    ranks = rankdata([abs(x) for x in d])
    r = sum(k if x > 0 else -k for k, x in zip(ranks, d, strict=True)) / sum(ranks)
    return f"{statistics.median(d):+.3f}, r = {r:+.2f}, p = {wilcoxon(d).pvalue:.3f} (n = {len(d)})"


ORDER = ("none", "stated", "base", "warm-start")  # first: no rubric, the ceiling, the base writer, the warm start


def table(args: argparse.Namespace) -> None:
    """The held-out table: per arm, the trained families, the held-out families, each family, and all pairs."""
    files = {f.stem: read_jsonl(f) for f in sorted((RESULTS / "arms").glob("*.jsonl"))}
    if not files:
        raise SystemExit("no arm files yet: run `python -m studies.constraints arm ...` first")
    judges = {name: tuple(rows[0]["key"].get(k) for k in ("judge", "mode", "dtype", "judge_code"))
              for name, rows in files.items()}
    if len(set(judges.values())) > 1:
        raise SystemExit("the arms were judged by different judges (model, mode, dtype, judge code): "
                         + "; ".join(f"{n}: {j}" for n, j in judges.items()) + " - re-judge them with one")
    arms = {name: rows[1:] for name, rows in files.items()}
    asked = {p["prompt"]: p["constraints"] for p in read_jsonl(RESULTS / "heldout-pairs.jsonl")}
    names = [n for n in ORDER if n in arms] + [n for n in arms if n not in ORDER]
    lines = ["| writer | pairs | n | pair accuracy [95% CI] | vs no rubric (better / worse, p) "
             "| vs base writer | margin vs no rubric (median, r, Wilcoxon p) | margin vs base writer "
             "| names the constraint |", "|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        rows = arms[name]
        split_of = {r["family"]: r["split"] for r in rows}
        families = sorted(split_of, key=lambda f: (split_of[f] != "trained family", f))
        groups = [(split, [r for r in rows if r["split"] == split]) for split in ("trained family", "held-out family")]
        groups += [(f"  {short(f)}", [r for r in rows if r["family"] == f]) for f in families]
        for label, rs in [*groups, ("all", rows)]:
            if not rs:
                continue
            n, k = len(rs), sum(r["credit"] for r in rs)
            lo, hi = wilson(k, n)
            none = arms.get("none") if name != "none" else None
            base = arms.get("base") if name not in ("none", "stated", "base") else None
            vs_none, vs_base, m_none, m_base = paired(rs, none), paired(rs, base), margin_test(rs, none), \
                margin_test(rs, base)
            named = [names_constraint(r["rubric"], asked[r["prompt"]]) for r in rs if r.get("rubric")]
            share = f"{sum(named) / len(named):.2f}" if named else "-"
            lines.append(f"| {name} | {label} | {n} | {k / n:.3f} [{lo:.3f}, {hi:.3f}] | {vs_none} | {vs_base} "
                         f"| {m_none} | {m_base} | {share} |")
    text = "\n".join(lines) + "\n" + policy_table()
    (RESULTS / "heldout-table.md").write_text(text)
    figure({name: arms[name] for name in names}, RESULTS / "heldout.png")
    print(text)


def figure(arms: dict[str, list[dict]], path: Path) -> None:
    """The held-out table as a picture: each writer's pair accuracy with its 95% Wilson interval, on the trained
    families, the held-out families and all pairs."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.2))
    ax = fig.add_subplot(1, 1, 1)
    for j, (label, marker) in enumerate((("trained family", "o"), ("held-out family", "s"), ("all", "D"))):
        for i, rows in enumerate(arms.values()):
            rs = [r for r in rows if label == "all" or r["split"] == label]
            k, n = sum(r["credit"] for r in rs), len(rs)
            lo, hi = wilson(k, n)
            ax.errorbar([i + (j - 1) * 0.22], [k / n], yerr=[[k / n - lo], [hi - k / n]], fmt=marker, capsize=3,
                        color=f"C{j}", label=f"{label} (n {n})" if i == 0 else None)
    ax.axhline(0.5, color="#cc4444", linewidth=0.8, linestyle=":")
    ax.set_xticks(range(len(arms)), list(arms), fontsize=7, rotation=30, ha="right")
    ax.set_ylabel("held-out pair accuracy")
    ax.set_title(f"Frozen {JUDGE} ({JUDGE_MODE}, {JUDGE_DTYPE}) under each writer's rubrics", fontsize=9, pad=20)
    ax.legend(fontsize=7, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, frameon=False)  # above the arms
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def policy_table() -> str:
    """The policies' share of the held-out prompts' constraints followed: step 0 (the base model's held-out answers)
    and each trained policy (``answers --policy NAME``), per split. Each trained policy is compared with step 0 and
    with the control (a policy named ``control-*``) by a sign test over prompts, on the samples both have of each
    prompt (sample indices below the smaller count), so that a prompt's one answer never meets another's mean of four:
    a prompt counts where the share of its constraints followed differs."""
    files = {"step 0 (base)": RESULTS / f"heldout-answers-{POLICY}.jsonl",
             **{f.stem: f for f in sorted((RESULTS / "policies").glob("*.jsonl"))}}
    if len(files) < 2 or not all(f.is_file() for f in files.values()):
        return ""
    per = {name: read_jsonl(f) for name, f in files.items()}
    control = next((n for n in per if n.startswith("control")), None)

    def versus(mine: list[dict], other: list[dict]) -> str:
        k = min(1 + max(r["sample"] for r in mine), 1 + max(r["sample"] for r in other))
        share = [collections.defaultdict(list), collections.defaultdict(list)]
        for side, rows in zip(share, (mine, other), strict=True):
            for r in rows:
                if r["sample"] < k:
                    side[r["prompt"]] += r["passed"]
        a, b = ({p: sum(v) / len(v) for p, v in side.items()} for side in share)
        up, down = sum(v > b[p] for p, v in a.items() if p in b), sum(v < b[p] for p, v in a.items() if p in b)
        return f"{up} / {down}, p = {sign_p(up, down):.3f}"

    lines = ["", "Held-out prompts: the share of their constraints the policy's answers follow", "",
             "| policy | split | n (prompts / answers) | followed [95% CI] | vs step 0 (prompts higher / lower, p) "
             "| vs the control |", "|---|---|---|---|---|---|"]
    families = sorted({r["family"] for r in per["step 0 (base)"]}, key=lambda f: (f not in STATED, f))
    split_of = {f: "trained family" if f in STATED else "held-out family" for f in families}
    for name, rows in per.items():
        for label in ("trained family", "held-out family", *families, "all"):
            rs = [r for r in rows if label in ("all", r["family"], split_of[r["family"]])]
            checks = [x for r in rs for x in r["passed"]]
            lo, hi = wilson(sum(checks), len(checks))
            split = {r["prompt"] for r in rs}
            vs_base = "-" if name == "step 0 (base)" else \
                versus(rs, [r for r in per["step 0 (base)"] if r["prompt"] in split])
            vs_control = versus(rs, [r for r in per[control] if r["prompt"] in split]) \
                if control and name not in ("step 0 (base)", control) else "-"
            share = f"{sum(checks) / len(checks):.3f} [{lo:.3f}, {hi:.3f}]"
            shown = f"  {short(label)}" if label in families else label
            lines.append(f"| {name} | {shown} | {len(split)} / {len(rs)} | {share} | {vs_base} | {vs_control} |")
    return "\n".join(lines) + "\n"


def progress(args: argparse.Namespace) -> None:
    """A run's course per step from its records: the policy's share of constraints followed (its answers), the
    newer-better counts of each rubric step, the share of the writer's rubrics that name the constraint, and the
    writer's reward spread (the mean standard deviation across a question's rubrics: GRPO's signal), and how often the
    judge, under the writer's rubrics, scored higher the answer of a pair that followed more constraints (pairs that
    differ only): what a writer that learns the constraint raises. In a policy step the same column counts the pairs
    of one question's answers that differ in the constraints followed: how often the policy's reward (the judge's
    score, under the step's rubric or none) had the checker's direction, which pure EvoLM (run (b)) relies on (equal
    scores left out). And whether naming the constraint paid: in each question group with rubrics that name it and
    rubrics that do not, their mean rewards compared."""
    steps: dict[int, dict[str, Any]] = {}
    for f in sorted((args.run / "samples").glob("*.jsonl")):
        for r in read_jsonl(f):
            if not r.get("constraints") or (args.last_step and r["step"] > args.last_step):
                continue
            s = steps.setdefault(r["step"], {"role": r["role"], "cycle": r.get("cycle"), "followed": [], "named": {},
                                             "rewards": {}, "margins": {}, "right": [], "answers": {},
                                             "naming": {}})
            text = r.get("completion") if r["role"] == "rubric" else r.get("rubric_text")  # the writer's rubric
            named = bool(text) and names_constraint(text, r["constraints"])
            if text:
                s["named"][text] = named
            if r["role"] == "rubric" and r.get("reward") is not None:  # a question's rubrics: one GRPO group
                s["rewards"].setdefault(r.get("slot"), []).append(float(r["reward"]))
                s["naming"].setdefault(r.get("slot"), []).append((named, float(r["reward"])))
                if None not in (r.get("s_pos"), r.get("s_neg")):
                    s["margins"].setdefault(r.get("slot"), []).append((float(r["reward"]), r["s_pos"] - r["s_neg"]))
                    if r.get("passed_pos") != r.get("passed_neg"):  # the checker tells the pair's answers apart
                        s["right"].append((r["s_pos"] > r["s_neg"]) == (r["passed_pos"] > r["passed_neg"]))
            if r["role"] == "policy" and r.get("constraints_passed") is not None:
                s["followed"].append(r["constraints_passed"] / len(r["constraints"]))
                if r.get("score") is not None:
                    s["answers"].setdefault(r["question"], []).append((r["constraints_passed"], float(r["score"])))
    for s in steps.values():  # a policy step: its question groups' answer pairs that the checker tells apart
        s["right"] += [(a[1] > b[1]) == (a[0] > b[0]) for g in s["answers"].values()
                       for a, b in itertools.combinations(g, 2) if a[0] != b[0] and a[1] != b[1]]
    records = [m for m in read_jsonl(args.run / "metrics.jsonl") if not args.last_step or m["step"] <= args.last_step]
    pre = precondition(records, 40)  # the newer_passes_* records, summed
    for step, more, fewer, same in pre.steps if pre else ():
        if step in steps:
            steps[step]["newer"] = (more, fewer, same)
    lines = ["| step | role | constraints followed (policy answers) | newer better / worse / same "
             "| rubrics naming the constraint | reward spread across a question's rubrics "
             "| judge right on pairs that differ (the step's rubrics) |",
             "|---|---|---|---|---|---|---|"]
    for step, s in sorted(steps.items()):
        followed = f"{sum(s['followed']) / len(s['followed']):.2f} (n {len(s['followed'])})" if s["followed"] else "-"
        newer = " / ".join(map(str, s["newer"])) if "newer" in s else "-"
        named = f"{sum(s['named'].values()) / len(s['named']):.2f} (n {len(s['named'])})" if s["named"] else "-"
        groups = [g for g in s["rewards"].values() if len(g) > 1]
        spread = f"{sum(statistics.pstdev(g) for g in groups) / len(groups):.3f}" if groups else "-"
        right = f"{sum(s['right']) / len(s['right']):.2f} (n {len(s['right'])})" if s["right"] else "-"
        lines.append(f"| {step} | {s['role']} | {followed} | {newer} | {named} | {spread} | {right} |")
    if pre:
        more, fewer = pre.early[:2] if pre.early else (pre.more, pre.fewer)
        lines.append(f"\nnewer better / worse / same over the run: {pre.more} / {pre.fewer} / {pre.same} (sign p = "
                     f"{sign_p(pre.more, pre.fewer):.3f}); the first {more + fewer} that differ: {more} / {fewer}")
        first = [0, 0, 0]  # the first 40 pairs, whole steps: the step that reaches 40 counts whole
        for step, *counts in pre.steps:
            if sum(first) < 40:
                first, last = [a + b for a, b in zip(first, counts, strict=True)], step
        if sum(first) >= 40:
            lines.append(f"the first {sum(first)} pairs (to step {last}): {' / '.join(map(str, first))}")
    by_cycle: dict[int, list[bool]] = {}
    for s in steps.values():
        if s["right"] and s["role"] == "rubric":
            by_cycle.setdefault(s["cycle"], []).extend(s["right"])
    groups = [g for s in steps.values() for g in s["margins"].values() if len(g) > 1]
    if groups:  # the reward = f(margin, format validity): did validity change a group's winner?
        top = sum(max(g)[1] == max(m for _, m in g) for g in groups)
        lines.append(f"question groups whose highest reward went to a rubric with the group's largest margin: {top} "
                     f"of {len(groups)} (in the rest, format validity decided)")
    if by_cycle:
        lines.append("judge right on pairs that differ under the writer's rubrics, by cycle: " + ", ".join(
            f"{c}: {sum(v)}/{len(v)}" for c, v in sorted(by_cycle.items())))
    gaps = [statistics.mean(w for n, w in g if n) - statistics.mean(w for n, w in g if not n)
            for s in steps.values() for g in s["naming"].values() if len({n for n, _ in g}) == 2]
    if gaps:  # GRPO raises naming only where it pays: within a question's group, against the group's other rubrics
        up, down = sum(d > 0 for d in gaps), sum(d < 0 for d in gaps)
        lines.append(f"rubrics naming the constraint against the rest of their question's group: reward higher in "
                     f"{up}, lower in {down} of {len(gaps)} groups (sign p = {sign_p(up, down):.3f}; mean difference "
                     f"{statistics.mean(gaps):+.4f})")
    policy = [x for s in steps.values() if s["role"] == "policy" for x in s["right"]]
    if policy:
        k = sum(policy)
        lines.append(f"policy reward's direction: the judge scored higher the answer following more constraints in {k} "
                     f"of {len(policy)} answer pairs of a question (sign p = {sign_p(k, len(policy) - k):.3f})")
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    print(text)


def watch(args: argparse.Namespace) -> int:
    """Exit 3 (and with --stop, send the training process SIGTERM: it stops as Ctrl-C does, at a step's end) when
    the newer answer followed more constraints in under ``--floor`` of the first ``--first`` pairs that differ."""
    import os
    import signal

    while True:
        if args.follow and not (args.run / "metrics.jsonl").is_file():  # the run has not finished its first step
            time.sleep(args.poll)
            continue
        pre = precondition(read_jsonl(args.run / "metrics.jsonl"), args.first)
        more, fewer, same = (pre.more, pre.fewer, pre.same) if pre else (0, 0, 0)
        e_more, e_fewer = pre.early[:2] if pre and pre.early else (more, fewer)
        decided = e_more + e_fewer
        line = (f"{time.strftime('%H:%M:%S')} newer better / worse / same over the run: {more} / {fewer} / {same}; "
                f"first {decided} that differ: {e_more} / {e_fewer}")
        print(line, flush=True)
        if decided and decided >= args.first and e_more / decided < args.floor:
            print(f"precondition failed: the newer answer was better in {e_more / decided:.0%} of the first {decided} "
                  f"pairs that differ (floor {args.floor:.0%})", flush=True)
            lock = args.run / LOCK_FILE
            if args.stop and lock.is_file() and (pid := lock.read_text().strip()).isdigit():
                os.kill(int(pid), signal.SIGTERM)
            return 3
        if decided >= args.first or not args.follow:
            return 0
        if not (args.run / LOCK_FILE).is_file():  # the run ended (or crashed) before its first pairs were in
            print(f"the run is not training (no {LOCK_FILE}): the precondition is undecided", flush=True)
            return 0
        time.sleep(args.poll)


# ============================================================================= command line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m studies.constraints", description=__doc__.splitlines()[0],
                                epilog="\n".join(__doc__.splitlines()[2:]),
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("survey", help="base pass rates per family, and natural pairs")
    s.add_argument("--prompts", type=Path, default=Path("data/constraints/survey.jsonl"))
    s.add_argument("--model", default=POLICY, help="the policy (default: %(default)s)")
    s.add_argument("--families", default="", help="only these families, comma-separated (default: all)")
    s.add_argument("--per-family", type=int, default=24, help="prompts per family (default: 24)")
    s.add_argument("--samples", type=int, default=4, help="answers per prompt (default: 4, a GRPO group)")
    s.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: 1.0, GRPO's)")
    s.add_argument("--max-new-tokens", type=int, default=256)
    s.add_argument("--batch-size", type=int, default=16)
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(fn=survey)
    v = sub.add_parser("visibility", help="the judge's pair accuracy per family, constraint stated vs no rubric")
    v.add_argument("--survey", type=Path, nargs="+", default=[RESULTS / f"survey-{POLICY}.jsonl"],
                   help="survey answer files whose natural pairs are judged")
    v.add_argument("--judge", default=JUDGE, help="(default: %(default)s)")
    v.add_argument("--families", default="", help="only these families, comma-separated (default: all)")
    v.add_argument("--pairs", type=int, default=20, help="natural pairs per family, at most (default: 20)")
    v.add_argument("--tag", default="", help="added to the result files' names (a second set of families)")
    v.add_argument("--mode", default=JUDGE_MODE, choices=("yesno", "prob", "generative"),
                   help="the judge's mode (default: %(default)s, the study's)")
    v.set_defaults(fn=visibility)
    heldout = Path("data/constraints/heldout.jsonl")
    a = sub.add_parser("answers", help="sample and check answers to the held-out prompts")
    a.add_argument("--heldout", type=Path, default=heldout)
    a.add_argument("--model", default=POLICY)
    a.add_argument("--samples", type=int, default=4)
    a.add_argument("--temperature", type=float, default=1.0)
    a.add_argument("--max-new-tokens", type=int, default=256)
    a.add_argument("--batch-size", type=int, default=16)
    a.add_argument("--seed", type=int, default=1)
    a.add_argument("--policy", default=None, help="a trained policy's name in the policy table: its answers go to "
                   "results/policies/NAME.jsonl, not among the held-out pairs' sources")
    a.set_defaults(fn=answers)
    pp = sub.add_parser("pairs", help="the held-out natural pairs from the answer files")
    pp.add_argument("--heldout", type=Path, default=heldout)
    pp.add_argument("--answers", type=Path, nargs="+", default=sorted(RESULTS.glob("heldout-answers-*.jsonl")))
    pp.set_defaults(fn=pairs)
    w = sub.add_parser("arm", help="judge the held-out pairs under one writer's rubrics")
    w.add_argument("writer", help="none, stated (the constraint as the criterion), or a model / LoRA adapter folder")
    w.add_argument("--name", required=True, help="the arm's name in the table")
    w.add_argument("--judge", default=JUDGE)
    w.add_argument("--seed", type=int, default=0)
    w.set_defaults(fn=arm)
    t = sub.add_parser("table", help="the held-out table from the kept arm files")
    t.set_defaults(fn=table)
    tp = sub.add_parser("train-pairs", help="run (c)'s labelled pairs, from runs' policy-step answers")
    tp.add_argument("runs", type=Path, nargs="+", help="run directories (their samples/*-policy.jsonl)")
    tp.add_argument("--out", type=Path, default=RESULTS / "train-pairs.jsonl")
    tp.set_defaults(fn=train_pairs)
    ws = sub.add_parser("warmstart", help="the writer's warm-start seed set (trained families' constraints stated)")
    ws.add_argument("--prompts", type=Path, default=Path("data/constraints/train.jsonl"))
    ws.add_argument("--gsm8k", type=Path, default=Path("data/gsm8k/train.jsonl"), help="its final answers")
    ws.add_argument("--out", type=Path, default=RESULTS / "warmstart-seed.jsonl")
    ws.add_argument("--seed", type=int, default=0)
    ws.set_defaults(fn=warmstart)
    k = sub.add_parser("keep", help="a writer's LoRA adapter into results/adapters/NAME (bfloat16)")
    k.add_argument("adapter", type=Path, help="a LoRA checkpoint or warm-start folder")
    k.add_argument("--name", required=True, help="the folder's name under results/adapters")
    k.set_defaults(fn=keep)
    pr = sub.add_parser("progress", help="a run's course per step: constraints followed, newer better, named")
    pr.add_argument("run", type=Path, help="the run directory")
    pr.add_argument("--out", type=Path, default=None, help="also write the table here (markdown)")
    pr.add_argument("--last-step", type=int, default=0, help="leave out the records of later steps (a step stopped "
                    "before its checkpoint, which a resume does again; default: none left out)")
    pr.set_defaults(fn=progress)
    wa = sub.add_parser("watch", help="a run's precondition; --stop ends the run when it fails")
    wa.add_argument("run", type=Path, help="the run directory")
    wa.add_argument("--first", type=int, default=40, help="pairs that differ, judged first (default: 40)")
    wa.add_argument("--floor", type=float, default=0.6, help="least share of those with the newer better (0.6)")
    wa.add_argument("--follow", action="store_true", help="poll until the first pairs are in")
    wa.add_argument("--stop", action="store_true", help="send the training process SIGTERM when it fails")
    wa.add_argument("--poll", type=float, default=60.0)
    wa.set_defaults(fn=watch)
    args = p.parse_args(argv)
    (RESULTS / "arms").mkdir(parents=True, exist_ok=True)
    try:
        return args.fn(args) or 0
    except EvolmError as e:
        print(f"studies.constraints: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
