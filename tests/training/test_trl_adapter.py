"""The TRL adapter's contract, checked against the installed TRL, and the code-shape rules it exists for."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from evolm.config import EVOLM_GRPO_KEYS, load_config
from evolm.errors import InputError, RunError
from evolm.scores import scores_of
from evolm.training import trl_adapter
from evolm.training.grpo_config import evolm_grpo_settings
from evolm.training.trl_generation import TrainerGenerate, VLLMCounts, count_vllm_calls

SRC = Path(__file__).resolve().parents[2] / "src" / "evolm"


def test_contract_holds_for_the_installed_trl() -> None:
    import trl

    assert trl_adapter.check_trl() == trl.__version__
    assert ".".join(trl.__version__.split(".")[:2]) in trl_adapter.TESTED_TRL


def test_an_untested_trl_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import trl

    monkeypatch.setattr(trl, "__version__", "9.9.0")
    with pytest.raises(RunError, match=r"tested with trl .* not 9\.9\.0") as e:
        trl_adapter.check_trl()
    assert "\n" not in str(e.value)


def test_a_changed_hook_signature_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    from trl import GRPOTrainer

    def training_step(self, inputs, model):  # noqa: ANN001, ANN202 - arguments swapped, as an upgrade might
        return None

    monkeypatch.setattr(GRPOTrainer, "training_step", training_step)
    with pytest.raises(RunError, match="GRPOTrainer.training_step"):
        trl_adapter.check_trl()


def test_every_evolm_grpo_setting_is_a_grpo_config_field_and_reserved() -> None:
    import dataclasses

    from trl import GRPOConfig

    cfg = load_config(None, [])
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert set(evolm_grpo_settings(cfg)) <= fields
    assert set(evolm_grpo_settings(cfg)) == set(EVOLM_GRPO_KEYS)  # the config's list of reserved keys is the code's
    for key in set(evolm_grpo_settings(cfg)) - {"num_iterations"}:  # reserved: every key the code sets
        with pytest.raises(InputError, match=f"grpo.{key} is set by evolm") as e:
            load_config(None, [f"grpo.{key}=1"])
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("override", ["grpo.save_strategy=steps", "grpo.disable_tqdm=true",
                                      "grpo.chat_template_kwargs={}", "grpo.num_iterations=2"])
def test_settings_evolm_owns_give_one_line_errors(override: str) -> None:
    with pytest.raises(InputError) as e:
        load_config(None, [override])
    assert override.split("=")[0] in str(e.value) and "\n" not in str(e.value)


def test_num_iterations_may_only_be_one() -> None:
    assert load_config(None, ["grpo.num_iterations=1"]).grpo["num_iterations"] == 1  # as the paper config writes it
    with pytest.raises(InputError, match="num_iterations must be 1"):
        load_config(None, ["grpo.num_iterations=2"])


def test_reward_refuses_rows_evolm_did_not_fill(tmp_path: Path) -> None:
    from evolm.training.contrast import ReplayBuffer
    from evolm.training.plan import Plan
    from evolm.training.step import TrainingSteps

    cfg = load_config(None, [f"output_dir={tmp_path}"])
    reward = TrainingSteps(cfg, Plan(cfg, ["q"]), ReplayBuffer(4), tmp_path)  # TRL's reward function
    with pytest.raises(RunError, match="did not materialise"):
        reward(prompts=["p"], completions=["c"], plan_index=[0])
    with pytest.raises(RunError, match="did not materialise"):
        reward(prompts=["p"], completions=["c"], plan_index=[0], role=[""])


# ----------------------------------------------------------------------------- the shape of the code

_PRIVATE_TRL = re.compile(r"\._generate_and_score_completions|_calculate_rewards|\._metrics\b|_last_loaded_step"
                          r"|vllm_generation|_llm_weights_sleeping")


def test_only_the_adapter_touches_trl_internals() -> None:
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                 if p.name not in ("trl_adapter.py", "trl_generation.py") and _PRIVATE_TRL.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


def test_the_loop_fits_on_a_few_screens() -> None:
    assert len((SRC / "training" / "run.py").read_text(encoding="utf-8").splitlines()) < 400


# ----------------------------------------------------------------------------- generation on TRL's vLLM engine


class _FakeVLLMGeneration:
    """Stands in for trl's VLLMGeneration (vLLM cannot run here): records what evolm hands it."""

    def __init__(self, tokenizer) -> None:  # noqa: ANN001
        self.temperature, self.top_p, self.max_completion_length = 1.0, 0.95, 16384
        self.tokenizer, self.calls, self.syncs = tokenizer, [], 0

    def sync_weights(self) -> None:
        self.syncs += 1

    def generate(self, prompts, images, num_generations, profiler=None):  # noqa: ANN001, ANN201
        self.calls.append((prompts, images, num_generations, self.temperature, self.top_p, self.max_completion_length))
        ids = [self.tokenizer.encode(f"reply {i}", add_special_tokens=False) for i in range(len(prompts))]
        return prompts, ids, None, None


