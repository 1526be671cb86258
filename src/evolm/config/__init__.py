"""Every setting of a run: ``settings`` (the names a setting may take, the ``Settings`` base), ``schema`` and
``judge_settings`` (the pydantic models: types, choices, ranges and the checks that span settings;
``grpo_values`` a ``grpo`` setting or TRL's own default, and the ranges of the ``grpo`` numbers; ``messages`` the one
line an error becomes) and ``loading`` (YAML, ``extends:``, dotted overrides)."""

from evolm.config.grpo_values import grpo_setting, grpo_value_errors, trl_default
from evolm.config.judge_settings import JudgeConfig
from evolm.config.loading import RETIRED, describe, load_config, to_dict
from evolm.config.schema import (
    ContrastConfig,
    DataConfig,
    EvalConfig,
    LoRAConfig,
    ModelConfig,
    RewardsConfig,
    RubricConfig,
    RunConfig,
    ScheduleConfig,
)
from evolm.config.settings import (
    BACKENDS,
    DTYPES,
    EVOLM_GRPO_KEYS,
    INVALID_RUBRICS,
    JUDGE_MODES,
    JUDGE_PARSERS,
    JUDGE_PROMPTS,
    JUDGE_SEEDS,
    MONITOR_ACTIONS,
    MULTI_JUDGE,
    OVERLONG,
    PAIR_BUILDERS,
    PAIR_MODES,
    REGIMES,
    REWARD_MODEL_MODE,
    REWARD_MODEL_READINGS,
    RUBRIC_PROMPTS,
    RUBRIC_REWARDS,
    SCORER_MODES,
    WRITER_REGIMES,
    leaves,
)
from evolm.config.values import endpoint_urls, extra_reward_problems, url_error

__all__ = [
    "BACKENDS", "DTYPES", "EVOLM_GRPO_KEYS", "INVALID_RUBRICS", "JUDGE_MODES", "JUDGE_PARSERS", "JUDGE_PROMPTS",
    "JUDGE_SEEDS", "MONITOR_ACTIONS", "MULTI_JUDGE", "OVERLONG", "PAIR_BUILDERS", "PAIR_MODES", "REGIMES", "RETIRED",
    "REWARD_MODEL_MODE", "REWARD_MODEL_READINGS", "RUBRIC_PROMPTS", "RUBRIC_REWARDS", "SCORER_MODES",
    "WRITER_REGIMES",
    "ContrastConfig", "DataConfig", "EvalConfig", "JudgeConfig", "LoRAConfig", "ModelConfig", "RewardsConfig",
    "RubricConfig", "RunConfig", "ScheduleConfig", "describe", "endpoint_urls", "extra_reward_problems",
    "grpo_setting", "grpo_value_errors", "leaves", "load_config", "to_dict", "trl_default",
    "url_error",
]
