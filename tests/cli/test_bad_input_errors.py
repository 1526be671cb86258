r"""Bad inputs end in one error line and exit status 2, never a traceback, and destroy nothing: every kind, in one place.

Each case runs the real code path (``evolm.cli.main`` in-process, a subprocess where stdin or a
kill is the point, or the library function the CLI calls) and asserts: one
error line and exit status 2, inputs left byte for byte as they were, no model loaded for a
mistake that needs none, bounded time. Where another test file already covers a case exactly, the
table names it instead of repeating it.

| case | where |
| --- | --- |
| `--resume` with a corrupt `model.safetensors`: no log cut before the checkpoint loads | `CLI_CASES` resume-corrupt-weights; tests/training/test_run.py::test_resume_touches_nothing_until_the_checkpoint_loaded, ::test_resume_falls_back_past_a_corrupt_checkpoint |
| a 27k / 200k-character answer past the judge's context | `test_a_200k_character_answer_is_cut_in_bounded_time`; tests/backends/test_context.py (27k, refuse, untouched short answers) |
| `report --output RUN/metrics.jsonl`, `rb2 --from-scores s --output s`, `stats r --output r` | tests/runs/test_output_safety.py::test_every_command_refuses_output_equal_to_an_input, ::test_rb2_from_scores_refuses_to_overwrite_its_input |
| symlink, FIFO, `/dev/stdout` written through | tests/runs/test_jsonl.py::test_a_symlink_is_written_through_to_its_target, ::test_fifos_devices_and_std_streams_are_written_through |
| quadratic `strip_thinking` / `parse_rubric` / `format_validity` / `parse_judge_score` | tests/judge/test_steering.py::test_parsing_is_fast_on_adversarial_text (12 inputs x 5 parsers), ::test_parse_judge_score_on_megabytes_of_braces_is_linear; here `test_judge_prompts_are_built_in_linear_time` (what every judged answer also goes through) |
| HTTP 200 with HTML / invalid JSON / `{"choices": "nope"}` | `test_a_reply_that_is_no_chat_completion_is_one_line_through_the_cli` (and tests/backends/test_openai.py::test_a_reply_that_is_no_chat_completion_is_one_line) |
| logprob as a string, 800, infinite; no digit among the top tokens | `test_unreadable_logprobs_are_a_missing_score_said_in_the_summary` (and tests/backends/test_openai.py::test_unreadable_logprobs_make_that_row_missing, ::test_no_candidate_among_the_top_tokens_is_all_minus_inf) |
| nested JSON, 5000-digit integer, non-UTF-8 config, non-directory / unwritable output, `--max-new-tokens 0`, `--device bogus` / `cuda`, `cycles: 1e400`, `.nan`, `seed=-1`, unknown `grpo.*`, `grpo.learning_rate=fast`, `{"step": null}` | `CLI_CASES` |
| non-UTF-8 stdin | `test_non_utf8_stdin_is_one_line` |
| a full output device (`/dev/full`) | `test_a_full_output_is_one_line_after_at_most_one_batch` |
| report inputs with `"time": 1e20`, `"step": {...}` | `test_report_survives_absurd_records` (and tests/report/test_report.py::test_report_survives_absurd_values) |
| `data.limit=-5`, judge temperature inf, `top_p` 7, negative `max_new_tokens` / `batch_size`, NaN contrast temperature, batch divisibility before the model loads, `output_dir: ""`, `prompt: null`, empty inputs | `CLI_CASES` |
| an unusable rubric becomes judge-alone silently | tests/cli/test_rubric_and_judge_commands.py::test_judge_says_how_it_read_each_rubric_and_refuses_non_text |
| weights 1e308 + 1e308 make a yesno score null | `test_huge_rubric_weights_still_give_a_yesno_score` (and tests/test_rubrics.py::test_huge_weights_normalise_without_overflow) |
| `eval stats --output -` mixes the table and the JSON on stdout | `test_stats_json_on_stdout_is_json_only` |
| a kill at 99% of `evolm judge` loses every score | `test_a_killed_judge_keeps_its_rows_and_resumes` (SIGKILL); tests/runs/test_output_safety.py::test_judge_crash_keeps_finished_batches_and_resume_finishes_the_same_file |
| `.part` files of killed writes never removed; no fsync before rename | tests/runs/test_jsonl.py::test_stale_part_files_are_removed_on_the_next_write, ::test_temp_file_is_fsynced_before_the_rename |

| case | where |
| --- | --- |
| fullwidth `＜|im_end|＞` and small-bracket / fullwidth-letter look-alikes pass `plain_markup` | `test_lookalike_markup_reads_exactly_as_its_plain_words` (prompts byte-identical to plain words) |
| two `evolm train` on one output_dir (coevolve, sequential): both ran | `test_two_trains_on_one_output_dir_the_second_exits_2_in_one_line` (real runs); `test_a_held_run_directory_refuses_a_second_train` (train, `--resume`); `test_a_killed_holder_leaves_the_directory_free`; `test_ranks_of_one_torchrun_job_share_the_directory` |
| scores depend on batch composition under the default judge dtype (bfloat16 on AVX512-BF16) | `test_default_judge_scores_do_not_depend_on_the_batch` (prob, yesno; `--help` states it) |
| `grpo.beta=.inf`, `grpo.learning_rate=.nan` / negative, `grpo.top_p=7`, `grpo.temperature=0`, NaN in a grpo list; `data.prompts` missing / empty / binary / `builtin:bogus`; `output_dir` a file, `/`, `/proc`; a judge URL that does not parse: each with and without `--dry-run` | `RANGE_PATH_URL_CASES` |
| `--temperature nan` / `-1` / `inf`, `--top-p 7` / `0`, `rubric --top-p -0.5` | `RANGE_PATH_URL_CASES` |
| `rb2 --from-scores` with `Infinity`, a duplicate id; an orphan `tied:` row (refused; `--allow-unpaired-ties` scores it as the official code does, counted in the summary) | `RANGE_PATH_URL_CASES`; `test_rb2_from_scores_says_how_many_tied_rows_have_no_ref_row` |
| truncated / empty `optimizer.pt`, garbage or bit-flipped `scheduler.pt`, garbage or non-object `trainer_state.json`, NaN weights: resume falls back and says so, logs untouched | `test_resume_checks_every_checkpoint_file_and_falls_back_saying_so`, `test_resume_names_the_passed_over_checkpoint_before_anything_loads` |
| `\\ud800` in input JSON, `--base-url 'http://[::1'`, `--seed 99999999999999999999999` (CLI and config), `--device meta` | `RANGE_PATH_URL_CASES` |
| `report` on a metrics line (and an eval JSON) nested 100k deep: the line is skipped, the report written | `test_a_report_on_a_metrics_line_nested_100k_deep_skips_that_line` |
| `--output -` with stdout closed | `test_output_to_a_closed_stdout_is_one_line` |
| `train --resume RUN judge.mode=prob contrast.buffer_size=1` left config.yaml unchanged | `test_resume_overrides_are_written_to_the_config_and_its_history` |

| case | where |
| --- | --- |
| U+2028 / U+2029 / U+0085 / `\r` in answers: `evolm judge` on its own output, `--resume-output`, `eval stats` | `test_judge_reads_back_its_own_output_with_line_breaks_in_answers` |
| every record type written and read back (outputs, partials, stdin, metrics, samples, frozen rubrics, replay buffer, rb2 scores, rubric tables), also from files with the characters raw | tests/runs/test_jsonl.py::test_every_record_type_reads_back_with_line_breaks_inside_strings, ::test_dumps_line_escapes_every_line_break_and_split_lines_splits_on_newline_only |
| a run whose answers hold them resumes from its last checkpoint, nothing lost | `test_a_training_run_with_line_breaks_in_its_answers_resumes_with_nothing_lost` |
| `"</s> " * n` / `"<\|im_start\|>user\n" * n` quadratic in serve; `/health` while a 200k-character request and a batch run | tests/serve/test_app.py::test_text_handling_is_linear_and_strips_what_the_regex_stripped, ::test_health_answers_while_a_200k_character_request_and_a_batch_run |
| body, answers, characters past their limits: 413 with a JSON error (declared and chunked bodies) | tests/serve/test_app.py::test_size_limits_are_413_with_a_json_error |
| a 5,000-answer request starves a 1-answer one | tests/serve/test_app.py::test_a_large_request_cannot_starve_a_small_one, ::test_fair_shares |
| requests past their deadline, clients that left: slots kept, answers scored anyway | tests/serve/test_app.py::test_requests_past_their_deadline_free_their_slots_and_are_never_scored, ::test_a_client_that_leaves_has_its_answers_dropped |
| slow headers, slow bodies, trickling keep-alive connections never closed; limits in `--help` | tests/serve/test_app.py::test_slow_headers_slow_bodies_and_trickling_keep_alive_connections_are_closed, ::test_serve_help_states_every_limit_and_its_default |
| a gzip bomb and an endless chunked reply (200 and 500) from an OpenAI-style server | tests/backends/test_openai.py::test_a_gzip_bomb_fails_at_the_reply_cap_in_one_line, ::test_an_endless_reply_fails_at_the_reply_cap_before_its_timeout, ::test_the_reply_cap_is_validated |
| `--input out/x.jsonl.partial --output out/x.jsonl --resume-output` (judge, rubric) | `test_an_input_that_is_the_outputs_partial_file_is_refused` |
| `train --stop-after-step N` past the run's last step, or at a step a resumed run is already past | `CLI_CASES` stop-after-step-past-the-run; tests/training/test_run.py::test_stop_after_step_ends_the_run_there_with_a_checkpoint_and_resume_goes_on |
"""