def test_extra_text_goes_through_trl_vllm_generation(tiny_model_dir: Path) -> None:
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from evolm.backends.base import SamplingParams

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    vg = _FakeVLLMGeneration(tok)
    trainer = SimpleNamespace(
        args=SimpleNamespace(use_vllm=True, chat_template_kwargs=None), vllm_generation=vg, processing_class=tok,
        state=SimpleNamespace(global_step=3), _last_loaded_step=2,
        accelerator=SimpleNamespace(num_processes=1, process_index=0))
    generate = TrainerGenerate(trainer)
    convs = [[{"role": "user", "content": "What is 2 + 2?"}], [{"role": "user", "content": "Say yes."}]]
    out = generate(convs, SamplingParams(0.6, 0.9, 64))
    assert out == ["reply 0", "reply 1"]
    prompts, images, n, temperature, top_p, max_tokens = vg.calls[0]
    assert prompts[0] == tok.apply_chat_template(convs[0], tokenize=True, add_generation_prompt=True,
                                                 return_dict=False)
    assert (images, n, temperature, top_p, max_tokens) == (None, 1, 0.6, 0.9, 64)  # the call's own settings
    assert (vg.temperature, vg.top_p, vg.max_completion_length) == (1.0, 0.95, 16384)  # TRL's restored after
    assert vg.syncs == 1 and trainer._last_loaded_step == 3  # new weights synced once per step, as TRL does
    generate(convs, SamplingParams(0.6, 0.9, 64))
    assert vg.syncs == 1
    assert generate([], SamplingParams()) == [] and len(vg.calls) == 2


class _FakeLLM:
    """vLLM's ``LLM`` as TRL's colocate mode uses it, with the executor's sleep bookkeeping (vllm/v1/executor/
    abstract.py, 0.30): level 2 discards the weights, a wake-up of an awake tag is a no-op. Counts each weight push."""

    def __init__(self) -> None:
        self.sleeping: set[str] = set()
        self.weights_current, self.pushes, self.generated = False, 0, 0
        model = SimpleNamespace(load_weights=self._load)
        self.llm_engine = SimpleNamespace(is_sleeping=lambda: bool(self.sleeping), model_executor=SimpleNamespace(
            driver_worker=SimpleNamespace(model_runner=SimpleNamespace(model=model))))

    def sleep(self, level: int = 1) -> None:
        if not self.sleeping:
            self.sleeping, self.weights_current = {"weights", "kv_cache"}, level < 2

    def wake_up(self, tags: list[str] | None = None) -> None:
        if self.sleeping and all(t in self.sleeping for t in tags or []):
            self.sleeping -= set(tags or self.sleeping)

    def _load(self, weights: list) -> None:
        assert "weights" not in self.sleeping
        self.pushes += sum(name == "weight" for name, _ in weights)
        self.weights_current = True

    def reset_prefix_cache(self) -> None:
        pass

    def generate(self, prompts: list, sampling_params: Any = None, use_tqdm: bool = False) -> list:
        assert not self.sleeping and self.weights_current, "generating on a sleeping engine or stale weights"
        self.generated += 1
        token = SimpleNamespace(logprob=-1.0, rank=1)
        return [SimpleNamespace(prompt_token_ids=p["prompt_token_ids"],
                                outputs=[SimpleNamespace(token_ids=[5, 6], logprobs=[{5: token}, {6: token}])])
                for p in prompts]


