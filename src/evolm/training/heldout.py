"""Held-out evaluation during training (``eval.*``): the writer's and the policy's progress on data no step trains on.

When: before the first optimizer step (step 0, the initial weights), every ``eval.every`` optimizer steps, and
after the last step, always with the weights of that moment. ``training.trl_adapter`` calls
``TrainingSteps.step_rows`` at the start of each step with the trainer's ``generate`` and ``TrainingSteps.end_step``
on every process after each update; the
loop hands both to ``HeldOut``, which evaluates at step 0 in the first and when due in the second, generating
with the ``generate`` it was last given. A resumed run does not repeat the step-0 evaluation (it was logged
before the checkpoint it resumes from).

Each evaluation writes its items (each pair's rubric, scores and credit; each question's answer and score) to
``heldout/step-NNNNNN.jsonl``, so two evaluations of a run can be compared item by item (paired tests),
and appends one ``StepRecord`` with ``role="eval"`` to metrics.jsonl (``step`` = optimizer steps
completed; no cycle or phase; ``seconds`` = how long the evaluation took, which the next training step's
``seconds`` leaves out). Readers that aggregate training steps skip these lines.

What is measured:

- ``heldout_pair_accuracy`` / ``heldout_pairs``: the current model, in the rubric role, writes one rubric per
  distinct prompt of ``eval.pairs``; the judge scores both answers of each pair under it; a pair earns 1 when the
  chosen answer scores higher, 0 when lower, 1/2 on a tie or a missing score (``eval.pairs.pair_credit``, as in
  ``evolm eval pairs``). ``heldout_pairs`` is the number of pairs.
- ``heldout_validity``: the format-valid share (``rubrics.format_validity``) of every rubric the evaluation wrote:
  one per distinct prompt of ``eval.pairs`` and one per question of ``eval.questions`` (a text in both is written
  once).
- ``heldout_policy_score`` (``_std``, ``heldout_questions``): the current model, in the policy role, answers each
  held-out question once, greedily (temperature 0; ``RunConfig.pair_answer_tokens``, ``model.system_prompt``); the judge
  scores each answer under a fixed evaluation rubric set, written once by the initial writer at the step-0
  evaluation and saved as ``eval_rubrics.jsonl`` in the run directory (read back on resume, never rewritten).
  The mean and population standard deviation are over the answers that got a score; ``heldout_questions`` counts
  them. A question without a fixed rubric (``eval.questions`` changed on resume) is not scored; resuming with
  ``eval.questions`` but no ``eval_rubrics.jsonl`` (the run did not set it at step 0) is an error.

Rubrics are written with ``generate_calls.rubric_params`` of step 0 (``rubric.temperature``, ``top_p``,
``max_new_tokens``, ``constrained``; the run's seed) at every evaluation, so two evaluations differ only by the
weights; answers with ``generate_calls.answer_params`` of step 0 at temperature 0. The judge
reads a rubric as in training (the text as written; with ``rubric.invalid=zero`` an unparsed one leaves the judge
alone). With several judges an answer's score is the mean of theirs (``judge.score_with_judges``). Generation
runs on every process (it is collective); the judging, the record and ``eval_rubrics.jsonl`` only on the main one.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evolm.backends.base import SamplingParams
from evolm.errors import InputError
from evolm.rubrics import WrittenRubric, read_written, rubric_messages, strip_thinking
from evolm.runs.jsonl import write_jsonl
from evolm.runs.records import METRICS_FILE, StepRecord, append_record, iter_lenient
from evolm.training.contrast import Generate, policy_messages

if TYPE_CHECKING:
    from evolm.config import RunConfig
    from evolm.eval.pairs import PreferencePair
    from evolm.judge.judge import Judge

EVAL_ROLE = "eval"  # the role of a held-out evaluation's line in metrics.jsonl
EVAL_RUBRICS_FILE = "eval_rubrics.jsonl"  # the fixed evaluation rubric set: {question, text} per line
HELDOUT_DIR = "heldout"  # one file of items per evaluation: step-NNNNNN.jsonl


def read_eval_sets(cfg: RunConfig) -> tuple[list[PreferencePair], list[str]]:
    """The held-out pairs (``eval.pairs``) and questions (``eval.questions``), the first ``eval.limit`` of each;
    ``InputError`` for a missing or unreadable file (one line, before any model loads)."""
    from evolm.eval.pairs import load_pairs
    from evolm.training.prompts import load_prompts

    e = cfg.eval
    try:
        return (load_pairs(e.pairs, e.limit or None) if e.pairs else [],
                load_prompts(e.questions, e.limit) if e.questions else [])
    except InputError as err:
        raise InputError(f"eval: {err}") from None


@dataclass
class HeldOut:
    """The held-out evaluation of one run; ``HeldOut()`` (no eval files) evaluates nothing."""

    cfg: RunConfig | None = None
    run_dir: Path | None = None
    rubric_params: SamplingParams = field(default_factory=SamplingParams)  # generate_calls.rubric_params of step 0
    answer_params: SamplingParams = field(default_factory=SamplingParams)  # answer_params of step 0, greedy
    pairs: list[PreferencePair] = field(default_factory=list)
    questions: list[str] = field(default_factory=list)
    fixed: dict[str, str] | None = None  # question -> rubric text of the fixed set (None until step 0 writes it)
    on_record: Callable[[StepRecord], None] | None = None  # each eval record, on the main process (the CLI prints)
    is_main: bool = True  # set by ``TrainingSteps.begin``
    generate: Generate | None = None  # the trainer's, from the latest ``TrainingSteps.step_rows``
    done: set[int] = field(default_factory=set)  # steps evaluated by this process

    @classmethod
    def load(cls, cfg: RunConfig, run_dir: Path, rubric_params: SamplingParams, answer_params: SamplingParams,
             pairs: list[PreferencePair], questions: list[str],
             on_record: Callable[[StepRecord], None] | None = None) -> HeldOut:
        """The evaluation of ``pairs`` and ``questions`` (``read_eval_sets``, without those over
        ``data.max_prompt_tokens``: ``prompt_length.fit_prompt_set``), with the run's saved fixed rubric set.

        ``rubric_params`` / ``answer_params``: how the rubric and policy roles generate
        (``generate_calls.rubric_params`` and ``answer_params`` of step 0); answers are decoded greedily whatever
        their temperature."""
        saved = run_dir / EVAL_RUBRICS_FILE
        fixed = {str(r["question"]): str(r["text"]) for r in iter_lenient(saved) if "question" in r and "text" in r} \
            if saved.is_file() else None
        if questions and fixed is None and (run_dir / METRICS_FILE).is_file():  # a resumed run (a fresh one has none)
            raise InputError(f"eval.questions: {saved} is missing: the fixed rubric set of held-out policy scores is "
                             "written at step 0, and this run did not set eval.questions then; resume without it")
        return cls(cfg, run_dir, rubric_params, replace(answer_params, temperature=0.0), pairs, questions, fixed,
                   on_record)

    @property
    def enabled(self) -> bool:
        return bool(self.pairs or self.questions)

    def before_step(self, step: int, generate: Generate, judges: Sequence[Judge]) -> float:
        """At the start of optimizer step ``step`` (0-based): keep ``generate``; evaluate the initial weights at 0.

        Returns the seconds spent evaluating (0.0 when nothing was evaluated)."""
        self.generate = generate
        return self.evaluate(0, judges) if step == 0 else 0.0

    def after_step(self, step: int, judges: Sequence[Judge]) -> float:
        """After the update of step ``step`` (1-based), on every process: evaluate when ``eval.every`` divides
        ``step`` and after the last step. Returns the seconds spent."""
        if self.cfg is None:
            return 0.0
        every = self.cfg.eval.every
        return self.evaluate(step, judges) if step == self.cfg.total_steps or (every and step % every == 0) else 0.0

    def evaluate(self, step: int, judges: Sequence[Judge]) -> float:
        """One evaluation with the current weights, logged as a role "eval" line (main process)."""
        if not self.enabled or self.generate is None or self.cfg is None or self.run_dir is None or step in self.done:
            return 0.0
        self.done.add(step)
        start = time.time()
        written, answers = generate_heldout(self.generate, self.pairs, self.questions, self.cfg.model.system_prompt,
                                            self.rubric_params, self.answer_params, self.cfg.rubric.prompt)
        if self.fixed is None and step == 0:  # the initial writer's rubrics for the questions: the fixed set
            self.fixed = {q: written[q].text for q in self.questions}
            if self.is_main and self.questions:
                write_jsonl(self.run_dir / EVAL_RUBRICS_FILE,
                            [{"question": q, "text": t} for q, t in self.fixed.items()])
        if not self.is_main:
            return time.time() - start
        rows = judge_heldout(self.cfg, judges, self.pairs, written, answers, self.fixed or {})
        path = heldout_items_path(self.run_dir, step)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_jsonl(path, rows)
        rec = summarize_heldout(step, rows, written)
        now = time.time()
        rec.seconds, rec.time = round(now - start, 3), now
        append_record(self.run_dir / METRICS_FILE, rec)
        if self.on_record is not None:
            self.on_record(rec)
        return now - start


# ----------------------------------------------------------------------------- the evaluation itself


def generate_heldout(generate: Generate, pairs: Sequence[PreferencePair], questions: Sequence[str], system_prompt: str,
                     rubric_params: SamplingParams, answer_params: SamplingParams, rubric_prompt: str = "v3"
                     ) -> tuple[dict[str, WrittenRubric], dict[str, str]]:
    """The current model's rubric for every distinct held-out text, and its answer to every question.

    Called identically on every process (``generate`` is collective): one rubric call, one answer call.
    """
    texts = list(dict.fromkeys([*(p.prompt for p in pairs), *questions]))
    written = [read_written(t) for t in generate([rubric_messages(q, rubric_prompt) for q in texts], rubric_params)]
    answers = generate([policy_messages(q, system_prompt) for q in questions], answer_params) if questions else []
    return dict(zip(texts, written, strict=True)), dict(zip(questions, answers, strict=True))


def _item(question: str, answer: str, rubric: WrittenRubric, invalid: str) -> Any:
    """A judge item reading ``rubric`` as training does (``judging.judge_rows``, policy rows)."""
    from evolm.judge.judge import JudgeItem

    raw = strip_thinking(rubric.text) or None
    return JudgeItem(question, answer, rubric.rubric, rubric_text=None if rubric.rubric is None and invalid == "zero"
                     else raw)


def judge_heldout(cfg: RunConfig, judges: Sequence[Judge], pairs: Sequence[PreferencePair],
                  written: dict[str, WrittenRubric], answers: dict[str, str], fixed: dict[str, str]
                  ) -> list[dict[str, Any]]:
    """Judge the pairs under ``written`` and the answers under ``fixed`` (one ``Judge.score`` call per judge).

    Returns one row per pair (``kind`` "pair": its rubric, both scores, its credit; with one judge whose mode reads
    criteria, also each answer's ``[weight, value]`` per criterion: ``criteria_chosen``, ``criteria_rejected``) and per
    scored question
    (``kind`` "question": the answer and its score; the rubric is the fixed set's), in input order: what
    ``heldout/step-NNNNNN.jsonl`` holds, so two evaluations can be compared item by item."""
    from evolm.eval.pairs import pair_credit
    from evolm.judge.judge import score_with_judges

    invalid = cfg.rubric.invalid
    items = [_item(p.prompt, a, written[p.prompt], invalid) for p in pairs for a in (p.better, p.worse)]
    scored_qs = [q for q in answers if q in fixed]
    items += [_item(q, answers[q], read_written(fixed[q]), invalid) for q in scored_qs]
    readings: list[Any] = [None] * len(items)  # one judge: each item's per-criterion [weight, value] pairs
    if items and len(judges) == 1:
        from evolm.scores import scores_of

        judgments = judges[0].score(items)
        scores = scores_of(judgments)
        readings = [[[c.weight, c.value] for c in j.criteria or ()] or None for j in judgments]
    else:
        scores = score_with_judges(list(judges), items, "mean") if items and judges else [None] * len(items)
    n = 2 * len(pairs)
    rows: list[dict[str, Any]] = []
    for k, (p, sb, sw) in enumerate(zip(pairs, scores[0:n:2], scores[1:n:2], strict=True)):
        w = written[p.prompt]
        rows.append({"kind": "pair", "prompt": p.prompt, "chosen": p.better, "rejected": p.worse, "rubric": w.text,
                     "rubric_valid": w.valid, "score_chosen": sb, "score_rejected": sw, "credit": pair_credit(sb, sw)})
        if readings[2 * k] or readings[2 * k + 1]:
            rows[-1] |= {"criteria_chosen": readings[2 * k], "criteria_rejected": readings[2 * k + 1]}
    rows += [{"kind": "question", "question": q, "answer": answers[q], "score": s}
             for q, s in zip(scored_qs, scores[n:], strict=True)]
    return rows


def summarize_heldout(step: int, rows: Sequence[dict[str, Any]], written: dict[str, WrittenRubric]) -> StepRecord:
    """One evaluation's line from its items: pair accuracy (mean credit), validity, the policy score's mean and std."""
    from evolm.eval.pairs import summarize
    from evolm.scores import is_missing

    rec = StepRecord(step=step, role=EVAL_ROLE)
    scored = [(r["score_chosen"], r["score_rejected"]) for r in rows if r["kind"] == "pair"]
    if scored:
        result = summarize(scored)
        rec.heldout_pair_accuracy, rec.heldout_pairs = result.accuracy, result.pairs
    if written:
        rec.heldout_validity = sum(w.valid for w in written.values()) / len(written)
    answered = [r["score"] for r in rows if r["kind"] == "question"]
    if answered:
        present = [float(s) for s in answered if not is_missing(s)]
        rec.heldout_questions = len(present)
        if present:
            rec.heldout_policy_score = sum(present) / len(present)
            rec.heldout_policy_score_std = statistics.pstdev(present)
    return rec


def heldout_items_path(run_dir: Path, step: int) -> Path:
    """Where one evaluation's items are kept (``judge_heldout``'s rows)."""
    return run_dir / HELDOUT_DIR / f"step-{step:06d}.jsonl"


# ----------------------------------------------------------------------------- reading it back (CLI)


def heldout_records(records: Sequence[StepRecord]) -> list[StepRecord]:
    """The role "eval" lines among a run's records, in step order."""
    return sorted((r for r in records if r.role == EVAL_ROLE), key=lambda r: r.step)


def _fmt(rec: StepRecord, key: str) -> str:
    v = getattr(rec, key)
    return "-" if v is None else f"{v:.3f}"


def describe(rec: StepRecord) -> str:
    """One line for a held-out evaluation record."""
    return (f"held-out at step {rec.step}: judge pair accuracy {_fmt(rec, 'heldout_pair_accuracy')} "
            f"({rec.heldout_pairs or 0} pairs), rubric validity {_fmt(rec, 'heldout_validity')}, policy score "
            f"{_fmt(rec, 'heldout_policy_score')} ({rec.heldout_questions or 0} questions)")


def summary_rows(records: Sequence[StepRecord]) -> list[tuple[str, str, str]]:
    """(metric, first, last) for the first and last held-out evaluations (n in brackets); empty without any."""
    evals = heldout_records(records)
    if not evals:
        return []
    first, last = evals[0], evals[-1]

    def cell(rec: StepRecord, key: str, n: str | None) -> str:
        return _fmt(rec, key) + (f" (n={getattr(rec, n)})" if n and getattr(rec, n) is not None else "")

    rows = [("step", str(first.step), str(last.step))]
    for key, n, name in (("heldout_pair_accuracy", "heldout_pairs", "judge pair accuracy"),
                         ("heldout_validity", None, "rubric validity"),
                         ("heldout_policy_score", "heldout_questions", "policy score")):
        if getattr(first, key) is not None or getattr(last, key) is not None:
            rows.append((name, cell(first, key, n), cell(last, key, n)))
    return rows
