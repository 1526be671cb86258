"""`evolm judge` / `evolm rubric` with --backend openai against real local servers that misbehave."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from openai_server import MODEL_ID, RunningServer

from evolm.cli import build_parser, main


def _answers(path: Path) -> Path:
    rows = [{"prompt": "What is 2 + 2?", "response": "4"}, {"prompt": "Name a colour.", "response": "Blue."}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["prob", "generative"])
def test_judge_against_a_server_that_never_replies_ends_within_the_deadline(
    openai_server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: str
) -> None:
    openai_server.state.delay_s = 3600  # accepts every request, answers none
    out = tmp_path / "scored.jsonl"
    start = time.monotonic()
    code = main(["judge", "--judge", MODEL_ID, "--backend", "openai", "--base-url", openai_server.base_url,
                 "--input", str(_answers(tmp_path / "a.jsonl")), "--output", str(out), "--no-rubric",
                 "--mode", mode, "--timeout", "1", "--max-retries", "1"])
    elapsed = time.monotonic() - start
    assert code == 2
    assert elapsed < 15  # two attempts of 1 s and a short wait, plus start-up
    error = capsys.readouterr().err
    lines = [line for line in error.splitlines() if "openai backend" in line]
    assert len(lines) == 1 and "timed out after 1 s (2 attempts" in lines[0]
    assert "Traceback" not in error
    assert not out.exists()


def test_rubric_against_a_server_that_never_replies_ends_within_the_deadline(
    openai_server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    openai_server.state.delay_s = 3600
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"prompt": "What is 2 + 2?"}) + "\n", encoding="utf-8")
    start = time.monotonic()
    code = main(["rubric", "--model", MODEL_ID, "--backend", "openai", "--base-url", openai_server.base_url,
                 "--input", str(prompts), "--output", str(tmp_path / "r.jsonl"), "--timeout", "0.5",
                 "--max-retries", "0"])
    assert code == 2 and time.monotonic() - start < 10
    assert "timed out after 0.5 s (1 attempt," in capsys.readouterr().err
    assert len(openai_server.state.requests) == 1


def test_judge_flags_reach_the_backend(openai_server: RunningServer, tmp_path: Path) -> None:
    out = tmp_path / "scored.jsonl"
    assert main(["judge", "--judge", MODEL_ID, "--backend", "openai", "--base-url", openai_server.base_url,
                 "--input", str(_answers(tmp_path / "a.jsonl")), "--output", str(out), "--no-rubric",
                 "--mode", "prob", "--timeout", "7", "--max-retries", "0"]) == 0
    assert len(out.read_text().splitlines()) == 2


def test_judge_fails_loudly_on_a_failed_request_unless_asked_otherwise(
    openai_server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    openai_server.state.fail_every, openai_server.state.fail_status = 2, 500  # the second request: HTTP 500
    base = ["judge", "--judge", MODEL_ID, "--backend", "openai", "--base-url", openai_server.base_url,
            "--input", str(_answers(tmp_path / "a.jsonl")), "--no-rubric", "--mode", "prob", "--max-retries", "0",
            "--max-concurrency", "1"]
    assert main([*base, "--output", str(tmp_path / "loud.jsonl")]) == 2
    assert "HTTP 500" in capsys.readouterr().err and not (tmp_path / "loud.jsonl").exists()
    openai_server.state.requests.clear()
    assert main([*base, "--output", str(out := tmp_path / "soft.jsonl"), "--judge-failures", "missing"]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    failed = [r for r in rows if "failed" in r]
    assert len(failed) == 1 and failed[0]["score"] is None and "HTTP 500" in failed[0]["failed"]
    assert [r["score"] is not None for r in rows if "failed" not in r] == [True]
    assert "1 of them because the judge request failed" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "value"), [("--timeout", "0"), ("--timeout", "-3"), ("--timeout", "nan"),
                                             ("--max-retries", "-1"), ("--max-retries", "1.5"),
                                             ("--request-deadline", "-1"), ("--request-deadline", "nan"),
                                             ("--max-concurrency", "0"), ("--requests-per-minute", "-5"),
                                             ("--tokens-per-minute", "inf")])
def test_bad_deadline_flags_are_usage_errors(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        build_parser().parse_args(["judge", "--judge", "J", "--input", "i", "--output", "o", flag, value])
    assert info.value.code == 2
    assert flag in capsys.readouterr().err


def test_deadline_flags_default_to_the_config_defaults() -> None:
    from evolm.config import JudgeConfig, RubricConfig

    args = build_parser().parse_args(["judge", "--judge", "J", "--input", "i", "--output", "o"])
    assert (args.timeout, args.max_retries) == (JudgeConfig().timeout, JudgeConfig().max_retries) == (120.0, 2)
    assert (RubricConfig().writer_timeout, RubricConfig().writer_max_retries) == (120.0, 2)
    judge = JudgeConfig()
    assert ((args.deadline, args.max_concurrency, args.requests_per_minute, args.tokens_per_minute)
            == (judge.deadline, judge.max_concurrency, judge.requests_per_minute, judge.tokens_per_minute))


def _many(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "response": f"a{i}"}) + "\n" for i in range(n)),
                    encoding="utf-8")
    return path


@pytest.mark.slow
def test_per_server_limits_reach_the_pool(openai_server: RunningServer, tmp_path: Path) -> None:
    """--max-concurrency and --requests-per-minute hold against a real server (it counts what it sees)."""
    openai_server.state.delay_s = 0.1
    base = ["judge", "--judge", MODEL_ID, "--backend", "openai", "--base-url", openai_server.base_url,
            "--input", str(_many(tmp_path / "a.jsonl", 4)), "--no-rubric", "--mode", "prob"]
    assert main([*base, "--output", str(tmp_path / "wide.jsonl")]) == 0
    assert openai_server.state.max_in_flight > 1  # the default lets the rows go together
    openai_server.state.max_in_flight = 0
    assert main([*base, "--output", str(tmp_path / "one.jsonl"), "--max-concurrency", "1"]) == 0
    assert openai_server.state.max_in_flight == 1
    start = time.monotonic()
    assert main([*base, "--output", str(tmp_path / "rate.jsonl"), "--requests-per-minute", "60"]) == 0
    assert time.monotonic() - start >= 2.5  # one a second, the first at once: 4 requests need 3 s


@pytest.mark.slow
def test_request_deadline_flag_bounds_a_request_with_retries_left(openai_server: RunningServer, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    openai_server.state.delay_s = 3600
    start = time.monotonic()
    assert main(["judge", "--judge", MODEL_ID, "--backend", "openai", "--base-url", openai_server.base_url,
                 "--input", str(_answers(tmp_path / "a.jsonl")), "--output", str(tmp_path / "o.jsonl"),
                 "--no-rubric", "--mode", "prob", "--timeout", "30", "--max-retries", "5",
                 "--request-deadline", "1"]) == 2
    assert time.monotonic() - start < 10
    assert "1 s deadline" in capsys.readouterr().err


@pytest.mark.slow
def test_a_gzip_bomb_through_the_cli_is_one_line_at_max_reply_mb(
    openai_server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    openai_server.state.gzip_bomb_mb = 16
    out = tmp_path / "scored.jsonl"
    code = main(["judge", "--judge", MODEL_ID, "--backend", "openai", "--base-url", openai_server.base_url,
                 "--input", str(_answers(tmp_path / "a.jsonl")), "--output", str(out), "--no-rubric",
                 "--mode", "generative", "--max-reply-mb", "1"])
    error = capsys.readouterr().err
    lines = [line for line in error.splitlines() if line.startswith("evolm")]
    assert code == 2 and len(lines) == 1 and "over the 1 MiB limit" in lines[0] and "Traceback" not in error
    assert not out.exists()


def test_judge_max_reply_mb_setting_reaches_the_backend_and_is_checked() -> None:
    from evolm.config import JudgeConfig, load_config
    from evolm.errors import InputError
    from evolm.judge.judge import build_judge

    cfg = JudgeConfig(model=MODEL_ID, mode="prob", backend="openai", base_url="http://127.0.0.1:1/v1", max_reply_mb=3)
    assert build_judge(cfg, seed=0, device="cpu").backend.max_reply_mb == 3
    assert load_config(None, []).judge.max_reply_mb == 8.0
    with pytest.raises(InputError, match="judge.max_reply_mb must be > 0, not 0"):
        load_config(None, ["judge.max_reply_mb=0"])
