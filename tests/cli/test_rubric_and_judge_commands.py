"""The `evolm rubric` and `evolm judge` commands, end to end on the tiny model, and their errors; the parser's plumbing."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from evolm.cli import build_parser, main


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.mark.slow
def test_rubric_then_judge_every_mode(tiny_model_dir: Path, tmp_path: Path) -> None:
    prompts = _write(tmp_path / "p.jsonl", [json.dumps({"prompt": f"What is {i} + {i}?", "id": i}) for i in range(5)])
    out = tmp_path / "r.jsonl"
    assert main(["rubric", "--model", str(tiny_model_dir), "--input", str(prompts), "--output", str(out),
                 "--max-new-tokens", "8", "--device", "cpu"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 5
    assert [r["id"] for r in rows] == list(range(5))  # input fields kept, order kept
    for r in rows:
        assert r["rubric_valid"] in (0.0, 1.0) and "rubric" in r and isinstance(r["rubric_text"], str)

    answers = [{"prompt": "What is 2 + 2?", "response": "4",
                "rubric": {"criteria": [{"criterion": "Says 4", "weight": 0.7}, {"criterion": "Short", "weight": 0.3}]}},
               {"prompt": "What is 2 + 2?", "response": "5", "rubric": json.dumps({"criteria": [{"criterion": "Says 4"}]})},
               {"prompt": "Name a colour.", "response": "Blue."}]
    inp = _write(tmp_path / "a.jsonl", [json.dumps(a) for a in answers])
    for mode in ("prob", "yesno", "generative"):
        scored = tmp_path / f"s-{mode}.jsonl"
        assert main(["judge", "--judge", str(tiny_model_dir), "--input", str(inp), "--output", str(scored),
                     "--mode", mode, "--device", "cpu"]) == 0
        got = [json.loads(x) for x in scored.read_text().splitlines()]
        assert len(got) == 3
        for g in got:
            if mode == "generative":
                assert g["score"] is None or 0.0 <= g["score"] <= 1.0
            else:  # probability modes always give a score
                assert isinstance(g["score"], float) and 0.0 <= g["score"] <= 1.0


@pytest.mark.parametrize(
    ("lines", "args_extra", "message"),
    [
        (None, [], "no such file"),
        (['{"prompt": "a", "response": "b"}', '{"prompt": "a", "response": '], [], ":2: malformed JSON"),
        (['{"prompt": "a", "response": "b"}', '{"prompt": "c"}'], [], ":2: missing field 'response'"),
        (['{"prompt": "a", "response": "b"}'], ["--judge", "no/such/model/dir"], "unknown model"),
    ],
)
def test_bad_input_is_one_line_and_no_output(tmp_path: Path, tiny_model_dir: Path, lines, args_extra, message) -> None:
    inp = tmp_path / "in.jsonl"
    if lines is not None:
        _write(inp, lines)
    out = tmp_path / "out.jsonl"
    judge = args_extra[1] if args_extra else str(tiny_model_dir)
    proc = subprocess.run(
        [sys.executable, "-m", "evolm.cli", "judge", "--judge", judge, "--input", str(inp), "--output", str(out),
         "--device", "cpu"],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 2
    err = [x for x in proc.stderr.strip().splitlines() if x.startswith("evolm")]
    assert len(err) == 1 and message in err[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists() and not list(tmp_path.glob(".out.jsonl.*"))  # nothing that looks complete


@pytest.mark.slow
def test_stdin_stdout(tiny_model_dir: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "evolm.cli", "judge", "--judge", str(tiny_model_dir), "--input", "-", "--output", "-",
         "--device", "cpu"],
        input=json.dumps({"prompt": "q", "response": "r"}) + "\n", capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert 0.0 <= json.loads(proc.stdout.strip().splitlines()[-1])["score"] <= 1.0


def test_help_at_every_level() -> None:
    for argv in (["--help"], ["rubric", "--help"], ["judge", "--help"], ["train", "--help"], ["eval", "--help"],
                 ["eval", "rb2", "--help"], ["eval", "pairs", "--help"], ["eval", "policy", "--help"],
                 ["eval", "stats", "--help"], ["report", "--help"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 0


def _subparsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every leaf (sub)subcommand parser, by its command path, e.g. ("eval", "rb2")."""
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.update(_subparsers(sub, (*path, name)))
    return out or {path: parser}


