"""The policy evaluation's task table: which lm-eval task stands in for each task of the paper's suite.

The paper (docs/METHOD.md §3.2) scores policies with the 17 tasks of OLMES ``olmo3:adapt``;
``POLICY_TASKS`` maps the ones lm-evaluation-harness has to its stock tasks, ``TASK_GROUPS`` names
sets of them for ``--tasks``, and ``OLMO3_ADAPT_NOT_IN_LM_EVAL`` says what runs the others.
``evolm.eval.policy`` runs them.

Local task choices:
- ``ifeval``: lm-eval's ``ifeval`` (Zhou et al. 2023) on the 541 original prompts. Primary metric
  ``prompt_level_loose_acc`` (what Tulu 3 / OLMo reports); the strict and instruction-level
  accuracies are reported too.
- ``gsm8k``: lm-eval's ``gsm8k_cot_llama``, run zero-shot. Of the stock GSM8K variants it is the
  one written for instruct models behind a chat template: the user turn asks the model to reason
  and to end with "The final answer is N", and its strict filter reads exactly that. Plain
  ``gsm8k`` expects the few-shot "#### N" format a chat model never produces zero-shot, and
  ``gsm8k_cot_zeroshot`` is a completion prompt ("A: Let's think step by step.") that a chat
  template turns into an odd user turn. Primary metric ``exact_match`` with the
  ``flexible-extract`` filter (last number in the answer), so a small model is not scored on
  format alone; the strict filter is reported beside it.

Adding a task is one ``PolicyTask`` entry: the evolm name, the stock lm-eval task and the folders
that define it, where its data come from, and the metrics to report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evolm.errors import InputError


@dataclass(frozen=True)
class PolicyTask:
    """One evaluation task: a stock lm-eval task (or group), fed from a local JSONL file or the hub."""

    name: str  # evolm's name (CLI --tasks, result keys)
    lm_eval_task: str  # the stock task or group whose prompts, filters and metrics we keep
    lm_eval_dirs: tuple[str, ...]  # folders under lm_eval/tasks that define it (indexed alone, to start fast)
    metrics: tuple[str, ...]  # lm-eval result keys "metric,filter" to report, primary first
    olmes_task: str = ""  # the OLMo 3 Adapt (OLMES) task it stands in for
    paper_metric: str = ""  # how the paper scores that task
    data_file: str | None = None  # default local file, relative to the data folder; None: stock data set (hub)
    split: str = ""  # the split name the stock config reads its documents from (local files only)
    required_fields: tuple[str, ...] = ()  # fields each local data row needs (checked before loading the model)
    overrides: tuple[tuple[str, Any], ...] = ()  # config keys replaced on the stock task (besides local data)
    runs_code: bool = False  # scored by executing model-written code (lm-eval's code_eval)
    needs_punkt: bool = False
    differs: str = ""  # how lm-eval's task differs from the paper's, for the docs and the result

    @property
    def local(self) -> bool:
        """Whether the data come from a local file (else from the Hugging Face hub or its cache)."""
        return self.data_file is not None


POLICY_TASKS: dict[str, PolicyTask] = {t.name: t for t in (
    PolicyTask(
        name="mmlu_cot",
        lm_eval_task="mmlu_cot_llama",
        lm_eval_dirs=("llama3/instruct/mmlu_cot",),
        metrics=("exact_match,strict_match",),
        olmes_task="mmlu:cot::olmo3:adapt",
        paper_metric="exact match, zero-shot CoT, macro average of the 57 subjects",
        differs="lm-eval's Llama 3 instruct prompt ('The best answer is X'); its group score weights subjects by "
        "size, so the macro average over subjects is reported beside it",
    ),
    PolicyTask(
        name="bbh_cot",
        lm_eval_task="bbh_cot_zeroshot",
        lm_eval_dirs=("bbh/cot_zeroshot",),
        metrics=("exact_match,flexible-extract",),
        olmes_task="bbh:cot::olmo3:adapt",
        paper_metric="exact match, CoT, macro average of the 27 subtasks",
        differs="zero-shot 'Let's think step by step' completion prompt; group score weighted by subtask size "
        "(macro reported beside it)",
    ),
    PolicyTask(
        name="gpqa",
        lm_eval_task="gpqa_main_cot_zeroshot",
        lm_eval_dirs=("gpqa/cot_zeroshot",),
        metrics=("exact_match,flexible-extract", "exact_match,strict-match"),
        olmes_task="gpqa::olmo3:adapt",
        paper_metric="exact match (answer letter), zero-shot CoT",
        differs="GPQA main (448 questions); the data set is gated on the hub (accept its terms, set HF_TOKEN)",
    ),
    PolicyTask(
        name="agieval_en",
        lm_eval_task="agieval_en",
        lm_eval_dirs=("agieval",),
        metrics=("acc,none",),
        olmes_task="agi_eval_english::olmo3:adapt",
        paper_metric="exact match, zero-shot CoT, macro average of 8 English subsets",
        differs="lm-eval scores 9 of its 10 subsets by log-likelihood of the options (no generation, so "
        "decoding settings do not apply) and adds agieval_math and sat-en-without-passage",
    ),
    PolicyTask(
        name="minerva_math",
        lm_eval_task="minerva_math",
        lm_eval_dirs=("minerva_math", "benchmarks"),
        metrics=("math_verify,none", "exact_match,none"),
        olmes_task="minerva_math::olmo3:adapt",
        paper_metric="exact match (flex), macro average of the 7 subjects",
        differs="lm-eval's default is 4-shot (run zero-shot here) with no token budget of its own (HFLM's 256); "
        "math_verify is the equivalence check closest to the paper's flex match",
    ),
    PolicyTask(
        name="gsm8k",
        lm_eval_task="gsm8k_cot_llama",
        lm_eval_dirs=("gsm8k",),
        metrics=("exact_match,flexible-extract", "exact_match,strict-match"),
        olmes_task="gsm8k::olmo3:adapt",
        paper_metric="exact match",
        data_file="gsm8k/test.jsonl",
        split="test",
        required_fields=("question", "answer"),
    ),
    PolicyTask(
        name="aime24",
        lm_eval_task="aime24",
        lm_eval_dirs=("aime",),
        metrics=("exact_match,none",),
        olmes_task="aime:2024::olmo3:adapt",
        paper_metric="pass@1 averaged over 32 samples",
        differs="one sample per problem; lm-eval's budget is 32768 tokens (capped to the model's context)",
    ),
    PolicyTask(
        name="aime25",
        lm_eval_task="aime25",
        lm_eval_dirs=("aime",),
        metrics=("exact_match,none",),
        olmes_task="aime:2025::olmo3:adapt",
        paper_metric="pass@1 averaged over 32 samples",
        differs="one sample per problem; lm-eval's budget is 32768 tokens (capped to the model's context)",
    ),
    PolicyTask(
        name="humaneval_plus",
        lm_eval_task="humaneval_instruct",
        lm_eval_dirs=("humaneval",),
        metrics=("pass@1,create_test",),
        olmes_task="codex_humanevalplus::olmo3:adapt",
        paper_metric="pass@1",
        overrides=(("dataset_path", "evalplus/humanevalplus"),),
        runs_code=True,
        differs="lm-eval's humaneval_instruct prompt (for chat models) on the HumanEval+ data, as lm-eval's own "
        "humaneval_plus does for the completion prompt; one greedy sample",
    ),
    PolicyTask(
        name="mbpp_plus",
        lm_eval_task="mbpp_plus_instruct",
        lm_eval_dirs=("mbpp",),
        metrics=("pass_at_1,extract_code",),
        olmes_task="mbppplus::olmo3:adapt",
        paper_metric="pass@1",
        runs_code=True,
        differs="one greedy sample",
    ),
    PolicyTask(
        name="ifeval",
        lm_eval_task="ifeval",
        lm_eval_dirs=("ifeval",),
        metrics=(
            "prompt_level_loose_acc,none",
            "prompt_level_strict_acc,none",
            "inst_level_loose_acc,none",
            "inst_level_strict_acc,none",
        ),
        olmes_task="ifeval::olmo3:adapt",
        paper_metric="prompt-level loose accuracy",
        data_file="ifeval/input_data.jsonl",
        split="train",
        required_fields=("key", "prompt", "instruction_id_list", "kwargs"),
        needs_punkt=True,
    ),
)}

# Named groups of tasks for --tasks. olmo3_adapt: the OLMES suite's tasks that lm-eval has, in its order.
TASK_GROUPS: dict[str, tuple[str, ...]] = {
    "olmo3_adapt": (
        "mmlu_cot", "bbh_cot", "gpqa", "agieval_en", "minerva_math", "gsm8k", "aime24", "aime25",
        "humaneval_plus", "mbpp_plus", "ifeval",
    ),
}

# OLMo 3 Adapt tasks with no lm-eval task: OLMES task -> (the paper's metric, what runs it instead).
OLMO3_ADAPT_NOT_IN_LM_EVAL: dict[str, tuple[str, str]] = {
    "popqa::olmo3:adapt": ("exact match", "OLMES (allenai/olmes)"),
    "simpleqa::olmo3:adapt": ("correctness graded by an OpenAI model", "OLMES with an OpenAI API key"),
    "zebralogic::olmo3:adapt": ("puzzle-level accuracy", "OLMES, or ZeroEval (WildEval/ZeroEval)"),
    "omega::olmo3:adapt": ("accuracy (exact match)", "OLMES"),
    "livecodebench_codegeneration::olmo3:adapt": ("pass@1", "OLMES, or LiveCodeBench's own runner"),
    "alpaca_eval_v3::olmo3:adapt": (
        "length-controlled win rate, GPT-4.1 annotator", "OLMES, or alpaca_eval with an OpenAI API key",
    ),
}
# Short names, so that `--tasks popqa` says where to run it instead of "unknown task".
_NOT_IN_LM_EVAL = {
    "popqa": "popqa::olmo3:adapt", "simpleqa": "simpleqa::olmo3:adapt", "zebralogic": "zebralogic::olmo3:adapt",
    "omega": "omega::olmo3:adapt", "livecodebench": "livecodebench_codegeneration::olmo3:adapt",
    "alpaca_eval": "alpaca_eval_v3::olmo3:adapt",
}


def _known() -> str:
    return ", ".join([*TASK_GROUPS, *POLICY_TASKS])


def parse_tasks(spec: str | Sequence[str]) -> list[str]:
    """Task names from "ifeval,gsm8k" or a group ("olmo3_adapt"); order kept, duplicates dropped.

    Unknown names are an ``InputError``; an OLMo 3 Adapt task that lm-eval lacks says what runs it.
    """
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    out: list[str] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name in _NOT_IN_LM_EVAL:
            olmes = _NOT_IN_LM_EVAL[name]
            raise InputError(
                f"'{name}' ({olmes}) has no lm-eval task: run it with {OLMO3_ADAPT_NOT_IN_LM_EVAL[olmes][1]} "
                "(see docs/POLICY_EVAL.md)"
            )
        members = TASK_GROUPS.get(name, (name,))
        for member in members:
            if member not in POLICY_TASKS:
                raise InputError(f"unknown policy task '{name}' (known: {_known()})")
            if member not in out:
                out.append(member)
    if not out:
        raise InputError(f"no policy task given (known: {_known()})")
    return out
