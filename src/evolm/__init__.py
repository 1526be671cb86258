"""EvoLM: one model writes rubrics and answers questions; a small frozen judge scores answers
against the rubrics; both roles are trained with GRPO and co-evolve.

The names below are the public API; everything else is private to its module.
"""

from evolm.backends.base import Backend, Conversation, SamplingParams
from evolm.backends.loading import load_backend, load_model
from evolm.backends.replies import strip_thinking
from evolm.errors import BackendError, EvolmError, InputError, ModelError, RunError
from evolm.integrations.trl import make_trl_reward
from evolm.judge.judge import JUDGE_MODES, Judge, JudgeItem, score_with_judges
from evolm.rewards import fill_missing_with_group_mean, fleiss_kappa, majority_prefers, policy_reward, rubric_reward
from evolm.rubrics import (
    Criterion,
    Rubric,
    WrittenRubric,
    format_validity,
    parse_rubric,
    render_rubric,
    rubric_messages,
    write_rubrics,
)
from evolm.scores import CriterionScore, Judgment, aggregate_scores, scores_of

__all__ = [
    "Backend", "BackendError", "Conversation", "Criterion", "CriterionScore", "EvolmError", "InputError", "JUDGE_MODES",
    "Judge", "JudgeItem", "Judgment", "ModelError", "Rubric", "RunError", "SamplingParams", "WrittenRubric",
    "aggregate_scores", "fill_missing_with_group_mean", "fleiss_kappa", "format_validity", "load_backend", "load_model",
    "majority_prefers", "make_trl_reward", "parse_rubric", "policy_reward", "render_rubric", "rubric_messages",
    "rubric_reward", "score_with_judges", "scores_of", "strip_thinking", "write_rubrics",
]
__version__ = "0.1.0"
