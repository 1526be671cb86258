"""Constrained decoding (evolm.backends.constrained): the schemas against what the parsers read, the grammars around think
blocks, the backends' wiring (transformers, vLLM, OpenAI-compatible), the generative judge, the CLI flags, and TRL's
rubric steps (the adapter's wrapper, and one short GRPO run with rubric.constrained=true).

Generation uses tiny random models. Most use ``short_model_dir``: the tiny model with the output rows of the
tokens holding a quote scaled up, so that a random model closes its JSON strings within a few tokens. That only
shortens the replies: the grammar, not the model, makes them parse
(``test_constrained_rubrics_parse_where_unconstrained_ones_do_not`` shows the plain random model too).
"""

from __future__ import annotations

import functools
import json
import re
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
from openai_server import MODEL_ID, serve
from thinking_model import INSTRUCT_STYLE, OPEN_THINK_STYLE, QWEN3_STYLE, build_tokenizer

from evolm.backends import constrained
from evolm.backends.base import SamplingParams, tokenizer_thinks
from evolm.backends.constrained import (
    JUDGE_SCHEMA,
    REPLY_JSON,
    REPLY_MAY_THINK,
    REPLY_THINKING,
    RUBRIC_SCHEMA,
    compiled_grammar,
    reply_start,
)
from evolm.cli import main
from evolm.config import JudgeConfig, load_config
from evolm.errors import BackendError
from evolm.judge import prompts as judge_prompts
from evolm.judge.judge import Judge, JudgeItem, build_judge
from evolm.judge.parse import parse_judge_score
from evolm.rubrics import _EXAMPLE, format_validity, parse_rubric, rubric_messages
from evolm.runs.jsonl import read_jsonl
from evolm.scores import scores_of
from evolm.training import trl_generation
from evolm.training.run import check_launch

REPO = Path(__file__).resolve().parents[2]
QUESTIONS = ["What is 2 + 2?", "Write a haiku about autumn.", "Explain gravity to a child.",
             "Name three colours.", "How do I boil an egg?", "Convert 3.5 km to miles."]


@pytest.fixture(scope="module")
def short_backend(short_model_dir: Path) -> Any:
    from evolm.backends.loading import load_backend

    return load_backend(str(short_model_dir), device="cpu", dtype="float32", batch_size=4)


@functools.cache
def _tiny_tokenizer() -> Any:
    """One tokenizer object for the grammar tests: compiled grammars are cached per tokenizer object."""
    from conftest import build_tiny_tokenizer

    return build_tiny_tokenizer()


def _matcher(schema: dict, start: str = REPLY_JSON, tokenizer: Any = None) -> Any:
    import xgrammar as xgr

    tok = tokenizer or _tiny_tokenizer()
    return xgr.GrammarMatcher(compiled_grammar(tok, len(tok), schema, start, [tok.eos_token_id]))


def accepts(schema: dict, text: str, start: str = REPLY_JSON, tokenizer: Any = None) -> bool:
    """Whether the grammar of ``schema`` (after a think block as ``start`` says) takes ``text`` whole."""
    m = _matcher(schema, start, tokenizer)
    return m.accept_string(text) and m.is_completed()


def _criterion(text: str = "Says 4.", weight: Any = 0.5, levels: Any = None) -> dict:
    return {"criterion": text, "weight": weight,
            "scoring_levels": levels or {"1.0": "yes", "0.5": "partly", "0.0": "no"}}


# ============================================================================= the schemas