from __future__ import annotations

import gc
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from evolm.cli import main
from evolm.runs.jsonl import read_jsonl
from evolm.scores import scores_of

NO_MODEL = "/nonexistent/evolm-model"  # a mistake must be caught before this is looked for
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


# ----------------------------------------------------------------------------- one line, exit 2, inputs unchanged


def _resume_run(run: Path, state: dict | None, weights_ok: bool) -> None:
    """A run directory whose only checkpoint is broken: garbage weights, or the given evolm_state.json."""
    import torch
    from safetensors.torch import save_file

    from evolm.config import load_config
    from evolm.runs.records import BUFFER_FILE, STATE_FILE
    from evolm.runs.rundir import save_config

    ckpt = run / "checkpoints" / "checkpoint-4"
    ckpt.mkdir(parents=True)
    save_config(load_config(None, [f"output_dir={run}", f"model.name={NO_MODEL}"]), run / "config.yaml")
    (ckpt / "trainer_state.json").write_text("{}")
    (ckpt / BUFFER_FILE).write_text(json.dumps({"step": 0, "question": "q", "answer": "a"}) + "\n")
    if weights_ok:
        save_file({"w": torch.zeros(1)}, str(ckpt / "model.safetensors"))
    else:
        (ckpt / "model.safetensors").write_bytes(b"\x00garbage")
    (ckpt / STATE_FILE).write_text(json.dumps(state if state is not None else {"step": 4}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, 11)))


@dataclass
class Case:
    """Files to create (text or bytes; ``setup`` for more), the argv (``{tmp}`` and ``{tiny}`` filled in), the error."""

    id: str
    argv: list[str]
    message: str
    files: dict[str, str | bytes] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None
    marks: tuple = ()


ANSWER = '{"prompt": "What is 2 + 2?", "response": "4"}\n'
TRAIN = ["train", "--config", "{tmp}/c.yaml"]
CONFIG = f"output_dir: {{tmp}}/run\nmodel:\n  name: {NO_MODEL}\n"  # a model load would fail differently
JUDGE = ["judge", "--judge", NO_MODEL, "--input", "{tmp}/in.jsonl", "--output", "{tmp}/out.jsonl"]


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


