"""Run configuration: YAML + dotted overrides, type coercion, validation, the shipped configs."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from evolm.config import (
    JudgeConfig,
    RunConfig,
    ScheduleConfig,
    describe,
    leaves,
    load_config,
    to_dict,
)
from evolm.errors import InputError
from evolm.runs.rundir import save_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "run.yaml"
    p.write_text(text, encoding="utf-8")
    return p


# ----------------------------------------------------------------------------- loading and overrides


def test_defaults_are_the_paper_values() -> None:
    cfg = load_config()
    assert (cfg.schedule.cycles, cfg.schedule.steps_per_phase) == (10, 50)
    assert (cfg.schedule.prompts_per_step, cfg.schedule.samples_per_prompt) == (64, 8)
    assert (cfg.contrast.min_age, cfg.contrast.max_age, cfg.contrast.buffer_size) == (20, 100, 2048)
    assert cfg.judge.model == "Qwen/Qwen3-1.7B"
    assert cfg.grpo["learning_rate"] == 1e-6 and cfg.grpo["beta"] == 0.001


def test_yaml_and_dotted_overrides_with_types(tmp_path: Path) -> None:
    path = write(tmp_path, "seed: 3\nschedule:\n  cycles: 4\njudge:\n  mode: yesno\n")
    cfg = load_config(path, ["schedule.steps_per_phase=7", "judge.temperature=1", "contrast.min_age=0",
                             "model.chat_template_kwargs={enable_thinking: false}", "rubric.writer=null",
                             "judge.extra_models=[a, b]", "output_dir=runs/x"])
    assert cfg.seed == 3
    assert cfg.schedule.cycles == 4 and cfg.schedule.steps_per_phase == 7
    assert isinstance(cfg.schedule.steps_per_phase, int)
    assert cfg.judge.mode == "yesno"
    assert cfg.judge.temperature == 1.0 and isinstance(cfg.judge.temperature, float)  # int -> float
    assert cfg.contrast.min_age == 0
    assert cfg.model.chat_template_kwargs == {"enable_thinking": False}
    assert cfg.rubric.writer is None
    assert cfg.judge.extra_models == ["a", "b"]
    assert cfg.output_dir == "runs/x"
    assert cfg.schedule.prompts_per_step == 64  # untouched fields keep their defaults


def test_override_beats_the_yaml(tmp_path: Path) -> None:
    path = write(tmp_path, "schedule:\n  cycles: 4\n")
    assert load_config(path, ["schedule.cycles=2"]).schedule.cycles == 2


def test_exponent_numbers_are_numbers(tmp_path: Path) -> None:
    """PyYAML (YAML 1.1) reads ``1e-6`` as a string; a learning rate must still be a float."""
    path = write(tmp_path, "grpo:\n  learning_rate: 3e-6\njudge:\n  temperature: 5e-1\n")
    cfg = load_config(path, ["grpo.beta=1e-2", "schedule.cycles=2e1"])
    assert cfg.grpo["learning_rate"] == 3e-6 and isinstance(cfg.grpo["learning_rate"], float)
    assert cfg.grpo["beta"] == 0.01
    assert cfg.judge.temperature == 0.5
    assert cfg.schedule.cycles == 20 and isinstance(cfg.schedule.cycles, int)
    assert load_config(None, ["grpo.vllm_mode=colocate"]).grpo["vllm_mode"] == "colocate"  # text stays text


def test_text_settings_keep_the_text_typed() -> None:
    cfg = load_config(None, ["model.system_prompt=yes", "output_dir=2024", "model.name=1.5", "rubric.writer=gpt-4.1",
                             "schedule.regime=frozen_rubric"])
    assert cfg.model.system_prompt == "yes"  # not YAML's True
    assert cfg.output_dir == "2024"
    assert cfg.model.name == "1.5"
    assert cfg.rubric.writer == "gpt-4.1"


def test_grpo_overrides_merge_with_the_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "grpo:\n  beta: 0.04\n")
    cfg = load_config(path, ["grpo.use_vllm=false", "grpo.loss_type=dr_grpo"])
    assert cfg.grpo["beta"] == 0.04
    assert cfg.grpo["use_vllm"] is False
    assert cfg.grpo["loss_type"] == "dr_grpo"
    assert cfg.grpo["epsilon"] == 0.2 and cfg.grpo["top_p"] == 0.95  # defaults kept


@pytest.mark.parametrize(("override", "named"), [
    ("schedule.cyclez=3", "schedule.cyclez"),
    ("judgee.mode=prob", "judgee"),
    ("contrast.window=3", "contrast.window"),
])
def test_unknown_key_is_named(override: str, named: str) -> None:
    with pytest.raises(InputError, match=f"unknown setting '{named}'"):
        load_config(None, [override])


def test_unknown_key_in_yaml_is_named(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown setting 'model.nmae'"):
        load_config(write(tmp_path, "model:\n  nmae: x\n"))


@pytest.mark.parametrize(("override", "message"), [
    ("schedule.cycles=two", "'schedule.cycles' must be int, got 'two'"),
    ("schedule.cycles=2.5", "'schedule.cycles' must be an integer, got 2.5"),
    ("schedule.cycles=true", "'schedule.cycles' must be int, got True"),
    ("judge.temperature=hot", "'judge.temperature' must be float, got 'hot'"),
    ("model.chat_template_kwargs=5", "'model.chat_template_kwargs' must be dict, got 5"),
    ("judge.extra_models=x", "'judge.extra_models' must be list, got 'x'"),
    ("model=3", "'model' must be a mapping"),
    ("seed.x=1", "'seed' must be int, got {'x': 1}"),
    ("schedule.cycles", "must look like section.key=value"),
    ("=3", "must look like section.key=value"),
])
def test_bad_values_are_input_errors(override: str, message: str) -> None:
    with pytest.raises(InputError) as e:
        load_config(None, [override])
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such config file"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(InputError, match="not valid YAML"):
        load_config(write(tmp_path, "schedule: [unclosed\n"))
    with pytest.raises(InputError, match="must be a mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))
    assert load_config(write(tmp_path, "")) == load_config()  # an empty file is the defaults
    with pytest.raises(InputError, match="override 'seed.x=1': 'seed' is not a section"):
        load_config(write(tmp_path, "seed: 1\n"), ["seed.x=1"])


@pytest.mark.parametrize("key", ["num_generations", "max_steps", "output_dir", "save_steps", "seed",
                                 "gradient_accumulation_steps", "shuffle_dataset"])
def test_reserved_grpo_keys_are_rejected(key: str) -> None:
    with pytest.raises(InputError, match=f"grpo.{key} is set by evolm"):
        load_config(None, [f"grpo.{key}=1"])


@pytest.mark.parametrize(("override", "message"), [
    ("schedule.regime=alternate",
     "schedule.regime must be one of coevolve, sequential, frozen_rubric, judge_only, rubric_only, not 'alternate'"),
    ("contrast.pairs=random", "contrast.pairs must be one of"),
    ("rubric.reward=margin", "rubric.reward must be one of binary, margin_format, separation, not 'margin'"),
    ("judge.mode=pairwise", "judge.mode must be one of generative, prob, yesno"),
    ("judge.backend=tgi", "judge.backend must be one of hf, openai, vllm, not 'tgi'"),
    ("judge.aggregate=max", "judge.aggregate must be one of majority_vote, average_vote, margin_kappa_format, mean"),
    ("judge.dtype=fp8", "judge.dtype must be one of auto, float32, bfloat16, float16, not 'fp8'"),
    ("model.dtype=half", "model.dtype must be one of auto, float32, bfloat16, float16, not 'half'"),
    ("schedule.cycles=0", "schedule.cycles must be >= 1, not 0"),
    ("schedule.steps_per_phase=0", "schedule.steps_per_phase must be >= 1, not 0"),
    ("schedule.prompts_per_step=0", "schedule.prompts_per_step must be >= 1"),
    ("schedule.samples_per_prompt=1", "schedule.samples_per_prompt must be >= 2"),
    ("contrast.min_age=101", "contrast.min_age must be >= 0 and <= contrast.max_age"),
    ("contrast.min_age=-1", "contrast.min_age must be >= 0"),
    ("contrast.buffer_size=0", "contrast.buffer_size must be >= 1"),
    ("schedule.save_every=0", "schedule.save_every must be >= 1"),
    ("contrast.combined_weights={temporal: 1, tempral: 1}", "keys must be among temporal, rubric_conditioned, "
                                                             "inferred_question, not tempral"),
    ("contrast.combined_weights={temporal: -1}", "must be numbers >= 0"),
])
def test_validate_messages(override: str, message: str) -> None:
    with pytest.raises(InputError) as e:
        load_config(None, [override])
    assert message in str(e.value)


def test_combined_needs_a_positive_weight() -> None:
    with pytest.raises(InputError, match="at least one > 0"):
        load_config(None, ["contrast.pairs=combined", "contrast.combined_weights={temporal: 0}"])
    cfg = load_config(None, ["contrast.pairs=combined", "contrast.combined_weights={inferred_question: 1}"])
    assert cfg.contrast.combined_weights == {"inferred_question": 1}
    load_config(None, ["contrast.combined_weights={temporal: 0}"])  # unused unless pairs=combined


def test_validation_runs_on_direct_construction() -> None:
    """Settings built in Python are checked as a config file is: pydantic's own error there, one line from input."""
    with pytest.raises(ValidationError, match="samples_per_prompt"):
        RunConfig(schedule=ScheduleConfig(samples_per_prompt=1))
    hint = r" \(GRPO compares the samples of a group\)$"  # the field's hint: why the bound
    with pytest.raises(InputError, match=r"^schedule.samples_per_prompt must be >= 2, not 1" + hint):
        RunConfig.checked({"schedule": {"samples_per_prompt": 1}})