def test_rubric_schema_takes_the_prompts_example_and_refuses_what_the_format_refuses() -> None:
    assert accepts(RUBRIC_SCHEMA, json.dumps(_EXAMPLE))  # the one-shot example the rubric prompt shows
    good = {"criteria": [_criterion(), _criterion("Is short.", 0.5)]}
    assert accepts(RUBRIC_SCHEMA, json.dumps(good)) and format_validity(json.dumps(good)) == 1.0
    three = {"criteria": [_criterion(weight=0.1), _criterion("Is short.", 0.1), _criterion("Is kind.", 0.8)]}
    assert accepts(RUBRIC_SCHEMA, json.dumps(three))
    bad = [
        {"criteria": [_criterion(weight=0.5), _criterion(weight=0.6)]},  # weights that do not sum to 1
        {"criteria": [_criterion(weight=0.5), _criterion(weight=0.3)]},
        {"criteria": [_criterion(weight=0.55), _criterion(weight=0.45)]},  # the sum right, off the 0.1 grid
        {"criteria": [_criterion(weight=0.375), _criterion(weight=0.625)]},
        {"criteria": [_criterion(levels={"1.0": "a", "0.0": "b"}), _criterion()]},  # a level missing
        {"criteria": [_criterion(weight=1.0)]},  # one criterion
        {"criteria": [_criterion(weight=0.2)] * 6},  # six
        {"criteria": [_criterion(weight=0), _criterion(weight=1.0)]},  # a zero weight
        {"criteria": [_criterion(weight=1.5), _criterion()]},  # a weight above 1
        {"criteria": [_criterion(text=""), _criterion()]},  # a blank criterion
        {"criteria": [_criterion(text="a\x0bb"), _criterion()]},  # a control character json.loads refuses
        {"criteria": [_criterion(text="x" * 81), _criterion()]},  # over the length bound
        {"criteria": [{"criterion": "a", "weight": 0.5}, _criterion()]},  # no scoring levels
        {"criteria": [_criterion(levels={"high": "a", "low": "b"}), _criterion()]},  # levels not keyed by score
        {"criteria": [{**_criterion(), "note": "x"}, _criterion()]},  # an extra key
        {"criteria": [_criterion(), _criterion()], "extra": 1},
    ]
    for value in bad:
        assert not accepts(RUBRIC_SCHEMA, json.dumps(value)), value
    assert not accepts(RUBRIC_SCHEMA, "Sure! " + json.dumps(good))  # nothing before the JSON


def test_a_lower_criteria_cap_stops_the_grammar_there_and_keeps_the_weights_summing_to_1() -> None:
    capped = constrained.rubric_schema(3)  # rubric.max_criteria: 3 (the demo's)
    two = {"criteria": [_criterion(weight=0.3), _criterion("Is short.", 0.7)]}
    three = {"criteria": [_criterion(weight=0.1), _criterion("Is short.", 0.1), _criterion("Is kind.", 0.8)]}
    four = {"criteria": [_criterion(weight=0.1)] * 3 + [_criterion(weight=0.7)]}
    assert accepts(capped, json.dumps(two)) and accepts(capped, json.dumps(three))
    assert not accepts(capped, json.dumps(four)) and accepts(RUBRIC_SCHEMA, json.dumps(four))
    assert not accepts(capped, json.dumps({"criteria": [_criterion(weight=0.1)] * 3}))  # sums to 0.3
    assert constrained.vllm_structured_outputs(capped)["grammar"] != constrained.RUBRIC_EBNF
    assert constrained.schema_name(capped) == "rubric" and constrained.rubric_criteria_cap(JUDGE_SCHEMA) is None


@pytest.mark.slow
def test_judge_schema_takes_the_prompts_example_replies_and_a_0_to_1_score() -> None:
    replies = re.findall(r"reply: (\{.*?\})(?:\n|$)", judge_prompts._GEN_RUBRIC_TASK)
    assert len(replies) == 2
    for reply in replies:  # the worked examples the generative prompt shows are replies the schema allows
        assert accepts(JUDGE_SCHEMA, reply) and parse_judge_score(reply) is not None
    assert accepts(JUDGE_SCHEMA, '{"reasoning": "", "score": 1}')
    for bad in ['{"reasoning": "ok", "score": 7}', '{"reasoning": "ok", "score": "0.5"}', '{"score": 0.5}',
                '{"reasoning": "ok", "score": -0.1}', 'Score: 0.5']:
        assert not accepts(JUDGE_SCHEMA, bad), bad