def _colocated_sleeping_vllm(monkeypatch: pytest.MonkeyPatch, tokenizer: Any) -> tuple[Any, Any, _FakeLLM]:
    """(trainer, its VLLMGeneration, the fake engine): TRL's own VLLMGeneration and _generate_single_turn, colocate
    mode, sleep mode on (level 2, as TRL sets it), over a model of one parameter named ``weight``."""
    import torch
    from trl import GRPOTrainer
    from trl.generation import vllm_generation

    llm = _FakeLLM()

    def init_vllm(self) -> None:  # noqa: ANN001 - TRL's _init_vllm, colocate, with the engine faked
        self.llm = llm
        if self.enable_sleep_mode:
            self.llm.sleep(level=2)
        self._llm_weights_sleeping = self.enable_sleep_mode

    monkeypatch.setattr(vllm_generation.VLLMGeneration, "_init_vllm", init_vllm)
    monkeypatch.setattr(vllm_generation, "SamplingParams", lambda **kw: kw, raising=False)  # vLLM is not installed
    accelerator = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=None, fsdp_plugin=None), num_processes=1,
                                  process_index=0, local_process_index=0, is_main_process=True,
                                  device=torch.device("cpu"))
    model = torch.nn.Module()
    model.weight = torch.nn.Parameter(torch.zeros(2))
    vg = vllm_generation.VLLMGeneration(model, accelerator, tokenizer, mode="colocate", enable_sleep_mode=True)
    trainer = SimpleNamespace(
        args=SimpleNamespace(use_vllm=True, chat_template_kwargs=None, report_to=[]), use_vllm=True,
        vllm_generation=vg, processing_class=tokenizer, state=SimpleNamespace(global_step=0), _last_loaded_step=-1,
        accelerator=accelerator)
    trainer.trl_generate = lambda ids: GRPOTrainer._generate_single_turn(trainer, ids, None, {}, 1)
    return trainer, vg, llm


