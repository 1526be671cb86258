"""The judge probe (judge/probe.py): a served judge's endpoint, key and model name are checked, and real scoring
requests read by the configured parser, before a run loads anything."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from openai_server import MODEL_ID, free_port, serve

from evolm.cli import main
from evolm.config import load_config
from evolm.errors import InputError
from evolm.judge.parse import parse_judge_score_reference
from evolm.judge.probe import check_endpoints, probe_judges

REPO = Path(__file__).resolve().parents[2]
PAPER = REPO / "configs" / "paper-qwen3-8b.yaml"
pytestmark = pytest.mark.judge_probe  # real local servers (conftest skips the probe elsewhere)
PROMPTS = REPO / "examples" / "data" / "prompts.jsonl"
THINKING_REPLY = ('<think>The rubric asks {"criterion": "States that water boils at 100 degrees Celsius", "weight": '
                  '0.7}, and the answer does.</think>{"reasoning": "meets both criteria", "score": 0.9}')


def paper(url: str, *extra: str):  # noqa: ANN201 - RunConfig
    return load_config(PAPER, [f"data.prompts={PROMPTS}", f"judge.base_url={url}", *extra])


def completion(content: str) -> str:
    return json.dumps({"id": "x", "object": "chat.completion", "created": 0, "model": MODEL_ID, "choices": [
        {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]})


def test_a_closed_port_stops_the_dry_run_and_the_run_in_one_line(capsys: pytest.CaptureFixture) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    for extra in (["--dry-run"], []):
        started = time.monotonic()
        assert main(["train", "--config", str(PAPER), *extra, f"data.prompts={PROMPTS}", f"judge.base_url={url}"]) != 0
        err = capsys.readouterr().err.strip()
        assert extra or time.monotonic() - started < 10  # the run: before anything loads
        assert err.count("\n") == 0 and f"judge.base_url {url}: cannot reach" in err, err


def test_a_server_with_another_model_name_is_refused_naming_judge_model() -> None:
    with serve() as server:
        with pytest.raises(InputError, match=rf"judge.model 'Qwen/Qwen3-1.7B' is not served .*serves: {MODEL_ID}"):
            check_endpoints(paper(server.base_url))
        check_endpoints(paper(server.base_url, f"judge.model={MODEL_ID}"))  # the served name passes


def test_a_refused_key_names_judge_api_key_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    monkeypatch.setattr(httpx, "get", lambda *a, **k: httpx.Response(401, json={"error": "bad key"}))
    with pytest.raises(InputError, match="judge.api_key_env.*HTTP 401.*OPENAI_API_KEY"):
        check_endpoints(paper("http://127.0.0.1:1/v1"))


@pytest.mark.slow
def test_a_thinking_judge_without_a_reasoning_parser_is_refused_under_the_reference_parse() -> None:
    # the reference reads the whole reply: a criterion quoted inside <think> before the final JSON leaves no score
    assert parse_judge_score_reference(THINKING_REPLY) is None
    with serve() as server:
        server.state.raw_body = completion(THINKING_REPLY)
        server.state.raw_content_type = "application/json"
        with pytest.raises(InputError, match="--reasoning-parser"):
            probe_judges(paper(server.base_url, f"judge.model={MODEL_ID}"))
        # judge.parse_after_thinking (a departure, off in the paper config) reads it after the think block
        reports = probe_judges(paper(server.base_url, f"judge.model={MODEL_ID}", "judge.parse_after_thinking=true"))
        assert reports[0].scores == [0.9, 0.9, 0.9]
        # a server with a reasoning parser sends the thinking apart: the content alone parses
        server.state.raw_body = completion('{"reasoning": "meets both criteria", "score": 0.9}')
        assert probe_judges(paper(server.base_url, f"judge.model={MODEL_ID}"))[0].scores == [0.9, 0.9, 0.9]


@pytest.mark.slow
def test_unreadable_replies_are_quoted_and_stop_the_run_only_when_all_are() -> None:
    warned: list[str] = []
    with serve() as server:  # the echo server's replies hold no score
        cfg = paper(server.base_url, f"judge.model={MODEL_ID}", "judge.max_new_tokens=64")
        with pytest.raises(InputError, match="none of the 3 probe replies"):
            probe_judges(cfg, warn=warned.append)
        assert len(warned) == 3 and all("WARNING" in w and "'echo:" in w for w in warned)
        server.state.raw_body = None
        server.state.contents = ['{"score": 0.5}', "no score here", '{"score": 0.2}']
        warned.clear()
        reports = probe_judges(cfg, warn=warned.append)
        assert sorted(s for s in reports[0].scores if s is not None) == [0.2, 0.5]
        assert len(warned) == 1 and "no score here" in warned[0]
        # a request failing after its retries is a missing score too, said with its error; the others are read
        server.state.contents = ['{"score": 0.5}', '{"score": 0.2}', '{"score": 0.2}']
        server.state.fail_every, server.state.fail_status = 2, 400  # the 2nd request: HTTP 400, never retried
        warned.clear()
        reports = probe_judges(cfg, warn=warned.append)
        assert sum(s is None for s in reports[0].scores) == 1
        assert len(warned) == 1 and "the request failed after its retries" in warned[0] and "HTTP 400" in warned[0]
        server.state.fail_every = 1  # every request fails: the run stops, quoting the first error
        with pytest.raises(InputError, match="every request failed; the first: .*HTTP 400"):
            probe_judges(cfg, warn=warned.append)