@pytest.mark.slow
def test_request_forms() -> None:
    assert constrained.vllm_structured_outputs(RUBRIC_SCHEMA) == {"grammar": constrained.RUBRIC_EBNF}
    assert constrained.vllm_structured_outputs(JUDGE_SCHEMA) == {"json": JUDGE_SCHEMA}
    assert constrained.openai_response_format(JUDGE_SCHEMA, "judge_score") == {
        "type": "json_schema", "json_schema": {"name": "judge_score", "schema": JUDGE_SCHEMA}}
    import xgrammar as xgr

    text = constrained.vllm_structured_outputs(JUDGE_SCHEMA, REPLY_MAY_THINK)["grammar"]
    xgr.Grammar.from_ebnf(text)  # the EBNF vLLM's xgrammar backend compiles reads back


# ============================================================================= think blocks


def test_where_a_reply_starts_follows_the_template() -> None:
    hello = [{"role": "user", "content": "Hi"}]

    def start(template: str, **kw: Any) -> str:
        tok = build_tokenizer(template)
        return reply_start(tok.apply_chat_template(hello, tokenize=False, add_generation_prompt=True, **kw),
                           tokenizer_thinks(tok))

    assert start(QWEN3_STYLE) == REPLY_MAY_THINK  # thinking on: the model may open a block first
    assert start(QWEN3_STYLE, enable_thinking=True) == REPLY_MAY_THINK
    assert start(QWEN3_STYLE, enable_thinking=False) == REPLY_JSON  # the prompt closed an empty block
    assert start(OPEN_THINK_STYLE) == REPLY_THINKING  # the prompt opened it: the reply must close it
    assert start(INSTRUCT_STYLE) == REPLY_JSON  # never thinks


@pytest.mark.slow
def test_think_block_grammars() -> None:
    tok = build_tokenizer(QWEN3_STYLE)
    reply = '{"reasoning": "fine", "score": 0.5}'
    thought = "<think>\nLet me see: a < b, </b> is no tag end.\n</think>\n\n"
    assert accepts(JUDGE_SCHEMA, reply, REPLY_MAY_THINK, tok) and accepts(JUDGE_SCHEMA, thought + reply, REPLY_MAY_THINK, tok)
    assert not accepts(JUDGE_SCHEMA, thought + reply, REPLY_JSON, tok)
    assert accepts(JUDGE_SCHEMA, "hmm</think>\n\n" + reply, REPLY_THINKING, tok)
    assert not accepts(JUDGE_SCHEMA, reply, REPLY_THINKING, tok)  # an opened block must be closed first
    assert not accepts(JUDGE_SCHEMA, thought + thought + reply, REPLY_MAY_THINK, tok)  # one block at most
    assert parse_judge_score(thought + reply) == 0.5


# ============================================================================= transformers backend


@pytest.mark.slow
def test_constrained_rubrics_parse_where_unconstrained_ones_do_not(short_backend: Any, tiny_backend: Any) -> None:
    convs = [rubric_messages(q) for q in QUESTIONS]  # 6 rows, batch size 4: two generate() calls, two processors
    texts = short_backend.generate(convs, SamplingParams(1.0, 1.0, 1024, 0, json_schema=RUBRIC_SCHEMA))
    for text in texts:
        rubric = parse_rubric(text)
        assert rubric is not None and 2 <= len(rubric.criteria) <= 5, text
        raw = json.loads(text)["criteria"]  # the whole reply is the JSON object
        assert all(list(c["scoring_levels"]) == ["1.0", "0.5", "0.0"] for c in raw)
        # the grammar makes the weights sum to exactly 1 (multiples of 0.05): every rubric is format-valid
        assert abs(sum(c["weight"] for c in raw) - 1) < 1e-9 and format_validity(text) == 1.0
    plain = tiny_backend.generate(convs[:2], SamplingParams(1.0, 1.0, 1024, 0, json_schema=RUBRIC_SCHEMA))
    assert all(parse_rubric(t) is not None for t in plain)  # the unmodified random model too (longer replies)
    free = tiny_backend.generate(convs, SamplingParams(1.0, 1.0, 64, 0))
    assert all(parse_rubric(t) is None for t in free)  # unconstrained random text is no rubric


