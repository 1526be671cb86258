"""A ``grpo:`` setting, or the installed TRL's own default when the config leaves it out (config.grpo_setting)."""

from __future__ import annotations

import dataclasses

import pytest

from evolm.config import grpo_setting, trl_default


def _trl_fields() -> dict[str, dataclasses.Field]:
    from trl import GRPOConfig

    return {f.name: f for f in dataclasses.fields(GRPOConfig)}


@pytest.mark.parametrize("key", ["per_device_train_batch_size", "use_vllm", "vllm_mode", "vllm_gpu_memory_utilization",
                                 "vllm_importance_sampling_mode", "vllm_importance_sampling_clip_max", "beta", "top_p",
                                 "temperature", "ddp_timeout", "gradient_checkpointing", "max_completion_length",
                                 "save_total_limit", "use_bias_correction_kl"])
def test_an_unset_key_is_trls_own_dataclass_default(key: str) -> None:
    assert grpo_setting({}, key) == trl_default(key) == _trl_fields()[key].default


def test_a_set_key_wins_null_included() -> None:
    assert grpo_setting({"per_device_train_batch_size": 2}, "per_device_train_batch_size") == 2
    assert grpo_setting({"max_completion_length": None}, "max_completion_length") is None  # TRL is handed None too


def test_a_default_factory_is_called_anew_and_an_unknown_key_refused() -> None:
    fresh = trl_default("include_for_metrics")  # the one field of TRL 1.16 with a default_factory
    assert fresh == _trl_fields()["include_for_metrics"].default_factory()
    fresh.append("changed")
    assert trl_default("include_for_metrics") != fresh
    with pytest.raises(KeyError):
        grpo_setting({}, "vllm_modee")


def test_importance_sampling_rule_reads_trls_defaults_and_its_deprecated_cap() -> None:
    from evolm.training.grpo_config import importance_sampling_rule

    assert "sequence" in importance_sampling_rule({"use_vllm": True}) and "set to 0" in importance_sampling_rule(
        {"use_vllm": True})  # TRL's default: sequence_mask, [0, 3.0]
    assert f"[0, {trl_default('vllm_importance_sampling_clip_max')}]" in importance_sampling_rule({"use_vllm": True})
    assert importance_sampling_rule({"use_vllm": False}).startswith("none")
    # TRL's __post_init__: a set vllm_importance_sampling_cap replaces clip_max
    both = {"use_vllm": True, "vllm_importance_sampling_cap": 5.0, "vllm_importance_sampling_clip_max": 2.0}
    assert "[0, 5.0]" in importance_sampling_rule(both)