def test_one_weight_sync_per_step_with_sleeping_colocated_vllm(tiny_model_dir: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Sleep level 2 discards vLLM's weights, and TRL's generate re-pushes them whenever they sleep: a policy step
    (rubrics, then TRL's answers) and a rubric step (fresh answers, rubric-conditioned rubrics and answers, then
    TRL's rubrics) would each push every weight once per call. evolm keeps the engine awake from its first call of
    a step through TRL's, which sleeps it: one push per step, and the counts reach the step's metrics."""
    from transformers import AutoTokenizer

    from evolm.backends.base import SamplingParams

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    trainer, vg, llm = _colocated_sleeping_vllm(monkeypatch, tok)
    counts = VLLMCounts()
    count_vllm_calls(vg, counts)
    generate = TrainerGenerate(trainer)
    convs = [[{"role": "user", "content": "What is 2 + 2?"}]]
    ids = [tok.apply_chat_template(convs[0], tokenize=True, add_generation_prompt=True, return_dict=False)]
    pushes = []
    for step, evolm_calls in enumerate([1, 3]):  # a policy step, then a rubric step
        trainer.state.global_step = step
        before = llm.pushes
        with generate.materialising():  # as TrainingSteps.materialise makes the step's rows
            for _ in range(evolm_calls):
                generate(convs, SamplingParams(0.6, 0.9, 8))
        trainer.trl_generate(ids)  # TRL's own generation of the step
        pushes.append(llm.pushes - before)
        assert llm.sleeping == {"weights", "kv_cache"}  # asleep for the update, as TRL leaves it
        assert counts.take() == {"vllm_weight_syncs": 1.0, "vllm_generate_calls": evolm_calls + 1.0}
    assert pushes == [1, 1] and llm.generated == 6
    assert vg.enable_sleep_mode  # TRL's setting, restored after each of evolm's calls


@pytest.mark.parametrize(("override", "message"), [
    ("grpo.learning_rat=1e-5", "grpo.learning_rat is not a TRL GRPOConfig setting"),
    ("grpo.learning_rate=fast", "grpo.learning_rate must be a number"),
    ("grpo.use_vllm=maybe", "grpo.use_vllm must be true or false"),
    ("grpo.per_device_train_batch_size=3", "must be a multiple of grpo.per_device_train_batch_size"),
])
def test_launch_problems_are_refused_before_any_model_loads(tmp_path: Path, override: str, message: str) -> None:
    from evolm.training.run import run

    cfg = load_config(None, [f"output_dir={tmp_path / 'r'}", "model.name=/nonexistent/model", override])
    with pytest.raises(InputError, match=re.escape(message)):
        run(cfg)  # a model load would fail differently: the check comes first
    assert not (tmp_path / "r").exists()  # and nothing was written


# ----------------------------------------------------------------------------- the policy loads after its GRPOConfig


def test_the_policy_loads_after_its_training_arguments(tiny_model_dir: Path, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ZeRO-3, ``GRPOConfig`` registers DeepSpeed's config with transformers; only a policy loaded after it
    is built under ``deepspeed.zero.Init`` (a shard per process) instead of whole on every GPU and in host memory."""
    import trl
    from tiny_run import tiny_config

    from evolm.backends import loading as models
    from evolm.training.run import run

    order: list[str] = []

    class RecordedConfig(trl.GRPOConfig):
        def __post_init__(self) -> None:
            order.append("GRPOConfig")
            super().__post_init__()

    class Stop(Exception):
        pass

    def load_model(name, device="auto", dtype="auto", sharded=False, train_adapter=False):  # noqa: ANN001, ANN202
        order.append(f"policy (sharded={sharded})")
        raise Stop

    monkeypatch.setattr(trl, "GRPOConfig", RecordedConfig)
    monkeypatch.setattr(models, "load_model", load_model)
    with pytest.raises(Stop):
        run(tiny_config(tiny_model_dir, tmp_path / "run"))
    assert order == ["GRPOConfig", "policy (sharded=True)"]


# ----------------------------------------------------------------------------- one frozen copy for judge and reference


def _built(tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *extra: str) -> tuple[Any, Any]:
    """(trainer, its steps) as ``run.run`` builds them for the tiny demo, up to TRL's ``on_train_begin`` (the steps'
    ``begin``: their judges), without training."""
    from tiny_run import tiny_config

    from evolm.training.run import run

    seen: dict[str, Any] = {}
    monkeypatch.setattr(trl_adapter, "train", lambda trainer, checkpoint: seen.setdefault("trainer", trainer))
    run(tiny_config(tiny_model_dir, tmp_path / "run", *extra))
    trainer = seen["trainer"]
    steps = trainer.reward_funcs[0]  # the run's TrainingSteps: TRL's reward function
    steps.begin(trainer)
    return trainer, steps


def test_a_judge_of_the_initial_model_reads_trls_reference_model(tiny_model_dir: Path, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from evolm.backends.loading import load_backend
    from evolm.judge.judge import Judge, JudgeItem

    trainer, loop = _built(tiny_model_dir, tmp_path, monkeypatch)
    assert trainer.ref_model is not None and loop.judges[0].backend.model is trainer.ref_model  # one frozen copy
    items = [JudgeItem("What is 2 + 2?", a, None) for a in ("4", "It is 4.", "five")]
    alone = Judge(load_backend(str(tiny_model_dir), device="cpu", dtype="float32"), mode="yesno")
    # and it scores as a copy of its own would
    assert scores_of(loop.judges[0].score(items)) == scores_of(alone.score(items))


def test_no_model_of_a_run_is_kernelized_with_kernels_from_the_hub(tiny_model_dir: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """transformers (5.25) swaps layers of every model it loads for kernels it downloads from the Hugging Face Hub
    unless told not to; on a GPU with no hub the load fails (seen on an H200). ``evolm train`` loads none that way:
    not the policy, not the judge, not the reference model TRL loads itself."""
    from tiny_run import DEMO, tiny_overrides
    from transformers import AutoModelForCausalLM

    from evolm.backends.loading import HUB_KERNELS
    from evolm.cli import main

    monkeypatch.delenv(HUB_KERNELS, raising=False)
    assert AutoModelForCausalLM.from_pretrained(tiny_model_dir).use_kernels  # transformers' default: on
    seen: dict[str, Any] = {}
    monkeypatch.setattr(trl_adapter, "train", lambda trainer, checkpoint: seen.setdefault("trainer", trainer))
    run = tmp_path / "run"
    assert main(["train", "--config", str(DEMO), *tiny_overrides(tiny_model_dir, run), "model.lora.r=0"]) == 0
    trainer = seen["trainer"]
    assert trainer.ref_model is not None  # full fine-tuning: TRL loads a reference model from the path
    steps = trainer.reward_funcs[0]
    steps.begin(trainer)  # TRL's on_train_begin: the judges load
    models = [trainer.model, trainer.ref_model, *(j.backend.model for j in steps.judges)]
    assert [m.use_kernels for m in models] == [False] * len(models)


@pytest.mark.parametrize("extra", [("judge.dtype=bfloat16",), ("grpo.beta=0.0",), ("grpo.sync_ref_model=true",)])
def test_the_judge_loads_its_own_copy_when_the_weights_differ(tiny_model_dir: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch, extra: tuple) -> None:
    trainer, loop = _built(tiny_model_dir, tmp_path, monkeypatch, *extra)
    assert loop.judges[0].backend.model is not trainer.ref_model
    assert loop.judges[0].backend.model is not trainer.model