@pytest.mark.slow
def test_a_thinking_template_with_thinking_off_decodes_json(tmp_path: Path) -> None:
    from thinking_model import build_thinking_model_dir

    from evolm.backends.loading import load_backend

    backend = load_backend(str(build_thinking_model_dir(tmp_path / "m")), device="cpu", dtype="float32")
    params = SamplingParams(1.0, 1.0, 64, 0, {"enable_thinking": False}, json_schema={"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["a"], "additionalProperties": False})
    for text in backend.generate([rubric_messages(q) for q in QUESTIONS[:3]], params):
        assert re.fullmatch(r'\{"a": [0-9]\}', text), text


@pytest.mark.slow
def test_the_constrained_judge_always_scores(short_model_dir: Path, short_backend: Any) -> None:
    items = [JudgeItem(q, "4.", rubric_text='{"criteria": [{"criterion": "Says 4", "weight": 1}]}') for q in QUESTIONS[:4]]
    judge = Judge(short_backend, mode="generative", max_new_tokens=512, constrained=True, max_context=8192)
    scores = scores_of(judge.score(items))  # (the tiny model's 2048-token context would leave no room for the reply)
    assert all(s is not None and 0.0 <= s <= 1.0 for s in scores), scores
    cfg = JudgeConfig(model=str(short_model_dir), mode="generative", dtype="float32", constrained=True)
    assert build_judge(cfg, device="cpu").constrained is True  # judge.constrained reaches the judge


def test_likert_modes_are_never_constrained(short_backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []
    monkeypatch.setattr(short_backend, "generate", lambda convs, params, progress=False: seen.append(params.json_schema)
                        or ['{"score": 5}'] * len(convs))
    scores_of(Judge(short_backend, mode="likert", constrained=True).score([JudgeItem("q", "a")]))  # 1-10: not JUDGE_SCHEMA's scale
    scores_of(Judge(short_backend, mode="generative", constrained=True).score([JudgeItem("q", "a")]))
    assert seen == [None, JUDGE_SCHEMA]


def test_missing_xgrammar_is_one_line(monkeypatch: pytest.MonkeyPatch, short_backend: Any, short_model_dir: Path,
                                      tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "xgrammar", None)  # import xgrammar -> ImportError, installed or not
    with pytest.raises(BackendError, match=r"pip install 'xgrammar>=0\.2\.9'") as e:
        short_backend.generate([rubric_messages("q")], SamplingParams(json_schema=RUBRIC_SCHEMA))
    assert "\n" not in str(e.value)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "q"}) + "\n")
    assert main(["rubric", "--model", str(short_model_dir), "--input", str(prompts), "--output",
                 str(tmp_path / "r.jsonl"), "--device", "cpu", "--constrained", "--max-new-tokens", "256"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("evolm")]
    assert len(err) == 1 and "pip install" in err[0], err


# ============================================================================= CLI


@pytest.mark.slow
def test_cli_rubric_and_judge_constrained(short_model_dir: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": q}) + "\n" for q in QUESTIONS[:3]))
    out = tmp_path / "r.jsonl"
    assert main(["rubric", "--model", str(short_model_dir), "--input", str(prompts), "--output", str(out),
                 "--device", "cpu", "--constrained", "--max-new-tokens", "512"]) == 0
    rows = read_jsonl(out)
    assert all(r["rubric"] is not None for r in rows)
    answers = tmp_path / "a.jsonl"
    answers.write_text("".join(json.dumps({"prompt": r["prompt"], "response": "Fine.", "rubric": r["rubric"]}) + "\n"
                               for r in rows))
    scored = tmp_path / "s.jsonl"
    assert main(["judge", "--judge", str(short_model_dir), "--input", str(answers), "--output", str(scored),
                 "--mode", "generative", "--constrained", "--device", "cpu", "--max-context", "8192"]) == 0
    assert all(r["score"] is not None for r in read_jsonl(scored))
    assert main(["judge", "--judge", str(short_model_dir), "--input", str(answers), "--output", str(tmp_path / "x"),
                 "--mode", "prob", "--constrained", "--device", "cpu"]) == 2
    assert "needs --mode generative" in capsys.readouterr().err


def test_cli_eval_flags_reach_the_rubric_params() -> None:
    from evolm.cli import build_parser
    from evolm.cli._common import rubric_params as _rubric_params

    args = build_parser().parse_args(["eval", "pairs", "x.jsonl", "--judge", "j", "--rubric-model", "r", "--constrained"])
    assert _rubric_params(args).json_schema == RUBRIC_SCHEMA and args.judge_constrained is False
    args = build_parser().parse_args(["eval", "rb2", "--judge", "j", "--rubric-model", "r", "--judge-constrained"])
    assert _rubric_params(args).json_schema is None and args.judge_constrained is True


def test_the_retry_ladder_keeps_the_schema() -> None:
    from evolm.eval.rubric_source import write_prompt_rubrics

    @dataclass
    class Writer:
        name: str = "fake"
        calls: list = None  # type: ignore[assignment]

        def generate(self, convs: list, params: SamplingParams, progress: bool = False) -> list[str]:
            self.calls = [*(self.calls or []), params]
            return ["no rubric"] * len(convs)

    writer = Writer()
    write_prompt_rubrics(writer, ["q"], SamplingParams(0.6, 0.95, 64, 0, json_schema=RUBRIC_SCHEMA))  # type: ignore[arg-type]
    assert [(p.temperature, p.json_schema) for p in writer.calls] == [(0.6, RUBRIC_SCHEMA), (0.3, RUBRIC_SCHEMA),
                                                                       (0.1, RUBRIC_SCHEMA)]


# ============================================================================= vLLM and OpenAI-compatible backends


@dataclass
class _StructuredOutputsParams:  # vllm/sampling_params.py's fields evolm uses
    json: Any = None
    regex: str | None = None
    grammar: str | None = None


@dataclass
class _VLLMSamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    max_tokens: int | None = 16
    structured_outputs: _StructuredOutputsParams | None = None


class _Engine:
    def __init__(self, tokenizer: Any = None) -> None:
        self.tokenizer, self.params = tokenizer, []

    def get_tokenizer(self) -> Any:
        return self.tokenizer

    def chat(self, messages: list, sampling_params: Any = None, use_tqdm: bool = True,
             chat_template_kwargs: dict | None = None) -> list[Any]:
        self.params.append(sampling_params)
        return [types.SimpleNamespace(prompt=None, outputs=[types.SimpleNamespace(text="{}")]) for _ in messages]


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    module, sampling = types.ModuleType("vllm"), types.ModuleType("vllm.sampling_params")
    module.SamplingParams = _VLLMSamplingParams  # type: ignore[attr-defined]
    sampling.StructuredOutputsParams = _StructuredOutputsParams  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setitem(sys.modules, "vllm.sampling_params", sampling)


@pytest.mark.slow
def test_vllm_backend_sends_structured_outputs(fake_vllm: None) -> None:
    from evolm.backends.vllm import VLLMBackend

    engine = _Engine(build_tokenizer(INSTRUCT_STYLE))
    VLLMBackend(llm=engine).generate([[{"role": "user", "content": "q"}]], SamplingParams(json_schema=RUBRIC_SCHEMA))
    VLLMBackend(llm=engine).generate([[{"role": "user", "content": "q"}]], SamplingParams())
    assert engine.params[0].structured_outputs == _StructuredOutputsParams(grammar=constrained.RUBRIC_EBNF)
    assert engine.params[1].structured_outputs is None
    thinking = _Engine(build_tokenizer(QWEN3_STYLE))  # thinking on: a grammar that allows a think block first
    VLLMBackend(llm=thinking).generate([[{"role": "user", "content": "q"}]], SamplingParams(json_schema=JUDGE_SCHEMA))
    grammar = thinking.params[0].structured_outputs.grammar
    assert "<think>" in grammar and grammar == constrained.vllm_structured_outputs(JUDGE_SCHEMA, REPLY_MAY_THINK)["grammar"]


def test_openai_request_carries_response_format() -> None:
    from evolm.backends.openai import OpenAIBackend

    with serve() as server:
        backend = OpenAIBackend(MODEL_ID, base_url=server.base_url, api_key_env="EVOLM_TEST_NO_KEY")
        backend.generate([[{"role": "user", "content": "q"}]], SamplingParams(json_schema=RUBRIC_SCHEMA))
        backend.generate([[{"role": "user", "content": "q"}]], SamplingParams(json_schema=JUDGE_SCHEMA))
        backend.generate([[{"role": "user", "content": "q"}]], SamplingParams())
        formats = [body.get("response_format") for body in server.state.requests]
    assert formats == [constrained.openai_response_format(RUBRIC_SCHEMA, "rubric"),
                       constrained.openai_response_format(JUDGE_SCHEMA, "judge_score"), None]


# ============================================================================= TRL's rubric steps


GRAMMAR = trl_generation.RubricGrammar(RUBRIC_SCHEMA, thinking=False)


def _fake_trainer(model: Any, tokenizer: Any, use_vllm: bool = False) -> Any:
    return types.SimpleNamespace(
        processing_class=tokenizer, model_wrapped=model,
        accelerator=types.SimpleNamespace(unwrap_model=lambda m: m),
        args=types.SimpleNamespace(use_vllm=use_vllm, chat_template_kwargs=None),
        vllm_generation=types.SimpleNamespace(generation_kwargs={"seed": 1}))


@pytest.mark.slow
def test_trl_generation_is_constrained_on_rubric_steps_only(short_model_dir: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tok = AutoTokenizer.from_pretrained(short_model_dir)
    model = AutoModelForCausalLM.from_pretrained(short_model_dir)
    trainer = _fake_trainer(model, tok)
    prompt = tok.apply_chat_template(rubric_messages("What is 2 + 2?"), add_generation_prompt=True, return_dict=False)
    ids = torch.tensor([prompt, prompt])  # [2, L]: TRL's call, as in GRPOTrainer._generate_single_turn
    config = GenerationConfig(do_sample=True, eos_token_id=[tok.eos_token_id],
                              pad_token_id=tok.pad_token_id)

    def sample(max_new_tokens: int = 512) -> list[str]:
        torch.manual_seed(0)
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config,
                             max_new_tokens=max_new_tokens)
        return tok.batch_decode(out[:, ids.shape[1]:], skip_special_tokens=True)

    with trl_generation.constrained_generation(trainer, [{"role": "policy"}], GRAMMAR):
        assert "generate" not in model.__dict__  # policy steps: TRL's generate untouched
        free = sample(64)
    with trl_generation.constrained_generation(trainer, [{"role": "rubric"}], GRAMMAR):
        assert "generate" in model.__dict__
        bound = sample()
        again = sample()  # a second generate() in the step gets a fresh processor
    assert "generate" not in model.__dict__  # restored
    assert all(parse_rubric(t) is not None for t in bound + again), bound + again
    assert all(parse_rubric(t) is None for t in free)
    with pytest.raises(RuntimeError, match="boom"), \
            trl_generation.constrained_generation(trainer, [{"role": "rubric"}], GRAMMAR):
        raise RuntimeError("boom")
    assert "generate" not in model.__dict__  # restored after an error too
    with trl_generation.constrained_generation(trainer, [{"role": "rubric"}], None):  # rubric.constrained off
        assert "generate" not in model.__dict__


def test_trl_vllm_generation_kwargs_are_set_for_the_step_and_restored() -> None:
    from conftest import build_tiny_tokenizer

    trainer = _fake_trainer(None, build_tiny_tokenizer(), use_vllm=True)
    vg = trainer.vllm_generation
    before = vg.generation_kwargs
    rows = [{"role": "rubric", "prompt": rubric_messages("q")}]
    with trl_generation.constrained_generation(trainer, rows, GRAMMAR):
        assert vg.generation_kwargs == {"seed": 1, "structured_outputs": {"grammar": constrained.RUBRIC_EBNF}}
    assert vg.generation_kwargs is before
    with trl_generation.constrained_generation(trainer, [{"role": "policy", "prompt": rows[0]["prompt"]}], GRAMMAR):
        assert vg.generation_kwargs is before


@pytest.mark.parametrize(("overrides", "message"), [
    (["grpo.use_transformers_continuous_batching=true"], "unset grpo.use_transformers_continuous_batching"),
    (["grpo.use_vllm=true", "grpo.vllm_structured_outputs_regex=x"], "set one"),
])
def test_launch_refuses_what_cannot_be_constrained(overrides: list[str], message: str) -> None:
    from evolm.errors import InputError

    cfg = load_config(REPO / "configs" / "demo-cpu.yaml", ["rubric.constrained=true", *overrides])
    with pytest.raises(InputError, match=message) as e:
        check_launch(cfg)
    assert "\n" not in str(e.value)
    check_launch(load_config(REPO / "configs" / "demo-cpu.yaml", ["rubric.constrained=false", *overrides]))  # fine when off


def test_trainer_generate_on_vllm_sends_the_schema_for_the_call() -> None:
    tok = _tiny_tokenizer()
    seen: list[dict] = []

    class Generation:  # trl's VLLMGeneration, as far as TrainerGenerate uses it
        temperature, top_p, max_completion_length, generation_kwargs = 1.0, 1.0, 16, {"seed": 1}

        def generate(self, prompts: list, images: Any, num_generations: int) -> tuple:
            seen.append(dict(self.generation_kwargs))
            return prompts, [tok.encode("{}", add_special_tokens=False) for _ in prompts], None, None

    vg = Generation()
    kept = vg.generation_kwargs
    trainer = types.SimpleNamespace(
        args=types.SimpleNamespace(use_vllm=True, chat_template_kwargs=None), vllm_generation=vg, processing_class=tok,
        state=types.SimpleNamespace(global_step=0), _last_loaded_step=0,
        accelerator=types.SimpleNamespace(num_processes=1, process_index=0))
    generate = trl_generation.TrainerGenerate(trainer)
    generate([rubric_messages("q")], SamplingParams(json_schema=RUBRIC_SCHEMA))
    generate([rubric_messages("q")], SamplingParams())
    assert seen == [{"seed": 1, "structured_outputs": {"grammar": constrained.RUBRIC_EBNF}}, {"seed": 1}]
    assert vg.generation_kwargs is kept


@pytest.mark.slow
def test_grpo_run_with_constrained_rubrics(short_model_dir: Path, tmp_path: Path) -> None:
    """1 policy step + 1 rubric step: every rubric (written for the policy, and sampled by TRL) parses."""
    from evolm.training.run import run

    out = tmp_path / "run"
    cfg = load_config(REPO / "configs" / "demo-cpu.yaml", [
        f"model.name={short_model_dir}", f"judge.model={short_model_dir}", f"output_dir={out}",
        "schedule.prompts_per_step=2", "schedule.samples_per_prompt=2", "schedule.samples_logged_per_step=0",
        "schedule.cycles=1", "schedule.steps_per_phase=1", "grpo.per_device_train_batch_size=4",
        "grpo.max_completion_length=512", "rubric.max_new_tokens=512",
        "grpo.report_to=[]", "rubric.constrained=true",
        # the random policy's free answers end within ~40 tokens (EOS pushed up from the 4th; 1.1**n stays finite
        # over the 512-token budget, a larger factor overflows to an infinite EOS logit); the grammar masks
        # EOS until a rubric's JSON is complete, so rubric samples are not cut by it
        "grpo.generation_kwargs={exponential_decay_length_penalty: [4, 1.1]}"])
    run(cfg)
    files = {p.name: read_jsonl(p) for p in (out / "samples").glob("*.jsonl")}
    policy, rubric = files["phase-000-policy.jsonl"], files["phase-001-rubric.jsonl"]
    assert len(policy) == len(rubric) == 4
    for row in rubric:  # TRL's own samples of the rubric step
        parsed = parse_rubric(row["completion"])
        assert parsed is not None and 2 <= len(parsed.criteria) <= 5, row["completion"]
    for row in policy:  # the rubric each policy question was judged with, written through TrainerGenerate
        assert parse_rubric(row["rubric_text"]) is not None
    assert not any(parse_rubric(row["completion"]) for row in policy)  # policy answers are never constrained
    steps = read_jsonl(out / "metrics.jsonl")
    assert [s["role"] for s in steps] == ["policy", "rubric"]