CLI_CASES = [
    # resume touches nothing until a checkpoint validates
    Case("resume-corrupt-weights", ["train", "--resume", "{tmp}/run"], "no checkpoint validates",
         setup=lambda tmp: _resume_run(tmp / "run", None, weights_ok=False)),
    # tracebacks instead of one line
    Case("resume-step-null", ["train", "--resume", "{tmp}/run"], "corrupt checkpoint state",
         setup=lambda tmp: _resume_run(tmp / "run", {"step": None}, weights_ok=True)),
    Case("nested-json", JUDGE, "nested too deeply",
         {"in.jsonl": '{"prompt": ' + "[" * 100_000 + "]" * 100_000 + ', "response": "a"}\n'}),
    Case("5000-digit-integer", JUDGE, "unreadable JSON", {"in.jsonl": '{"prompt": ' + "9" * 5000 + "}\n"}),
    Case("non-utf8-config", TRAIN, "not UTF-8", {"c.yaml": b"seed: \xff\xfe\n"}),
    Case("judge-output-under-a-file", [*JUDGE[:-1], "{tmp}/afile/out.jsonl"], "afile is not a directory",
         {"in.jsonl": ANSWER, "afile": "x"}),
    Case("rubric-output-under-a-file", ["rubric", "--model", NO_MODEL, "--input", "{tmp}/in.jsonl", "--output", "{tmp}/afile/r.jsonl"],
         "afile is not a directory", {"in.jsonl": ANSWER, "afile": "x"}),
    Case("unwritable-output", [*JUDGE[:-1], "/proc/evolm-test/out.jsonl"], "cannot write there",
         {"in.jsonl": ANSWER}),
    Case("eval-output-under-a-file", ["eval", "pairs", "{tmp}/p.jsonl", "--judge", NO_MODEL, "--no-rubric", "--output", "{tmp}/afile/r.json"],
         "afile is not a directory", {"p.jsonl": '{"prompt": "p", "chosen": "a", "rejected": "b"}\n', "afile": "x"}),
    Case("max-new-tokens-0", ["rubric", "--model", NO_MODEL, "--input", "{tmp}/in.jsonl", "--output",
                                 "{tmp}/r.jsonl", "--max-new-tokens", "0"], "must be an integer >= 1",
         {"in.jsonl": ANSWER}),
    Case("device-bogus", ["judge", "--judge", "{tiny}", "--input", "{tmp}/in.jsonl", "--output", "{tmp}/o.jsonl",
                             "--device", "bogus"], "unknown device 'bogus'", {"in.jsonl": ANSWER}),
    Case("device-cuda-without-gpu", ["judge", "--judge", "{tiny}", "--input", "{tmp}/in.jsonl", "--output",
                                        "{tmp}/o.jsonl", "--device", "cuda"], "not available here",
         {"in.jsonl": ANSWER}, marks=(pytest.mark.skipif("_cuda()", reason="this machine has a GPU"),)),
    Case("cycles-1e400", TRAIN, "'schedule.cycles' must be a finite number",
         {"c.yaml": CONFIG + "schedule:\n  cycles: 1e400\n"}),
    Case("temperature-nan", TRAIN, "'judge.temperature' must be a finite number",
         {"c.yaml": CONFIG + "judge:\n  temperature: .nan\n"}),
    Case("seed-minus-1", [*TRAIN, "seed=-1"], "seed must be >= 0", {"c.yaml": CONFIG}),
    Case("stop-after-step-past-the-run", [*TRAIN, "--stop-after-step", "100000"],
         "--stop-after-step 100000: the run has steps 1 to 1000", {"c.yaml": CONFIG}),
    Case("unknown-grpo-key", [*TRAIN, "grpo.learning_rat=1e-5"], "grpo.learning_rat is not a TRL GRPOConfig setting",
         {"c.yaml": CONFIG}),
    Case("grpo-learning-rate-fast", [*TRAIN, "grpo.learning_rate=fast"], "grpo.learning_rate must be a number",
         {"c.yaml": CONFIG}),
    # accepted and wrong
    Case("data-limit-minus-5", [*TRAIN, "data.limit=-5"], "data.limit must be >= 0", {"c.yaml": CONFIG}),
    Case("judge-temperature-inf", [*TRAIN, "judge.temperature=.inf"], "must be a finite number",
         {"c.yaml": CONFIG}),
    Case("judge-top-p-7", [*TRAIN, "judge.top_p=7"], "judge.top_p must be in (0, 1]", {"c.yaml": CONFIG}),
    Case("negative-max-new-tokens", [*TRAIN, "judge.max_new_tokens=-1"], "judge.max_new_tokens must be >= 1",
         {"c.yaml": CONFIG}),
    Case("negative-batch-size", [*TRAIN, "judge.batch_size=-2"], "judge.batch_size must be >= 1",
         {"c.yaml": CONFIG}),
    Case("contrast-temperature-nan", [*TRAIN, "contrast.temperature=.nan"],
         "'contrast.temperature' must be a finite number", {"c.yaml": CONFIG}),
    Case("batch-not-divisible", [*TRAIN, "grpo.per_device_train_batch_size=3"],
         "must be a multiple of grpo.per_device_train_batch_size", {"c.yaml": CONFIG}),
    Case("output-dir-empty", [*TRAIN, "output_dir="], "output_dir must name a directory", {"c.yaml": CONFIG}),
    Case("prompt-null", JUDGE, "'prompt' must be text, not NoneType", {"in.jsonl": '{"prompt": null, "response": "a"}\n'}),
    Case("judge-empty-input", JUDGE, "no rows", {"in.jsonl": ""}),
    Case("rubric-empty-input", ["rubric", "--model", NO_MODEL, "--input", "{tmp}/in.jsonl", "--output",
                                   "{tmp}/r.jsonl"], "no rows", {"in.jsonl": "\n"}),
    Case("pairs-empty-input", ["eval", "pairs", "{tmp}/p.jsonl", "--judge", NO_MODEL, "--no-rubric"], "no pairs",
         {"p.jsonl": ""}),
    Case("rb2-empty-input", ["eval", "rb2", "{tmp}/rb2.jsonl", "--judge", NO_MODEL, "--no-rubric"], "no rows",
         {"rb2.jsonl": ""}),
    # deep nesting, recursive aliases, inputs that are not regular files: one line, not a traceback
    Case("seed-rubric-nested-100k", ["sft-rubrics", "--model", NO_MODEL, "--output", "{tmp}/w", "--seed-set",
                                         "{tmp}/seed.jsonl"], "seed.jsonl:1: 'rubric' is JSON nested too deeply",
         {"seed.jsonl": json.dumps({"prompt": "Q", "rubric": "[" * 100_000 + "]" * 100_000}) + "\n"}),
    Case("recursive-yaml-alias", TRAIN, "c.yaml: a YAML alias that holds itself",
         {"c.yaml": "loop: &a [*a]\n" + CONFIG}),
    Case("recursive-yaml-alias-dry-run", [*TRAIN, "--dry-run"], "c.yaml: a YAML alias that holds itself",
         {"c.yaml": CONFIG + "judge:\n  chat_template_kwargs: &a\n    x: *a\n"}),
    Case("recursive-yaml-alias-override", [*TRAIN, "--dry-run", "judge.chat_template_kwargs=&a {x: *a}"],
         "override 'judge.chat_template_kwargs': a YAML alias that holds itself", {"c.yaml": CONFIG}),
    Case("yaml-nested-100k", [*TRAIN, "--dry-run"], "c.yaml: YAML nested too deeply",
         {"c.yaml": CONFIG + "x: " + "[" * 100_000 + "]" * 100_000 + "\n"}),
    Case("judge-input-dev-null", [*JUDGE[:4], "/dev/null", *JUDGE[5:]], "/dev/null: is not a regular file"),
    Case("judge-input-fifo", [*JUDGE[:4], "{tmp}/fifo", *JUDGE[5:]], "fifo: is not a regular file",
         setup=lambda tmp: os.mkfifo(tmp / "fifo")),
    Case("judge-input-directory", [*JUDGE[:4], "{tmp}/adir", *JUDGE[5:]], "adir: is a directory, not a file",
         setup=lambda tmp: (tmp / "adir").mkdir()),
]


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _main(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:  # argparse's usage errors
        return int(e.code or 0)


@pytest.mark.slow
@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in CLI_CASES])
def test_bad_input_is_one_line_exit_2_and_touches_no_input(case: Case, tmp_path: Path, tiny_model_dir: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    for name, content in case.files.items():
        path = tmp_path / name
        text = content.replace("{tmp}", str(tmp_path)) if isinstance(content, str) else content
        path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    if case.setup is not None:
        case.setup(tmp_path)
    before = _snapshot(tmp_path)
    start = time.monotonic()
    code = _main([a.replace("{tmp}", str(tmp_path)).replace("{tiny}", str(tiny_model_dir)) for a in case.argv])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("evolm")]
    assert code == 2, (case.id, err)
    assert len(lines) == 1 and case.message in lines[0], (case.id, err)
    assert "Traceback" not in err
    assert _snapshot(tmp_path) == before, case.id  # no input touched, no output left
    assert time.monotonic() - start < 60