def test_total_steps_per_regime() -> None:
    base = ["schedule.cycles=3", "schedule.steps_per_phase=5"]
    assert load_config(None, base).total_steps == 30
    assert load_config(None, [*base, "schedule.regime=sequential"]).total_steps == 30
    assert load_config(None, [*base, "schedule.regime=frozen_rubric"]).total_steps == 15


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    cfg = load_config(CONFIGS / "demo-cpu.yaml", ["schedule.cycles=3", "model.chat_template_kwargs={a: 1}"])
    save_config(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg
    assert to_dict(load_config(tmp_path / "config.yaml")) == to_dict(cfg)


def test_defaults_are_not_shared_between_configs() -> None:
    a, b = RunConfig(), RunConfig()
    a.grpo["beta"] = 0.5
    a.contrast.combined_weights["temporal"] = 0.0
    assert b.grpo["beta"] == 0.001
    assert b.contrast.combined_weights["temporal"] == 0.5


# ----------------------------------------------------------------------------- describe


def test_describe_lists_every_setting_with_its_help() -> None:
    text = describe()
    settings = leaves(RunConfig)  # nested sections at any depth (model.lora.r)
    assert len(settings) > 40 and "model.lora.r" in dict(settings)
    for key, field in settings:
        assert f"  {key} (default " in text, key
        assert field.description, key
    assert "schedule.cycles (default 10)\n      number of cycles (paper: 10)" in text
    assert "grpo (default '{...}')" in text


# ----------------------------------------------------------------------------- the shipped configs


def test_demo_config_loads() -> None:
    cfg = load_config(CONFIGS / "demo-cpu.yaml")
    assert cfg.model.name == "smollm2-135m-instruct"
    assert cfg.schedule.regime == "coevolve"
    assert cfg.grpo["use_vllm"] is False and cfg.grpo["use_cpu"] is True
    rows = cfg.schedule.prompts_per_step * cfg.schedule.samples_per_prompt
    assert rows % cfg.grpo["per_device_train_batch_size"] == 0


def test_paper_config_has_the_spec_values() -> None:
    cfg = load_config(CONFIGS / "paper-qwen3-8b.yaml")
    s, c, g = cfg.schedule, cfg.contrast, cfg.grpo
    assert cfg.model.name == "Qwen/Qwen3-8B"
    assert cfg.judge.model == "Qwen/Qwen3-1.7B"
    assert (s.regime, s.cycles, s.steps_per_phase) == ("coevolve", 10, 50)
    assert (s.prompts_per_step, s.samples_per_prompt, s.save_every) == (64, 8, 25)
    assert cfg.total_steps == 1000
    assert g["learning_rate"] == 1e-6 and isinstance(g["learning_rate"], float)
    assert g["lr_scheduler_type"] == "constant"
    assert g["beta"] == 0.001 and g["epsilon"] == 0.2
    assert g["temperature"] == 1.0 and g["top_p"] == 0.95
    assert g["max_completion_length"] == 16384
    assert g["use_vllm"] is True
    assert (c.pairs, c.min_age, c.max_age, c.buffer_size) == ("temporal", 20, 100, 2048)
    assert c.temperature == 1.0
    assert cfg.rubric.reward == "margin_format" and cfg.rubric.temperature == 0.6
    assert (cfg.judge.temperature, cfg.judge.top_p) == (0.6, 0.95)
    # thinking on in every role, as the authors ran Qwen3; the judge may think for up to 16k tokens
    assert cfg.model.chat_template_kwargs == cfg.judge.chat_template_kwargs == {"enable_thinking": True}
    assert cfg.judge.max_new_tokens == 16384 and cfg.judge.mode == "generative"
    assert g["loss_type"] == "grpo"  # masked mean per sequence, then mean (the reference's normalisation)
    assert cfg.rubric.invalid == "judge_raw" and cfg.judge.aggregate == "majority_vote"
    # the authors' judge: their prompt, no extra defences, their reading of the reply; their IS rule and plain k3 KL
    assert (cfg.judge.prompt, cfg.judge.defences, cfg.judge.parse) == ("reference", False, "reference")
    assert (g["vllm_importance_sampling_mode"], g["vllm_importance_sampling_clip_max"]) == ("token_truncate", 2.0)
    assert g["use_bias_correction_kl"] is False


def test_judge_defences_are_on_outside_the_paper_config() -> None:
    """Only the paper config (and the baselines that extend it) runs the authors' prompt without the defences."""
    assert (JudgeConfig().prompt, JudgeConfig().defences, JudgeConfig().parse) == ("evolm", True, "evolm")
    for path in CONFIGS.rglob("*.yaml"):
        if path.name.startswith("accelerate"):
            continue
        text = path.read_text(encoding="utf-8")
        paper = path.name == "paper-qwen3-8b.yaml" or "extends: ../paper-qwen3-8b.yaml" in text
        assert load_config(path).judge.defences is not paper, path


@pytest.mark.parametrize(("override", "message"), [
    ("schedule.cycles=1e400", "'schedule.cycles' must be a finite number"),
    ("judge.temperature=.nan", "'judge.temperature' must be a finite number"),
    ("seed=-1", "seed must be >= 0"),
    ("data.limit=-5", "data.limit must be >= 0"),
    ("output_dir=", "output_dir must name a directory"),
    ("judge.top_p=7", "judge.top_p must be in (0, 1]"),
    ("rubric.max_new_tokens=-3", "rubric.max_new_tokens must be >= 1"),
    ("contrast.max_new_tokens=0", "contrast.max_new_tokens must be >= 1"),
    ("judge.batch_size=0", "judge.batch_size must be >= 1"),
])
def test_out_of_range_settings_are_one_line_errors(override: str, message: str) -> None:
    with pytest.raises(InputError) as e:
        load_config(None, [override])
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(("override", "message"), [
    ("model.lora.dropout=1", "model.lora.dropout must be in [0, 1), not 1"),
    ("model.lora.alpha=0", "model.lora.alpha must be > 0, not 0"),
    ("judge.deadline=-1", "judge.deadline must be >= 0, not -1"),
    ("rubric.writer_timeout=0", "rubric.writer_timeout must be > 0, not 0"),
    ("rubric.writer_top_p=2", "rubric.writer_top_p must be in (0, 1], not 2"),
    ("rubric.max_criteria=7", "rubric.max_criteria must be >= 2 and <= 5, not 7"),
    ("eval.limit=-1", "eval.limit must be >= 0, not -1"),
    ("contrast.max_age=-1", "contrast.max_age must be >= 0, not -1"),
    ("schedule.samples_logged_per_step=-1", "schedule.samples_logged_per_step must be >= 0, not -1"),
])
def test_a_range_error_names_the_one_setting_its_bounds_and_its_value(override: str, message: str) -> None:
    """Every range is the field's own (``Field(ge=...)``), so the line names that setting alone, its bounds and the
    value given, at any depth; a setting that is only read in some runs (rubric.writer_*) is checked in all."""
    with pytest.raises(InputError) as e:
        load_config(None, [override])
    assert str(e.value) == message


def test_a_temporal_pairs_fresh_answer_gets_the_policy_answers_budget() -> None:
    """The fresh answer a+ of a temporal pair is compared with a stored policy answer a-: by default both have
    grpo.max_completion_length, and a shorter contrast budget (which cut every a+ and made the judge prefer the older
    answer) is refused; builders whose two answers are both fresh may use any budget."""
    from evolm.training.generate_calls import answer_params
    from evolm.training.plan import StepInfo

    cfg = load_config(None, ["grpo.max_completion_length=320"])
    assert cfg.contrast.max_new_tokens is None and cfg.pair_answer_tokens == 320
    assert answer_params(cfg, StepInfo(step=3, role="rubric", cycle=0, phase=1, policy_step=2)).max_new_tokens == 320
    for pairs in ("temporal", "combined"):
        with pytest.raises(InputError) as e:
            load_config(None, ["grpo.max_completion_length=320", "contrast.max_new_tokens=64", f"contrast.pairs={pairs}"])
        assert "contrast.max_new_tokens (64) is below grpo.max_completion_length (320)" in str(e.value)
    assert load_config(None, ["grpo.max_completion_length=320", "contrast.max_new_tokens=64",
                              "contrast.pairs=rubric_conditioned"]).pair_answer_tokens == 64
    assert load_config(None, ["grpo.max_completion_length=320", "contrast.max_new_tokens=64", "contrast.pairs=combined",
                              "contrast.combined_weights={temporal: 0, rubric_conditioned: 1}"]).pair_answer_tokens == 64
    assert load_config(None, ["grpo.max_completion_length=320", "contrast.max_new_tokens=400"]).pair_answer_tokens == 400


def test_a_config_that_is_not_utf8_is_a_one_line_error(tmp_path: Path) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_bytes(b"seed: \xff\xfe\n")
    with pytest.raises(InputError, match="not UTF-8"):
        load_config(bad)


def test_extends_merges_onto_the_base_config(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text("seed: 3\njudge:\n  mode: prob\n  batch_size: 4\n")
    (tmp_path / "child.yaml").write_text("extends: base.yaml\njudge:\n  mode: yesno\n")
    cfg = load_config(tmp_path / "child.yaml")
    assert (cfg.seed, cfg.judge.mode, cfg.judge.batch_size) == (3, "yesno", 4)
    (tmp_path / "loop.yaml").write_text("extends: loop.yaml\n")
    with pytest.raises(InputError, match="loops back"):
        load_config(tmp_path / "loop.yaml")


def test_a_retired_setting_at_its_old_default_still_loads() -> None:
    """A saved run's config.yaml from before rubric.with_answers was removed resumes; asking for it is an error."""
    from evolm.config import load_config
    from evolm.errors import InputError

    assert not hasattr(load_config(None, ["rubric.with_answers=false"]).rubric, "with_answers")
    with pytest.raises(InputError, match="'rubric.with_answers' is no longer a setting: the one-pass"):
        load_config(None, ["rubric.with_answers=true"])


def test_policy_budget_without_max_completion_length_is_trls_own():
    """A grpo mapping without max_completion_length leaves TRL's default in force: the budget evolm assumes for the
    policy's answers (the replay buffer's a-, the dry run, the memory estimate) is that default, read from the
    installed TRL (null reads as unset)."""
    import dataclasses

    from trl import GRPOConfig

    from evolm.config import RunConfig

    trl_default = next(f.default for f in dataclasses.fields(GRPOConfig) if f.name == "max_completion_length")
    cfg = RunConfig(grpo={"learning_rate": 1e-5})
    assert cfg.policy_tokens == cfg.pair_answer_tokens == trl_default
    assert RunConfig(grpo={"max_completion_length": None}).policy_tokens == trl_default
    assert RunConfig().policy_tokens == 16384  # the paper config sets it