def _flag_help(parser: argparse.ArgumentParser, flag: str) -> tuple | None:
    for action in parser._actions:
        if flag in action.option_strings:
            return action.help, action.default, tuple(action.choices or ()), action.type
    return None


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out == f"evolm {version('evolm')}\n"


def test_every_option_with_a_default_says_it_in_its_help(capsys: pytest.CaptureFixture[str]) -> None:
    """Every option whose default is a value (not None, not an on/off flag's) names it in its --help line."""
    unsaid = []
    for path, parser in _subparsers(build_parser()).items():
        formatter = parser._get_formatter()
        for action in parser._actions:
            d = action.default
            if d in (None, argparse.SUPPRESS) or (action.nargs == 0 and isinstance(d, bool)):
                continue
            text = " ".join(formatter._expand_help(action).split()) if action.help else ""
            shown = {str(d), f"{d:g}" if isinstance(d, float) else str(d), f"{d:,}" if isinstance(d, int) else str(d)}
            if "default" not in text.lower() or not any(s in text for s in shown):
                unsaid.append(f"{' '.join(path)} {'/'.join(action.option_strings) or action.dest}: {text!r}")
    assert unsaid == []
    with pytest.raises(SystemExit):
        main(["rubric", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(in training: the policy phase's rubrics). Here 1024, not 16384" in out and "Qwen3 (default: 1024)" in out and "answers scored together) (default: 8)" in out


def test_rubric_progress_is_told_as_rows_end(tiny_backend) -> None:  # noqa: ANN001
    """`evolm rubric`'s bar on a local model: HFBackend.generate tells on_rows as each reply ends, the rest when
    its batch ends, never twice for a row, and stops nothing."""
    import torch

    from evolm.backends.base import SamplingParams
    from evolm.backends.stopping import RowsEnded

    told: list[int] = []
    rows = RowsEnded([7], 3, told.append)
    assert not rows(torch.tensor([[1, 7], [1, 2], [1, 3]]), None).any() and told == [1]
    assert not rows(torch.tensor([[1, 7, 7], [1, 2, 7], [1, 3, 5]]), None).any() and told == [1, 1]
    rows.finish()
    assert told == [1, 1, 1]
    told.clear()
    convs = [[{"role": "user", "content": f"What is {i} + {i}?"}] for i in range(5)]
    assert len(tiny_backend.generate(convs, SamplingParams(0.0, 1.0, 4, 0), on_rows=told.append)) == 5
    assert sum(told) == 5 and len(told) >= 2  # batches of 4: the bar moved before the last batch


def test_every_subcommand_dispatches_through_run() -> None:
    leaves = _subparsers(build_parser())
    assert {"rubric", "judge", "train", "report"} <= {p[0] for p in leaves}
    assert {("eval", "rb2"), ("eval", "pairs"), ("eval", "policy"), ("eval", "stats")} <= set(leaves)
    for path, p in leaves.items():
        assert callable(p.get_default("run")), path


@pytest.mark.parametrize(
    ("flag", "commands"),
    [
        ("--device", ["rubric", "judge", "eval rb2", "eval pairs", "eval policy"]),
        ("--dtype", ["rubric", "judge", "eval rb2", "eval pairs", "eval policy"]),
        ("--batch-size", ["rubric", "judge", "eval rb2", "eval pairs", "eval policy"]),
        ("--temperature", ["rubric", "eval rb2", "eval pairs", "serve"]),  # eval policy's: the policy's sampling
        ("--top-p", ["rubric", "eval rb2", "eval pairs", "serve"]),
        ("--seed", ["rubric", "judge", "eval rb2", "eval pairs", "eval policy"]),
        ("--max-new-tokens", ["rubric", "eval rb2", "eval pairs"]),
        ("--backend", ["rubric", "judge", "eval rb2", "eval pairs"]),
        ("--api-key-env", ["rubric", "judge", "eval rb2", "eval pairs"]),
        ("--mode", ["judge", "eval rb2", "eval pairs"]),
    ],
)
def test_shared_flags_are_declared_once(flag: str, commands: list[str]) -> None:
    """A shared flag comes from one helper: the same help, default, choices and type wherever it appears."""
    leaves = _subparsers(build_parser())
    declared = {c: _flag_help(leaves[tuple(c.split())], flag) for c in commands}
    assert all(d is not None for d in declared.values()), declared
    assert len(set(declared.values())) == 1, declared
    assert declared[commands[0]][0], f"{flag} has no help text"


def test_flag_choices_come_from_the_library_constants() -> None:
    from evolm.config import BACKENDS, DTYPES
    from evolm.judge.judge import JUDGE_MODES

    leaves = _subparsers(build_parser())
    assert list(_flag_help(leaves[("judge",)], "--dtype")[2]) == list(DTYPES)
    assert list(_flag_help(leaves[("eval", "rb2")], "--backend")[2]) == list(BACKENDS)
    assert list(_flag_help(leaves[("eval", "rb2")], "--judge-backend")[2]) == list(BACKENDS)
    assert set(_flag_help(leaves[("judge",)], "--mode")[2]) == set(JUDGE_MODES)


def test_eval_models_are_built_once_with_the_cli_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """The judge goes through build_judge; the rubric writer shares its model when it is the same one."""
    from evolm.backends import loading as models
    from evolm.cli._common import rubric_params as _rubric_params
    from evolm.cli.eval._rubric_judge import rubric_and_judge as _rubric_and_judge

    loaded: list[tuple[str, dict]] = []

    def fake_load_backend(spec: str, **kw: object) -> object:
        loaded.append((spec, kw))
        return object()

    monkeypatch.setattr(models, "load_backend", fake_load_backend)
    args = build_parser().parse_args(["eval", "pairs", "f.json", "--judge", "J", "--rubric-model", "J", "--mode", "yesno",
                                      "--top-p", "0.5", "--seed", "3", "--dtype", "float32", "--batch-size", "2"])
    rubric_backend, judge = _rubric_and_judge(args)
    assert [spec for spec, _ in loaded] == ["J"] and rubric_backend is judge.backend
    assert loaded[0][1] == {"backend": "hf", "base_url": None, "api_key_env": "OPENAI_API_KEY", "device": "auto",
                            "dtype": "float32", "batch_size": 2, "timeout": 120.0, "max_retries": 2,
                            "deadline": 0.0, "max_concurrency": 32, "requests_per_minute": 0.0,
                            "tokens_per_minute": 0.0, "max_reply_mb": 8.0}
    assert (judge.mode, judge.seed, judge.max_new_tokens, judge.chat_template_kwargs) == ("yesno", 3, 512, {})
    assert (judge.temperature, judge.top_p) == (0.6, 0.95)  # the judge's own sampling; --top-p is the rubric writer's
    params = _rubric_params(args)
    assert (params.temperature, params.top_p, params.max_new_tokens, params.seed) == (0.6, 0.5, 1024, 3)

    loaded.clear()
    args = build_parser().parse_args(["eval", "pairs", "f.json", "--judge", "J", "--rubric-model", "R",
                                      "--judge-backend", "openai", "--judge-base-url", "http://j/v1"])
    rubric_backend, judge = _rubric_and_judge(args)
    assert [(spec, kw["backend"], kw["base_url"]) for spec, kw in loaded] == [("J", "openai", ["http://j/v1"]),
                                                                               ("R", "hf", None)]
    assert rubric_backend is not judge.backend


CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.slow
@pytest.mark.parametrize(("config", "processes"), [("paper-qwen3-8b.yaml", 4), ("paper-qwen3-8b.yaml", 8),
                                                   ("demo-cpu.yaml", 1)])
def test_dry_run_passes_for_the_documented_launch(config: str, processes: int,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--config", str(CONFIGS / config), "--dry-run", "--num-processes", str(processes),
                 "data.prompts=builtin:demo"]) == 0  # the paper's prompts file is the user's; a missing one is refused
    out = capsys.readouterr()
    assert "gradient accumulation" in out.out and "nothing was loaded" in out.err


@pytest.mark.slow
def test_the_gpu_doc_launch_command_passes_the_dry_run() -> None:
    readme = (CONFIGS.parent / "docs" / "GPU.md").read_text(encoding="utf-8")
    launch = re.search(r"accelerate launch .*--num_processes (\d+)", readme)
    assert launch is not None
    assert main(["train", "--config", str(CONFIGS / "paper-qwen3-8b.yaml"), "--dry-run",
                 "--num-processes", launch.group(1), "data.prompts=builtin:demo"]) == 0  # the user's prompts, in place


def test_dry_run_refuses_a_process_count_that_does_not_divide_the_batch(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--config", str(CONFIGS / "paper-qwen3-8b.yaml"), "--dry-run", "--num-processes", "7"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "(1 x 7)" in err


def test_dry_run_checks_endpoints_and_the_age_window(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--config", str(CONFIGS / "demo-cpu.yaml"), "--dry-run", "judge.base_url=localhost:8000"]) == 2
    assert "not an http(s)://host" in capsys.readouterr().err
    assert main(["train", "--config", str(CONFIGS / "demo-cpu.yaml"), "--dry-run", "contrast.buffer_size=2",
                 "contrast.min_age=3", "contrast.max_age=4"]) == 2
    assert "cannot hold answers 3 policy steps old" in capsys.readouterr().err


@pytest.mark.slow
def test_dry_run_shows_the_fresh_answers_budget_and_refuses_one_shorter_than_the_stored(
        capsys: pytest.CaptureFixture[str]) -> None:
    demo = str(CONFIGS / "demo-cpu.yaml")
    assert main(["train", "--config", demo, "--dry-run"]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())
    assert "temporal: fresh answers of up to 320 tokens (the policy's budget, grpo.max_completion_length)" in out, out
    assert main(["train", "--config", demo, "--dry-run", "contrast.max_new_tokens=64"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "contrast.max_new_tokens (64) is below grpo.max_completion_length (320)" in err



@pytest.mark.slow
def test_dry_run_refuses_a_constrained_rubric_budget_that_holds_no_rubric_and_warns_below_a_long_one(
        capsys: pytest.CaptureFixture[str]) -> None:
    demo = str(CONFIGS / "demo-cpu.yaml")  # SmolLM2's tokenizer: the shortest rubric is 98 tokens, 3 long criteria 221
    assert main(["train", "--config", demo, "--dry-run", "rubric.max_new_tokens=64"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "rubric.max_new_tokens=64 cannot hold a whole rubric" in err
    assert main(["train", "--config", demo, "--dry-run", "grpo.max_completion_length=128"]) == 0
    err = capsys.readouterr().err
    assert "warning: grpo.max_completion_length=128 is below a rubric of 3 criteria" in err
    assert "rubric steps sample rubrics within grpo.max_completion_length (128 tokens), below rubric.max_new_tokens" \
        in err  # the writer would be trained on shorter rubrics than the policy is judged with
    assert main(["train", "--config", demo, "--dry-run"]) == 0
    assert "is below a rubric" not in capsys.readouterr().err
    assert main(["train", "--config", demo, "--dry-run", "rubric.constrained=false", "rubric.max_new_tokens=64"]) == 0

@pytest.mark.slow
def test_dry_run_names_each_judge_endpoint(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "--config", str(CONFIGS / "demo-cpu.yaml"), "--dry-run", "judge.backend=openai",
                 "judge.model=J", "judge.base_url=[http://a/v1, http://b/v1]"]) == 0
    out = capsys.readouterr().out
    assert "openai at http://a/v1, http://b/v1)" in out and "['http" not in out


def test_judge_says_how_it_read_each_rubric_and_refuses_non_text(tmp_path: Path, tiny_model_dir: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"prompt": "What is 2 + 2?", "response": "4", "rubric": {"criteria": [
                {"criterion": "Says 4.", "weight": 0.6}, {"criterion": "Is short.", "weight": 0.4}]}},
            {"prompt": "What is 2 + 2?", "response": "4", "rubric": "Reward answers that say 4."},
            {"prompt": "What is 2 + 2?", "response": "4"},
            {"prompt": "What is 2 + 2?", "response": "4", "rubric": {"criteria": [
                {"criterion": "Says 4.", "weight": "heavy"}, {"criterion": "Is short.", "weight": 0.4}]}},
            {"prompt": "What is 2 + 2?", "response": "5", "rubric": "be good"}]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    capsys.readouterr()
    assert main(["judge", "--judge", str(tiny_model_dir), "--input", str(src), "--output", str(out),
                 "--mode", "yesno", "--device", "cpu"]) == 0
    got = [json.loads(line) for line in out.read_text().splitlines()]
    # nothing silently judged alone, and a weight that could not be read is not "parsed" as written
    assert [g["rubric_used"] for g in got] == ["parsed", "raw text", "none", "repaired", "raw text"]
    assert got[3]["rubric_repairs"] == ["criterion 1: weight 'heavy' is not a positive number (took the others' mean)"]
    assert "rubric_repairs" not in got[0]
    summary = capsys.readouterr().err.strip().splitlines()[-1]  # the summary line counts what was not used as written
    assert summary.startswith("scored 5 answers (0 without a readable score)")
    assert "; 2 rubrics not parsed, judged as raw text; 1 rubric repaired (see rubric_repairs)" in summary
    src.write_text(json.dumps({"prompt": None, "response": "4"}) + "\n")
    capsys.readouterr()
    assert main(["judge", "--judge", str(tiny_model_dir), "--input", str(src), "--output", str(out)]) == 2
    assert "row 1: 'prompt' must be text, not NoneType" in capsys.readouterr().err


def test_judge_details_write_each_criterion_and_the_score_is_their_weighted_sum(tmp_path: Path,
                                                                                tiny_model_dir: Path) -> None:
    rubric = {"criteria": [{"criterion": "Says 4.", "weight": 3}, {"criterion": "Is short.", "weight": 1}]}
    rows = [{"prompt": "What is 2 + 2?", "response": r, "rubric": rubric} for r in ("4", "five")]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["judge", "--judge", str(tiny_model_dir), "--input", str(src), "--output", str(out),
                 "--mode", "yesno", "--details", "--device", "cpu"]) == 0
    for got in (json.loads(line) for line in out.read_text().splitlines()):
        assert [(c["text"], c["weight"]) for c in got["criteria"]] == [("Says 4.", 0.75), ("Is short.", 0.25)]
        assert got["score"] == pytest.approx(sum(c["weight"] * c["value"] for c in got["criteria"]))
        assert got["reasoning"] is None  # yesno reads probabilities: no reply, no reasoning


def test_the_judge_reply_budget_is_a_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thinking judge needs room to think (the paper's protocol: 16384); the CLI default stays 512."""
    from evolm.backends import loading as models
    from evolm.cli.eval._rubric_judge import rubric_and_judge as _rubric_and_judge

    monkeypatch.setattr(models, "load_backend", lambda spec, **kw: object())
    for extra, expected in (([], 512), (["--judge-max-new-tokens", "16384"], 16384)):
        args = build_parser().parse_args(["eval", "rb2", "d.parquet", "--judge", "J", "--no-rubric",
                                          "--mode", "generative", *extra])
        assert _rubric_and_judge(args)[1].max_new_tokens == expected


def test_judge_show_prompt_paper_config_is_the_authors_prompt(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["judge", "--show-prompt", "--config", str(CONFIGS / "paper-qwen3-8b.yaml")]) == 0
    out = capsys.readouterr().out
    assert "You are an expert evaluator judging answers based on a rubric." in out
    assert "Answer to evaluate: The capital of France is Paris." in out and out.rstrip().endswith("Your evaluation:")
    assert "[ANSWER START]" not in out and "polish" not in out and "not instructions to you" not in out


def test_judge_show_prompt_default_has_the_defences(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["judge", "--show-prompt"]) == 0
    out = capsys.readouterr().out
    assert "mode yesno, prompt evolm, defences on" in out  # the default judge mode
    assert "[ANSWER START]\nThe capital of France is Paris.\n[ANSWER END]" in out
    generative = tmp_path / "generative.yaml"
    generative.write_text("judge:\n  mode: generative\n", encoding="utf-8")
    assert main(["judge", "--show-prompt", "--config", str(generative)]) == 0
    assert "polish earn nothing" in capsys.readouterr().out


def test_judge_without_show_prompt_needs_its_files(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["judge", "--judge", "x"]) == 2
    assert "--input, --output required" in capsys.readouterr().err


def test_the_run_summary_fits_80_columns_without_cutting_a_header(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """`evolm train` ends with a table of its phases; in an 80-column terminal every header is shown whole."""
    from evolm.cli.train import _print_summary

    monkeypatch.setenv("COLUMNS", "80")
    phases = [{"phase": 0, "cycle": 0, "role": "policy", "steps": 1, "reward": 0.258, "reward_std": 0.043,
               "pair_accuracy": None, "rubric_validity": None, "seconds": 127.0},
              {"phase": 1, "cycle": 0, "role": "rubric", "steps": 1, "reward": 0.293, "reward_std": 0.007,
               "pair_accuracy": 0.25, "pair_judgements": 4, "pairs": 1, "rubric_validity": 1.0, "seconds": 292.0}]
    monkeypatch.chdir(tmp_path)
    Path("run").mkdir()
    Path("run", "metrics.jsonl").write_text("", encoding="utf-8")
    _print_summary(Path("run"), phases)
    table = capsys.readouterr().out.splitlines()[:-1]  # the last line is the run directory's, printed plainly
    assert not any("…" in line for line in table) and max(len(line) for line in table) <= 80
    for word in ("cycle", "role", "steps", "reward", "std", "pair", "acc.", "validity", "seconds", "0.293", "292",
                 "pair acc. n: 4 judgements of 1 pair (phase 1)"):
        assert any(word in line for line in table), word


def _long_prompts(path: Path) -> Path:
    """One 60,000-word prompt and 3 short ones."""
    long = " ".join(["lorem", "ipsum", "dolor", "sit"] * 15_000)
    path.write_text("".join(json.dumps({"prompt": q}) + "\n" for q in [long, "What is 2 + 2?", "Write a haiku.",
                                                                        "Why is the sky blue?"]))
    return path


@pytest.mark.slow
def test_dry_run_counts_the_prompts_over_max_prompt_tokens_and_plans_memory_for_the_longest_kept(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from evolm.backends.loading import load_tokenizer
    from evolm.config import load_config
    from evolm.training.prompt_length import fit_prompt_set

    prompts = _long_prompts(tmp_path / "p.jsonl")
    assert main(["train", "--config", str(CONFIGS / "demo-cpu.yaml"), "--dry-run", f"data.prompts={prompts}",
                 "data.max_prompt_tokens=4096"]) == 0
    assert "1 of 4 prompts over data.max_prompt_tokens (4096): skipped" in capsys.readouterr().err
    assert main(["train", "--config", str(CONFIGS / "demo-cpu.yaml"), "--dry-run", f"eval.questions={prompts}",
                 "data.max_prompt_tokens=4096"]) == 0  # held-out questions: the same limit
    captured = capsys.readouterr()
    assert "1 of 4 held-out questions (eval.questions) over data.max_prompt_tokens (4096): skipped" in captured.err
    assert "3 of 4 kept (eval.*;" in captured.out
    # the memory estimate reads a training row of the longest kept prompt (not a fixed 1,024 tokens)
    monkeypatch.setenv("COLUMNS", "250")
    paper = [str(CONFIGS / "paper-qwen3-8b.yaml"), f"data.prompts={prompts}", "data.max_prompt_tokens=4096"]
    longest = fit_prompt_set(load_config(paper[0], paper[1:]), load_tokenizer("smollm2-135m-instruct")).longest
    assert 100 < longest < 4096
    assert main(["train", "--config", *paper, "--dry-run", "--num-processes", "4"]) == 0
    assert f"1 x {longest + 16384:,} tokens, checkpointed" in capsys.readouterr().out
    # labelled pairs: counted too, and the longest kept pair prompt is the memory plan's when it is the longer
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text("".join(json.dumps({"prompt": q, "chosen": "a", "rejected": "b"}) + "\n" for q in
                             [" ".join(["word"] * 3000), " ".join(["lorem", "ipsum", "dolor", "sit"] * 15_000)]))
    labelled = [*paper, "contrast.pairs=labelled", f"data.pairs={pairs}"]
    fit = fit_prompt_set(load_config(labelled[0], labelled[1:]), load_tokenizer("smollm2-135m-instruct"))
    assert (len(fit.pairs), fit.pairs_total) == (1, 2) and longest < fit.longest < 4096
    assert main(["train", "--config", *labelled, "--dry-run", "--num-processes", "4"]) == 0
    captured = capsys.readouterr()
    assert "1 of 2 labelled pairs (data.pairs) over data.max_prompt_tokens (4096): skipped" in captured.err
    assert f"1 x {fit.longest + 16384:,} tokens, checkpointed" in captured.out


@pytest.mark.slow
def test_dry_run_says_when_torch_cannot_drive_the_gpus_nvidia_smi_lists(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import torch
    from fake_gpu import fake_nvidia_smi

    if torch.cuda.is_available():
        pytest.skip("torch drives this machine's GPUs")
    monkeypatch.setenv("PATH", f"{fake_nvidia_smi(tmp_path)}{os.pathsep}{os.environ['PATH']}")
    assert main(["train", "--config", str(CONFIGS / "demo-cpu.yaml"), "--dry-run"]) == 0
    err = capsys.readouterr().err
    assert "nvidia-smi lists 2 GPU(s) but torch" in err and "cannot use them" in err


# ----------------------------------------------------------------------------- flags made from settings


def _config_flags() -> list[tuple[str, argparse.Action]]:
    """Every flag of every command (and subcommand) that sets a config field, with the command's name."""
    from evolm.cli import build_parser

    found: list[tuple[str, argparse.Action]] = []

    def walk(parser: argparse.ArgumentParser, name: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    walk(sub, f"{name} {sub_name}".strip())
            elif hasattr(action, "config_field"):
                found.append((name, action))

    walk(build_parser(), "")
    return found


def test_every_flag_that_sets_a_config_field_is_made_from_that_field() -> None:
    """Name, type, range, default, choices and help of a config-field flag come from the settings field; a command's
    own default or narrower choices are named with a reason (``Flag.why``)."""
    from evolm.cli.flags import field_default, field_of
    from evolm.config.messages import choices as field_choices

    flags = _config_flags()
    commands = {name for name, _ in flags}
    assert {"judge", "serve", "rubric", "eval rb2", "eval pairs"} <= commands and len(flags) >= 120
    for command, action in flags:
        cls, name, spec = action.config_field
        field, where = field_of(cls, name), f"evolm {command} {action.option_strings[0]} ({cls.__name__}.{name})"
        default = field_default(field)
        assert action.dest == spec.destination(field), where
        assert action.help.startswith(field.description.replace("%", "%%")), where
        if action.default != default:
            assert spec.why and action.default == spec.default, f"{where}: default {action.default!r} unexplained"
        choices = field_choices(field)
        if action.choices is not None and choices is not None and set(action.choices) != set(choices):
            assert spec.why and set(action.choices) < set(choices), f"{where}: choices differ from the field's"
        if isinstance(default, bool):
            assert action.nargs == 0 and action.const is (not default), where  # store_true / store_false
        elif (value := action.default if spec.why else default) is not None:  # the default the command reads
            parse = action.type or str
            assert parse(str(value)) == value and type(parse(str(value))) is type(value), where
            assert default is None or type(value) is type(default), where  # the field's type


def test_every_flag_refuses_what_its_field_refuses() -> None:
    """A flag made from a numeric field takes the field's range (``Field(ge=...)``): a value just outside a bound is
    argparse's one-line error saying that range, at parsing, before any model loads (``--judge-cache -1`` was taken
    and ``--max-criteria`` had its own copy of the range)."""
    from evolm.config.messages import range_text

    checked = set()
    for command, action in _config_flags():
        cls, name, spec = action.config_field
        field = cls.model_fields[name]
        if spec.type is not None or not (bounds := range_text(field.metadata)):
            continue
        for c in field.metadata:
            for attr, step in (("ge", -1), ("gt", 0), ("le", 1), ("lt", 0)):  # a value just outside each bound
                if (bound := getattr(c, attr, None)) is not None:
                    with pytest.raises(argparse.ArgumentTypeError) as e:
                        action.type(str(bound + step))
                    assert str(e.value).endswith(f"{bounds}, not {bound + step}"), (command, name, str(e.value))
                    checked.add(f"{cls.__name__}.{name}")
    assert {"JudgeConfig.cache", "RubricConfig.max_criteria", "RunConfig.seed", "RubricConfig.top_p",
            "ServeSettings.max_wait_ms", "ServeSettings.threads"} <= checked and len(checked) >= 30, checked


def test_the_flags_set_the_fields_they_are_made_from() -> None:
    """Parsed flags read back into the settings they came from (what judge_from_args and serve do)."""
    from evolm.cli import build_parser
    from evolm.cli._common import JUDGE_CONSTRAINED, JUDGE_FLAGS, REQUEST_FLAGS
    from evolm.cli.flags import field_values
    from evolm.cli.serve import BATCH_FLAGS, LIMIT_FLAGS
    from evolm.config import JudgeConfig
    from evolm.serve.settings import ServeSettings

    args = build_parser().parse_args(["serve", "--judge", "j", "--mode", "prob", "--judge-max-new-tokens", "7",
                                      "--no-judge-defences", "--request-deadline", "9", "--max-batch", "3",
                                      "--body-timeout-s", "1.5"])
    judge = field_values(args, JudgeConfig, (*JUDGE_FLAGS, *REQUEST_FLAGS))
    assert (judge["mode"], judge["max_new_tokens"], judge["defences"], judge["deadline"]) == ("prob", 7, False, 9.0)
    settings = ServeSettings(**field_values(args, ServeSettings, (*BATCH_FLAGS, *LIMIT_FLAGS)))
    assert (settings.max_batch, settings.body_timeout_s, settings.max_queue) == (3, 1.5, ServeSettings().max_queue)
    for argv in (["judge", "--constrained"], ["serve", "--judge", "j", "--judge-constrained"],
                 ["eval", "pairs", "p.jsonl", "--judge-constrained"]):  # the judge's flag, whatever its name
        assert field_values(build_parser().parse_args(argv), JudgeConfig, [JUDGE_CONSTRAINED]) == {"constrained": True}
    rubric = build_parser().parse_args(["serve", "--judge", "j", "--constrained"])  # serve: the rubric writer's flag
    assert field_values(rubric, JudgeConfig, [JUDGE_CONSTRAINED]) == {"constrained": False} and rubric.constrained