@pytest.mark.slow
def test_non_utf8_stdin_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "evolm.cli", "judge", "--judge", NO_MODEL, "--input", "-", "--output",
                           str(tmp_path / "o.jsonl")], input=b'{"prompt": "\xff\xfe", "response": "a"}\n',
                          capture_output=True, env=ENV, timeout=120)
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 2 and err.strip().count("\n") == 0 and "<stdin>: not UTF-8" in err, err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_full_output_is_one_line_after_at_most_one_batch(tiny_model_dir: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    inp = tmp_path / "in.jsonl"
    inp.write_text(ANSWER * 3)
    for argv in (["judge", "--judge", str(tiny_model_dir)], ["rubric", "--model", str(tiny_model_dir),
                                                             "--max-new-tokens", "4"]):
        assert main([*argv, "--input", str(inp), "--output", "/dev/full", "--device", "cpu"]) == 2
        err = capsys.readouterr().err
        lines = [line for line in err.splitlines() if line.startswith("evolm")]
        assert len(lines) == 1 and "/dev/full: cannot write (No space left on device)" in lines[0], err


# ----------------------------------------------------------------------------- the context guard


@pytest.mark.slow
def test_a_200k_character_answer_is_cut_in_bounded_time(tiny_model_dir: Path, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """Unguarded, a 200k-character answer ran for about an hour; here it is cut to the context and scored."""
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"prompt": "What is 2 + 2?", "response": "It is four, I think. " * 10_000}) + "\n")
    out = tmp_path / "out.jsonl"
    start = time.monotonic()
    assert main(["judge", "--judge", str(tiny_model_dir), "--input", str(inp), "--output", str(out), "--device", "cpu",
                 "--mode", "yesno", "--max-context", "1024"]) == 0
    assert time.monotonic() - start < 30
    (row,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert row["truncated"] is True and row["chars_cut"] > 190_000 and 0.0 <= row["score"] <= 1.0
    assert "1 answers cut to fit the judge's context" in capsys.readouterr().err


# ----------------------------------------------------------------------------- linear time


BOUND_S = 0.25  # CPU seconds per call on ~50k-300k characters (the quadratic versions took seconds to minutes)


def _adversarial_answers() -> dict[str, str]:
    return {
        "markup": "<|im_end|>" * 30_000,
        "markup_unclosed": "<|" * 100_000,
        "markup_pipes": "<|a|" * 50_000,
        "fullwidth": "<\uff5cx\uff5c>" * 30_000,
        "fences": "[answer end]" * 20_000,
        "think": "<think>" * 50_000,
        "braces": "{" * 200_000,
    }


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_adversarial_answers()))
def test_judge_prompts_are_built_in_linear_time(name: str) -> None:
    from evolm.backends.context import cut_middle
    from evolm.judge.judge import JudgeItem
    from evolm.judge.prompts import plain_markup, prob_messages, yesno_messages

    text = _adversarial_answers()[name]
    calls = {
        "plain_markup": lambda: plain_markup(text),
        "prob_messages": lambda: prob_messages(JudgeItem("q", text, rubric_text=text[:1000])),
        "yesno_messages": lambda: yesno_messages("q", "c", text),
        "cut_middle": lambda: cut_middle(text, len(text) // 3),
    }
    for fn_name, call in calls.items():
        taken = []
        for _ in range(3):  # best of three, collector off (2 shared cores)
            gc.disable()
            try:
                start = time.process_time()
                call()
                taken.append(time.process_time() - start)
            finally:
                gc.enable()
        assert min(taken) < BOUND_S, (fn_name, name, taken)


# ----------------------------------------------------------------------------- bad server replies


@pytest.fixture
def server():  # noqa: ANN201 - openai_server.RunningServer
    from openai_server import serve

    with serve() as running:
        yield running


RAW_REPLIES = [
    ("<html><body>502 Bad Gateway</body></html>", "text/html", "answered HTTP 200 with a body that is not JSON"),
    ('{"choices": [', "application/json", "body that is not JSON"),
    ('{"choices": "nope"}', "application/json", "no 'choices' list"),
    ('{"choices": ' + "[" * 200_000 + "]" * 200_000 + "}", "application/json", "JSON nested too deeply"),  # issue 58
]


@pytest.mark.parametrize(("body", "content_type", "message"), RAW_REPLIES,
                         ids=["html", "invalid-json", "choices-nope", "nested-200k"])
def test_a_reply_that_is_no_chat_completion_is_one_line_through_the_cli(
    server, tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, content_type: str, message: str  # noqa: ANN001
) -> None:
    server.state.raw_body, server.state.raw_content_type = body, content_type
    inp = tmp_path / "in.jsonl"
    inp.write_text(ANSWER)
    code = main(["judge", "--judge", "test-echo-model", "--backend", "openai", "--base-url", server.base_url,
                 "--input", str(inp), "--output", str(tmp_path / "o.jsonl"), "--max-retries", "0", "--no-rubric"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("evolm")]
    assert code == 2 and len(lines) == 1 and message in lines[0] and "Traceback" not in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl"]


@pytest.mark.parametrize("table", [
    [("7", "-0.1"), ("3", -2.0)],  # a logprob given as a string
    [("7", 800.0), ("3", -2.0)],  # positive: was an OverflowError
    [("7", math.inf), ("3", -2.0)],  # infinite: was "score": NaN with exit 0
    [("Maybe", -0.1), ("The", -2.0)],  # no digit among the top tokens: was a silent 0.5
], ids=["string", "positive-800", "infinite", "no-digit"])
def test_unreadable_logprobs_are_a_missing_score_said_in_the_summary(
    server, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, table: list  # noqa: ANN001
) -> None:
    import openai_server

    monkeypatch.setitem(openai_server.TOP_LOGPROBS, "rate", table)  # the prob prompt's first word
    inp = tmp_path / "in.jsonl"
    inp.write_text(ANSWER)
    out = tmp_path / "o.jsonl"
    assert main(["judge", "--judge", "test-echo-model", "--backend", "openai", "--base-url", server.base_url,
                 "--input", str(inp), "--output", str(out), "--no-rubric", "--mode", "prob"]) == 0
    text = out.read_text()
    assert "NaN" not in text and json.loads(text)["score"] is None
    assert "(1 without a readable score)" in capsys.readouterr().err


# ----------------------------------------------------------------------------- results that were wrong


def test_report_survives_absurd_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        '{"step": 1, "role": "policy", "time": 1e20, "reward_mean": 0.5}\n'
        '{"step": {"a": 1}, "role": "policy", "time": -1e30, "reward_mean": "x"}\n')
    assert main(["report", str(run)]) == 0
    assert (run / "report.html").is_file() and "Traceback" not in capsys.readouterr().err


def test_huge_rubric_weights_still_give_a_yesno_score() -> None:
    from evolm.judge.judge import Judge, JudgeItem
    from evolm.rubrics import Rubric

    class Backend:
        name = "stub"

        def next_token_logprobs(self, conversations, candidates, **kw):  # noqa: ANN001, ANN201
            return [{"Yes": math.log(0.75), "No": math.log(0.25)} for _ in conversations]

    rubric = Rubric.from_obj({"criteria": [{"criterion": "a", "weight": 1e308}, {"criterion": "b", "weight": 1e308}]})
    (score,) = scores_of(Judge(Backend(), mode="yesno").score([JudgeItem("q", "a", rubric)]))
    assert score == pytest.approx(0.75)


def test_stats_json_on_stdout_is_json_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rubrics = tmp_path / "r.jsonl"
    rubrics.write_text(json.dumps({"rubric": {"criteria": [{"criterion": "Names Paris.", "weight": 1.0}]}}) + "\n")
    assert main(["eval", "stats", str(rubrics), "--output", "-"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["file"] == str(rubrics)  # the table went to stderr
    assert out.err.strip()


# ----------------------------------------------------------------------------- a kill loses one batch at most


@pytest.mark.slow
def test_a_killed_judge_keeps_its_rows_and_resumes(tiny_model_dir: Path, tmp_path: Path) -> None:
    """SIGKILL once the first batches are on disk; --resume-output then gives the file an unkilled run gives."""
    from evolm.cli._common import WRITE_BATCH

    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"prompt": f"What is {i} + {i}?", "response": str(2 * i)}) + "\n"
                           for i in range(WRITE_BATCH * 4)))
    argv = [sys.executable, "-m", "evolm.cli", "judge", "--judge", str(tiny_model_dir), "--input", str(inp),
            "--device", "cpu", "--mode", "prob", "--batch-size", "16"]
    full = tmp_path / "full.jsonl"
    subprocess.run([*argv, "--output", str(full)], check=True, capture_output=True, env=ENV, timeout=300)
    out, partial = tmp_path / "out.jsonl", tmp_path / "out.jsonl.partial"
    proc = subprocess.Popen([*argv, "--output", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if partial.exists() and partial.read_bytes().count(b"\n") >= WRITE_BATCH:
                break
            time.sleep(0.05)
        if proc.poll() is not None:
            pytest.skip("the run finished before it could be killed (a very fast machine)")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    kept = partial.read_bytes().count(b"\n")
    assert WRITE_BATCH <= kept < WRITE_BATCH * 4 and not out.exists()
    done = subprocess.run([*argv, "--output", str(out), "--resume-output"], capture_output=True, env=ENV, timeout=300,
                          text=True)
    assert done.returncode == 0 and f"resuming: {kept} of {WRITE_BATCH * 4} rows" in done.stderr, done.stderr
    assert out.read_bytes() == full.read_bytes() and not partial.exists()


# ============================================================================= ranges, paths, URLs, locks, checkpoints
# Items 5-10 and 12 of the third round; the cases that are one line and exit 2 run through
# test_non_finite_numbers_bad_paths_and_urls_are_one_line_exit_2 (ids by case).

LOCK_FILE = ".evolm.lock"
RUN_OV = [f"model.name={NO_MODEL}", "output_dir={tmp}/run"]


def _prompts(tmp: Path) -> None:
    (tmp / "p.jsonl").write_text('{"prompt": "Say hi."}\n')


def _train_cases(case_id: str, overrides: list[str], message: str, files: dict | None = None) -> list[Case]:
    """A broken config refused the same way by `train` and by `train --dry-run` (which loads nothing either)."""
    files = {"c.yaml": CONFIG, **(files or {})}
    return [Case(case_id, [*TRAIN, *overrides], message, files),
            Case(f"{case_id}-dry-run", [*TRAIN, "--dry-run", *overrides], message, files)]


def _scores(*rows: str) -> dict[str, str]:
    return {"s.jsonl": "".join(r + "\n" for r in rows)}


_MATH = '{"id": "1", "subset": "Math", "num_correct": 1, "scores": [0.9, 0.1, 0.2, 0.3]}'
RUBRIC = ["rubric", "--model", NO_MODEL, "--input", "{tmp}/in.jsonl", "--output", "{tmp}/r.jsonl"]

RANGE_PATH_URL_CASES = [
    # every number, sampling flag and path checked before any model loads, by --dry-run too
    *_train_cases("grpo-beta-inf", ["grpo.beta=.inf"], "grpo.beta must be a finite number"),
    *_train_cases("grpo-lr-nan", ["grpo.learning_rate=.nan"], "grpo.learning_rate must be a finite number"),
    *_train_cases("grpo-lr-negative", ["grpo.learning_rate=-1e-6"], "grpo.learning_rate must be > 0"),
    *_train_cases("grpo-top-p-7", ["grpo.top_p=7"], "grpo.top_p must be in (0, 1]"),
    *_train_cases("grpo-temperature-0", ["grpo.temperature=0"], "grpo.temperature must be > 0"),
    *_train_cases("grpo-nan-in-a-list", ["grpo.reward_weights=[1.0, .nan]"], "grpo.reward_weights must be a finite"),
    *_train_cases("prompts-missing", ["data.prompts={tmp}/none.jsonl"], "none.jsonl: no such file"),
    *_train_cases("prompts-empty", ["data.prompts={tmp}/p.jsonl"], "p.jsonl: no prompts",
                  {"p.jsonl": ""}),
    *_train_cases("prompts-binary", ["data.prompts={tmp}/p.jsonl"], "p.jsonl: not UTF-8",
                  {"p.jsonl": b"\x00\xff\xfe\x89PNG\r\n"}),
    *_train_cases("prompts-bogus-builtin", ["data.prompts=builtin:bogus"], "builtin:bogus: no such built-in prompt set"),
    *_train_cases("output-dir-a-file", ["output_dir={tmp}/afile"], "afile is a file, not a directory", {"afile": "x"}),
    *_train_cases("output-dir-root", ["output_dir=/"], "output_dir / is the filesystem root or a system directory"),
    *_train_cases("output-dir-proc", ["output_dir=/proc"], "output_dir /proc is the filesystem root or a system"),
    *_train_cases("judge-base-url-ipv6", ["judge.backend=openai", "judge.base_url=http://[::1"],
                  "judge.base_url 'http://[::1' is not a URL"),
    Case("temperature-nan", [*RUBRIC, "--temperature", "nan"], "argument --temperature: must be a finite number",
         {"in.jsonl": ANSWER}),
    Case("temperature-minus-1", [*RUBRIC, "--temperature", "-1"], "argument --temperature: must be a finite number",
         {"in.jsonl": ANSWER}),
    Case("temperature-inf", [*RUBRIC, "--temperature", "inf"], "argument --temperature: must be a finite number",
         {"in.jsonl": ANSWER}),
    Case("top-p-7", [*RUBRIC, "--top-p", "7"], "argument --top-p: must be in (0, 1]", {"in.jsonl": ANSWER}),
    Case("top-p-0", [*RUBRIC, "--top-p", "0"], "argument --top-p: must be in (0, 1]", {"in.jsonl": ANSWER}),
    Case("rubric-top-p-minus-0.5", [*RUBRIC, "--top-p", "-0.5"], "argument --top-p: must be in (0, 1]",
         {"in.jsonl": ANSWER}),
    Case("rb2-infinity-score", ["eval", "rb2", "--from-scores", "{tmp}/s.jsonl"],
         "'scores' must be a non-empty list of finite numbers or nulls",
         _scores('{"id": "1", "subset": "Math", "num_correct": 1, "scores": [Infinity, 0.1, 0.2, 0.3]}')),
    Case("rb2-duplicate-id", ["eval", "rb2", "--from-scores", "{tmp}/s.jsonl"], "id '1' appears twice",
         _scores(_MATH, _MATH.replace("Math", "Safety"))),
    # tracebacks that are now one line
    Case("lone-surrogate", JUDGE, "in.jsonl:1: a lone surrogate escape",
         {"in.jsonl": '{"prompt": "Say hi \\ud800", "response": "a"}\n'}),
    Case("base-url-ipv6", [*JUDGE, "--backend", "openai", "--base-url", "http://[::1"],
         "argument --base-url: URL 'http://[::1' is not a URL", {"in.jsonl": ANSWER}),
    Case("seed-huge", [*RUBRIC, "--seed", "99999999999999999999999"], "argument --seed: must be an integer >= 0",
         {"in.jsonl": ANSWER}),
    Case("train-seed-huge", [*TRAIN, "seed=99999999999999999999999"], "seed must be >= 0 and < 2**32",
         {"c.yaml": CONFIG}),
    Case("device-meta", ["judge", "--judge", "{tiny}", "--input", "{tmp}/in.jsonl", "--output", "{tmp}/o.jsonl",
                             "--device", "meta"], "device 'meta' holds no weights", {"in.jsonl": ANSWER}),
]


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=c.marks) for c in RANGE_PATH_URL_CASES])
def test_non_finite_numbers_bad_paths_and_urls_are_one_line_exit_2(case: Case, tmp_path: Path, tiny_model_dir: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    test_bad_input_is_one_line_exit_2_and_touches_no_input(case, tmp_path, tiny_model_dir, capsys)


def test_rb2_from_scores_says_how_many_tied_rows_have_no_ref_row(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """An orphan ``tied:`` row is refused in one line; with --allow-unpaired-ties it is scored as the official release
    scores it (tests/eval/test_rb2_official.py pins that), not silently: the summary line counts them."""
    scores = tmp_path / "s.jsonl"
    scores.write_text('{"id": "tied:7", "subset": "Ties", "num_correct": 2, "scores": [0.9, 0.8, 0.1]}\n'
                      '{"id": "ref:8", "subset": "Ties", "num_correct": 1, "scores": [0.9, 0.1]}\n')
    assert main(["eval", "rb2", "--from-scores", str(scores)]) == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and "1 Ties 'tied:' row(s) without their 'ref:' row (tied:7)" in err
    assert main(["eval", "rb2", "--from-scores", str(scores), "--allow-unpaired-ties"]) == 0
    assert "; 1 Ties tied: rows without their ref: row (in the tied accuracy only" in capsys.readouterr().err


def test_a_report_on_a_metrics_line_nested_100k_deep_skips_that_line(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "role": "policy", "reward_mean": 0.5}\n'
                                       + '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    (run / "eval").mkdir()
    (run / "eval" / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    assert main(["report", str(run)]) == 0
    assert (run / "report.html").is_file() and "Traceback" not in capsys.readouterr().err


@pytest.mark.slow
def test_output_to_a_closed_stdout_is_one_line(tmp_path: Path) -> None:
    inp = tmp_path / "in.jsonl"
    inp.write_text(ANSWER)
    proc = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", sys.executable, "-m", "evolm.cli", "judge", "--judge",
                           NO_MODEL, "--input", str(inp), "--output", "-"], capture_output=False,
                          stderr=subprocess.PIPE, env=ENV, timeout=120, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == "evolm judge: error: -: stdout is closed; write to a file instead", proc.stderr


# ----------------------------------------------------------------------------- one process per run directory


def _hold_lock(run_dir: Path) -> subprocess.Popen:
    """Another process holding ``run_dir`` as `evolm train` does (``rundir.run_lock``), until killed."""
    code = ("import sys, time; from evolm.runs.rundir import run_lock\n"
            "with run_lock(sys.argv[1]):\n    print('held', flush=True); time.sleep(300)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(run_dir)], stdout=subprocess.PIPE, text=True, env=ENV)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("resume", [False, True], ids=["train", "resume"])
def test_a_held_run_directory_refuses_a_second_train(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     resume: bool) -> None:
    run = tmp_path / "run"
    if resume:
        _resume_run(run, None, weights_ok=True)
    before = _snapshot(tmp_path)
    holder = _hold_lock(run)
    try:
        (tmp_path / "c.yaml").write_text(CONFIG.replace("{tmp}", str(tmp_path)))
        argv = ["train", "--resume", str(run)] if resume else ["train", "--config", str(tmp_path / "c.yaml")]
        assert _main(argv) == 2
        err = capsys.readouterr().err
        assert err.strip() == (f"evolm train: error: {run} is in use by another evolm process (PID {holder.pid}); "
                               "wait for it to end, or choose another output_dir"), err
        assert (run / LOCK_FILE).read_text().strip() == str(holder.pid)  # the holder's lock is untouched
    finally:
        holder.kill()
        holder.wait(timeout=30)
    (run / LOCK_FILE).unlink()  # a killed holder leaves its (unlocked) file behind
    if not resume:
        run.rmdir()
    (tmp_path / "c.yaml").unlink()
    assert _snapshot(tmp_path) == before  # the refused process wrote nothing


@pytest.mark.slow
def test_a_killed_holder_leaves_the_directory_free(tmp_path: Path) -> None:
    from evolm.runs.rundir import run_lock

    holder = _hold_lock(tmp_path / "run")
    holder.kill()
    holder.wait(timeout=30)
    with run_lock(tmp_path / "run"):  # the kernel dropped the lock with the process
        assert (tmp_path / "run" / LOCK_FILE).read_text().strip() == str(os.getpid())
    assert list((tmp_path / "run").iterdir()) == []  # the lock file goes with the lock
    with run_lock(tmp_path / "new"):
        pass
    assert not (tmp_path / "new").exists()  # a directory made only to hold the lock goes with it


@pytest.mark.slow
def test_ranks_of_one_torchrun_job_share_the_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only rank 0 takes the lock: the other ranks of the job train in the directory rank 0 holds."""
    from evolm.runs.rundir import run_lock

    holder = _hold_lock(tmp_path / "run")
    try:
        monkeypatch.setenv("RANK", "1")
        with run_lock(tmp_path / "run"):
            pass
        monkeypatch.setenv("RANK", "0")
        with pytest.raises(Exception, match=f"in use by another evolm process \\(PID {holder.pid}\\)"):
            with run_lock(tmp_path / "run"):
                pass
    finally:
        holder.kill()
        holder.wait(timeout=30)


@pytest.mark.slow
@pytest.mark.parametrize("regime", ["coevolve", "sequential"])
def test_two_trains_on_one_output_dir_the_second_exits_2_in_one_line(tiny_model_dir: Path, tmp_path: Path,
                                                                      regime: str) -> None:
    """Two real `evolm train` on one output_dir: the second is refused while the first trains (a sequential run
    holds its top directory, the stages under it)."""
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "evolm.cli", "train", "--config", str(Path(__file__).parents[2] / "configs" /
            "demo-cpu.yaml"), f"model.name={tiny_model_dir}", f"judge.model={tiny_model_dir}", f"output_dir={run}",
            "schedule.prompts_per_step=2", "schedule.samples_per_prompt=2", "grpo.per_device_train_batch_size=4",
            "grpo.max_completion_length=8", "rubric.max_new_tokens=8", "contrast.max_new_tokens=8", "grpo.report_to=[]",
            "rubric.constrained=false", "schedule.cycles=1", "schedule.steps_per_phase=2", f"schedule.regime={regime}",
            "model.lora.r=0"]
    first = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV)
    try:
        deadline = time.monotonic() + 120
        while not (run / LOCK_FILE).is_file() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert first.poll() is None, first.communicate()[1]
        second = subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=120)
    finally:
        first.terminate()
        first.wait(timeout=60)
    assert second.returncode == 2
    assert second.stderr.strip() == (f"evolm train: error: {run} is in use by another evolm process (PID {first.pid}); "
                                     "wait for it to end, or choose another output_dir"), second.stderr


# ----------------------------------------------------------------------------- every checkpoint file checked


def _two_checkpoints(run: Path) -> Path:
    """A run directory with complete, valid checkpoints 2 and 4 (TRL's files included); returns checkpoint-4."""
    import torch
    from safetensors.torch import save_file

    from evolm.config import load_config
    from evolm.runs.records import BUFFER_FILE, STATE_FILE
    from evolm.runs.rundir import save_config

    run.mkdir()
    save_config(load_config(None, [f"output_dir={run}", f"model.name={NO_MODEL}"]), run / "config.yaml")
    for step in (2, 4):
        ckpt = run / "checkpoints" / f"checkpoint-{step}"
        ckpt.mkdir(parents=True)
        save_file({"w": torch.ones(64)}, str(ckpt / "model.safetensors"))
        torch.save({"state": {0: {"exp_avg": torch.ones(4096)}}, "param_groups": [{"lr": 1e-6}]}, ckpt / "optimizer.pt")
        torch.save({"last_epoch": step, "_last_lr": [1e-6]}, ckpt / "scheduler.pt")
        torch.save({"python": 1, "cpu": torch.zeros(8, dtype=torch.uint8)}, ckpt / "rng_state.pth")
        (ckpt / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
        (ckpt / BUFFER_FILE).write_text(json.dumps({"step": 0, "question": "q", "answer": "a"}) + "\n")
        (ckpt / STATE_FILE).write_text(json.dumps({"step": step}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in range(1, 6)))
    return ckpt


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _nan_weights(path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.full((64,), float("nan"))}, str(path))


def _flip_a_byte_of_the_pickle(path: Path) -> None:
    """Flip one byte of the pickled structure inside a torch.save archive (a corrupt save, same size)."""
    import struct
    import zipfile

    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("data.pkl"))
    name_len, extra_len = struct.unpack("<HH", data[info.header_offset + 26 : info.header_offset + 30])
    data[info.header_offset + 30 + name_len + extra_len + info.file_size // 2] ^= 0xFF
    path.write_bytes(bytes(data))


CORRUPTIONS = {
    "truncated-optimizer": ("optimizer.pt", _truncate, "optimizer.pt: unreadable (BadZipFile"),
    "empty-optimizer": ("optimizer.pt", lambda p: p.write_bytes(b""), "optimizer.pt: unreadable (BadZipFile"),
    "flipped-byte-in-the-pickle": ("scheduler.pt", _flip_a_byte_of_the_pickle, "scheduler.pt: unreadable (BadZipFile"),
    "garbage-scheduler": ("scheduler.pt", lambda p: p.write_bytes(b"\x80\x04garbage"), "scheduler.pt: unreadable"),
    "garbage-trainer-state": ("trainer_state.json", lambda p: p.write_text("{not json"), "trainer_state.json: unreadable"),
    "list-trainer-state": ("trainer_state.json", lambda p: p.write_text("[]"), "not TRL's trainer state"),
    "nan-weights": ("model.safetensors", _nan_weights, "weight w holds NaN or infinite values"),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_resume_checks_every_checkpoint_file_and_falls_back_saying_so(tmp_path: Path, name: str) -> None:
    from evolm.runs.rundir import open_run, resume_config

    run = tmp_path / "run"
    ckpt = _two_checkpoints(run)
    assert open_run(resume_config(run), resume=True).checkpoint == ckpt  # valid as written
    filename, corrupt, message = CORRUPTIONS[name]
    corrupt(ckpt / filename)
    before = _snapshot(run)
    start = open_run(resume_config(run), resume=True)
    assert start.checkpoint == run / "checkpoints" / "checkpoint-2" and start.step == 2
    (why,) = start.skipped
    assert message in why and str(ckpt) in why, why
    assert _snapshot(run) == before  # no log cut, nothing written


def test_resume_names_the_passed_over_checkpoint_before_anything_loads(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    run = tmp_path / "run"
    ckpt = _two_checkpoints(run)
    _truncate(ckpt / "optimizer.pt")
    metrics = (run / "metrics.jsonl").read_bytes()
    assert _main(["train", "--resume", str(run)]) == 2  # NO_MODEL: stops where the model would load
    err = capsys.readouterr().err
    assert f"evolm: passing over a checkpoint that does not validate: {ckpt}/optimizer.pt: unreadable" in err, err
    assert "resuming after step 2" in err and "Traceback" not in err
    assert (run / "metrics.jsonl").read_bytes() == metrics


# ----------------------------------------------------------------------------- resume overrides recorded


def test_resume_overrides_are_written_to_the_config_and_its_history(tmp_path: Path) -> None:
    import yaml

    from evolm.runs.rundir import CONFIG_HISTORY_FILE, open_run, resume_config

    run = tmp_path / "run"
    _two_checkpoints(run)
    open_run(resume_config(run), resume=True)  # no override: nothing written
    assert not (run / CONFIG_HISTORY_FILE).exists()
    open_run(resume_config(run, ["judge.mode=prob", "contrast.buffer_size=4096"]), resume=True)
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert saved["judge"]["mode"] == "prob" and saved["contrast"]["buffer_size"] == 4096
    (entry,) = [json.loads(line) for line in (run / CONFIG_HISTORY_FILE).read_text().splitlines()]
    assert entry["step"] == 4 and entry["changed"] == {"contrast.buffer_size": {"from": 2048, "to": 4096},
                                                       "judge.mode": {"from": "yesno", "to": "prob"}}
    assert resume_config(run).judge.mode == "prob"  # a later plain --resume keeps them
    open_run(resume_config(run), resume=True)
    assert len((run / CONFIG_HISTORY_FILE).read_text().splitlines()) == 1



# ============================================================================ JSONL line breaks, partial files
# evolm's own JSONL files read back whatever their strings hold (a line ends in \n only);
# an input that is the output's partial file is refused, never moved. Serve's limits and the
# OpenAI backend's reply cap are in tests/serve/test_app.py and tests/backends/test_openai.py (header table).

BREAKS = "a\u2028b\u2029c\x85d\re"  # what str.splitlines() broke records on


def _judge_rows(n: int) -> str:
    return "".join(json.dumps({"prompt": f"Question {i}{BREAKS}?", "response": f"Answer {i}{BREAKS}"},
                              ensure_ascii=False) + "\n" for i in range(n))


@pytest.mark.slow
def test_judge_reads_back_its_own_output_with_line_breaks_in_answers(tiny_model_dir: Path, tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """`out.jsonl:1: malformed JSON` no more: judge, judge its output, resume it, rubric + eval stats."""
    src, out, again = tmp_path / "in.jsonl", tmp_path / "out.jsonl", tmp_path / "again.jsonl"
    src.write_text(_judge_rows(3), encoding="utf-8")  # raw U+2028 etc., as other tools write them
    judge = ["judge", "--judge", str(tiny_model_dir), "--mode", "prob", "--device", "cpu", "--dtype", "float32"]
    assert main([*judge, "--input", str(src), "--output", str(out)]) == 0
    assert main([*judge, "--input", str(out), "--output", str(again)]) == 0  # its own output as input
    first, second = read_jsonl(out), read_jsonl(again)
    assert [r["response"] for r in second] == [f"Answer {i}{BREAKS}" for i in range(3)]
    assert [r["score"] for r in second] == [r["score"] for r in first]
    assert main([*judge, "--input", str(src), "--output", str(out), "--resume-output"]) == 0  # reads it back whole
    assert read_jsonl(out) == first and "3 of 3 rows" in capsys.readouterr().err
    rubrics = tmp_path / "rubrics.jsonl"
    assert main(["rubric", "--model", str(tiny_model_dir), "--device", "cpu", "--dtype", "float32",
                 "--max-new-tokens", "8", "--input", str(out), "--output", str(rubrics)]) == 0
    capsys.readouterr()
    assert main(["eval", "stats", str(rubrics)]) == 0, capsys.readouterr().err
    for f in (out, again, rubrics):  # written escaped: whole lines even to a str.splitlines() reader
        text = f.read_text(encoding="utf-8")
        assert text.splitlines() == text.split("\n")[:-1]


@pytest.mark.slow
def test_a_training_run_with_line_breaks_in_its_answers_resumes_with_nothing_lost(
        tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Questions and answers holding U+2028/2029/0085/\\r: resume from the last checkpoint (not an older one for an
    'unreadable replay buffer'), every step logged once, every sample and buffer entry whole. The run's files are
    rewritten raw before resuming (as evolm wrote them before), so the readers are tested, not only the writers."""
    from tiny_run import DEMO, G, P, tiny_overrides

    from evolm.config import load_config
    from evolm.runs.records import BUFFER_FILE
    from evolm.runs.rundir import resume_config
    from evolm.training.contrast import ReplayBuffer
    from evolm.training.run import run
    from evolm.training.step import TrainingSteps

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"Say hi {i}{BREAKS}"}) + "\n" for i in range(4)))
    finish = TrainingSteps.finish
    monkeypatch.setattr(TrainingSteps, "finish", lambda self, rows, completions, *rest: finish(
        self, rows, [c + BREAKS for c in completions], *rest))  # the policy's answers hold them too
    run_dir = tmp_path / "run"
    cfg = load_config(DEMO, tiny_overrides(tiny_model_dir, run_dir, f"data.prompts={prompts}", "schedule.cycles=1",
                                           "schedule.steps_per_phase=2", "schedule.save_every=1",
                                           "grpo.save_total_limit=null"))
    assert run(cfg) == run_dir  # steps 1-2 policy, 3-4 rubric; a checkpoint after each
    shutil.rmtree(run_dir / "checkpoints" / "checkpoint-4")  # as if killed after step 4 was logged, before its save
    for f in [run_dir / "metrics.jsonl", *run_dir.glob("samples/*.jsonl"), *run_dir.glob("checkpoints/*/*.jsonl")]:
        f.write_text(_raw_jsonl(f), encoding="utf-8")
    before = list(ReplayBuffer.load(run_dir / "checkpoints" / "checkpoint-3" / BUFFER_FILE, 100).entries)
    assert len(before) == 2 * P and all(e.answer.endswith(BREAKS) and BREAKS in e.question for e in before)

    starts = []
    assert run(resume_config(run_dir), resume=True, on_start=starts.append) == run_dir
    assert starts[0].checkpoint.name == "checkpoint-3" and starts[0].skipped == []
    assert [r["step"] for r in read_jsonl(run_dir / "metrics.jsonl") if r["role"] != "eval"] == [1, 2, 3, 4]
    rows = [r for f in sorted(run_dir.glob("samples/*.jsonl")) for r in read_jsonl(f)]
    assert sorted(r["step"] for r in rows) == sorted([s for s in (1, 2, 3, 4) for _ in range(P * G)])
    assert all(BREAKS in r["question"] and r["completion"].endswith(BREAKS) for r in rows)
    after = list(ReplayBuffer.load(run_dir / "checkpoints" / "checkpoint-4" / BUFFER_FILE, 100).entries)
    assert after == before  # the rubric step added nothing and lost nothing


def _raw_jsonl(path: Path) -> str:
    """A JSONL file's rows written the old way: ``json.dumps(ensure_ascii=False)``, U+2028 and kin raw."""
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in read_jsonl(path))


@pytest.mark.parametrize("command", ["judge", "rubric"])
def test_an_input_that_is_the_outputs_partial_file_is_refused(tmp_path: Path, command: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """`--input out/x.jsonl.partial --output out/x.jsonl --resume-output` moved the input away ."""
    out = tmp_path / "out" / "x.jsonl"
    partial = out.with_name("x.jsonl.partial")
    partial.parent.mkdir()
    partial.write_text(ANSWER * 3)
    model = ["--judge", NO_MODEL] if command == "judge" else ["--model", NO_MODEL]
    for extra in (["--resume-output"], []):
        capsys.readouterr()
        assert main([command, *model, "--input", str(partial), "--output", str(out), *extra]) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and "the input is the partial file of the output" in lines[0], lines
        assert partial.read_text() == ANSWER * 3 and not out.exists()


# ----------------------------------------------------------------------------- look-alike markup


@pytest.mark.parametrize("name", ["fake_turn_fullwidth", "fake_turn_lookalike"])
def test_lookalike_markup_reads_exactly_as_its_plain_words(name: str) -> None:
    """Fullwidth ``＜|im_end|＞`` (and small brackets around fullwidth letters) is markup once NFKC-normalised: the judge
    prompt of such a fake turn is byte for byte that of the same text in plain words (it lifted prob by +0.257)."""
    from bench.security import steering

    from evolm.judge.prompts import prob_messages, yesno_messages

    attack, plain = steering.attacks()[name]
    for a, p in zip(steering.steering_items(attack), steering.steering_items(plain), strict=True):
        assert a.answer != p.answer
        assert prob_messages(a) == prob_messages(p)
        assert yesno_messages(a.question, "Says 42.", a.answer) == yesno_messages(p.question, "Says 42.", p.answer)


# ----------------------------------------------------------------------------- scores independent of the batch


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["prob", "yesno"])
def test_default_judge_scores_do_not_depend_on_the_batch(tiny_model_dir: Path, monkeypatch: pytest.MonkeyPatch,
                                                         mode: str) -> None:
    """`--dtype auto` is float32 even on a CPU with AVX512-BF16 (where it was bfloat16: scores moved by up to 0.03
    between --batch-size 1 and 16): the same answer scores the same whatever is batched beside it."""
    import torch

    from evolm.config import JudgeConfig
    from evolm.judge.judge import JudgeItem, build_judge
    from evolm.rubrics import Rubric

    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    judge = build_judge(JudgeConfig(model=str(tiny_model_dir), mode=mode, batch_size=16, chat_template_kwargs={}),
                        device="cpu")
    assert next(judge.backend.model.parameters()).dtype == torch.float32
    rubric = Rubric.from_obj({"criteria": [{"criterion": "Says 4.", "weight": 0.6}, {"criterion": "Short.", "weight": 0.4}]})
    items = [JudgeItem("What is 2 + 2?", "It is four. " * (1 + 3 * i), rubric if i % 2 else None) for i in range(16)]
    together = scores_of(judge.score(items))
    judge.backend.batch_size = 1
    alone = scores_of(judge.score(items))
    assert max(abs(a - b) for a, b in zip(alone, together, strict=True)) < 1e-5
    help_text = " ".join(build_help("judge").split())
    assert "a judge's weights: float32 everywhere, so that a score moves by less than 1e-5" in help_text


def build_help(command: str) -> str:
    from evolm.cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    return sub.choices[command].format_help()  # type: ignore[union-attr]


def test_grpo_settings_the_machine_cannot_run_are_one_line(tmp_path: Path) -> None:
    """The paper's grpo settings (bf16) on a CPU machine: transformers' refusal, in one line that says where from."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("bf16 runs on this machine")
    from evolm.config import load_config
    from evolm.errors import RunError
    from evolm.training.run import training_args

    cfg = load_config(None, [f"output_dir={tmp_path / 'run'}"])
    assert cfg.grpo["bf16"] is True
    with pytest.raises(RunError, match=r"^trl.GRPOConfig refused the run's grpo settings: .*bf16") as e:
        training_args(cfg)
    assert "\n" not in str(e.value)


# ----------------------------------------------------------------------------- issue 58, item 7


def test_rank_that_is_not_an_integer_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG.replace("{tmp}", str(tmp_path)))
    monkeypatch.setenv("RANK", "abc")
    assert _main(["train", "--config", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == ("evolm train: error: RANK='abc' is not an integer (a launcher such as torchrun sets it; "
                           "unset it to run one process)"), err


@pytest.mark.slow
def test_a_report_on_a_full_disk_is_one_line_naming_the_path(tmp_path: Path) -> None:
    """The report's file is larger than the disk allows (RLIMIT_FSIZE: writes fail as on a full disk): one line
    naming the path, exit 2, no temporary file left."""
    import resource

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "role": "policy", "reward_mean": 0.5}\n')

    def small_disk() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))

    out = tmp_path / "out.html"
    done = subprocess.run([sys.executable, "-m", "evolm.cli", "report", str(run), "--output", str(out)], env=ENV,
                          preexec_fn=small_disk, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.strip() == f"evolm report: error: {out}: cannot write (File too large)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_a_real_run_refuses_what_the_dry_run_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Settings that contradict each other are refused as the config loads: by a real run as by its dry run."""
    from evolm.cli import main

    bad = ["schedule.regime=coevolve", "rubric.writer=smollm2-135m-instruct", f"output_dir={tmp_path / 'run'}"]
    for dry in (["--dry-run"], []):
        assert main(["train", "--config", str(Path(__file__).resolve().parents[2] / "configs" / "demo-cpu.yaml"), *dry, *bad]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "rubric.writer is a fixed writer" in err
    assert not (tmp_path / "run").exists()  # nothing was made
