"""The ground of every settings model: the names a setting may take, ``setting`` (a field with its help), the
``Settings`` base (strict, one-line errors) and ``leaves`` (every setting by its dotted key)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo

from evolm.config.messages import error_line, kinds
from evolm.errors import InputError
from evolm.rewards import MULTI_JUDGE, RUBRIC_REWARDS  # noqa: F401 - the choices are the maths the ground floor computes

# ============================================================================= the names a setting may take
# Settings know no concept module: the choices a setting is validated against are listed here, and the modules that
# act on them (judge, rewards, contrast, models, ...) import them from here, never the reverse
# (tests/test_import_graph.py).

REGIMES = ("coevolve", "sequential", "frozen_rubric", "judge_only", "rubric_only")  # schedule.regime
WRITER_REGIMES = ("coevolve", "sequential", "rubric_only")  # the regimes with rubric steps (the writer is trained)
JUDGE_MODES = ("generative", "prob", "yesno", "likert", "rar_implicit", "rar_explicit",
               "listwise")  # judge.mode with a judge model
REWARD_MODEL_MODE = "reward_model"  # judge.mode: a scalar sequence-classification reward model instead of a judge
SCORER_MODES = (*JUDGE_MODES, REWARD_MODEL_MODE)  # every judge.mode
JUDGE_PROMPTS = ("evolm", "reference")  # judge.prompt: evolm's wording or the authors'
JUDGE_PARSERS = ("evolm", "reference", "rb2")  # judge.parse: how a generative reply is read
REWARD_MODEL_READINGS = ("evolm", "reference")  # judge.reward_model_reading
OVERLONG = ("truncate", "refuse")  # judge.overlong: what happens to a prompt longer than the judge's context
JUDGE_SEEDS = ("same", "per_row")  # judge.seeds: every sampled judge request gets the run's seed, or seed + its row
BACKENDS = ("hf", "openai", "vllm")  # where a model runs: in-process transformers, an OpenAI-compatible server, vLLM
DTYPES = ("auto", "float32", "bfloat16", "float16")  # the weight types a user can name (CLI, config)
RUBRIC_PROMPTS = ("v3", "older")  # rubric.prompt: v3 (the paper's: 2-5 criteria) or older (5-10 criteria)
INVALID_RUBRICS = ("judge_raw", "zero")  # rubric.invalid: what a rubric that does not parse gets
MONITOR_ACTIONS = ("report", "mask", "stop")  # rewards.monitor: what the reward-hacking monitor may do
PAIR_BUILDERS = ("temporal", "rubric_conditioned", "inferred_question")  # contrast.combined_weights keys
PAIR_MODES = (*PAIR_BUILDERS, "combined", "labelled")  # contrast.pairs: one builder, or a weighted mix of them


# The GRPOConfig keywords evolm sets itself (training.grpo_config.evolm_grpo_settings, which a test holds to this
# list): a run may not set them in grpo:, so one TRL generation batch stays one optimizer step of one role.
EVOLM_GRPO_KEYS = ("output_dir", "num_generations", "gradient_accumulation_steps", "steps_per_generation",
                   "generation_batch_size", "num_iterations", "max_steps", "shuffle_dataset", "remove_unused_columns",
                   "save_strategy", "save_steps", "logging_strategy", "logging_steps", "seed", "disable_tqdm",
                   "chat_template_kwargs")


def setting(default: Any, help: str, hint: str = "", **constraints: Any) -> Any:  # noqa: A002
    """A setting: its default (pydantic copies a mutable one per instance), its help (the ``--help`` text of a flag
    made from it), its range (``ge=1``) and what an error for a value out of range adds (``hint``: why the bound, or
    what 0 means)."""
    return Field(default, description=help, json_schema_extra={"hint": hint} if hint else None, **constraints)


class Settings(BaseModel):
    """A group of settings, checked by pydantic when built. ``checked`` builds them from user input (a mapping read
    from YAML, flags): a wrong setting is then an ``InputError`` of one line naming it."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)

    @classmethod
    def checked(cls, data: Any) -> Any:
        """``data``, a mapping, as these settings, or an ``InputError`` naming the first wrong setting."""
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            raise InputError(error_line(e, cls)) from None

    @field_validator("*", mode="before")
    @classmethod
    def _whole_number(cls, value: Any, info: ValidationInfo) -> Any:
        """A whole float sets an integer setting (YAML reads ``2e1`` as 20.0; strict mode takes no float for an
        int), a fraction stays an error."""
        whole = isinstance(value, float) and value.is_integer()
        return int(value) if whole and int in kinds(cls.model_fields[info.field_name].annotation) else value


def leaves(model: type[BaseModel], prefix: str = "") -> list[tuple[str, FieldInfo]]:
    """Every setting of ``model`` as ``(dotted key, field)``, in declaration order, sections flattened."""
    out: list[tuple[str, FieldInfo]] = []
    for name, field in model.model_fields.items():
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            out += leaves(field.annotation, f"{prefix}{name}.")
        else:
            out.append((f"{prefix}{name}", field))
    return out


def first_failed(checks: list[tuple[bool, str]]) -> None:
    """Raise the message of the first failed check (pydantic reports it as the model's error)."""
    for ok, message in checks:
        if not ok:
            raise ValueError(message)
