"""A judge pool: OpenAIBackend over several real local servers (tests/openai_server.py), no mocked client."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack

import pytest
from openai_server import MODEL_ID, RunningServer, ServerState, free_port, serve

from evolm.backends import SamplingParams
from evolm.backends.openai import OpenAIBackend
from evolm.backends.pool import FAILURES_BEFORE_COOLDOWN, _Bucket
from evolm.config import endpoint_urls
from evolm.errors import BackendError

KEY_ENV = "EVOLM_TEST_OPENAI_KEY"


def conv(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]


@pytest.fixture(scope="module")
def _running() -> Iterator[list[RunningServer]]:
    with ExitStack() as stack:
        yield [stack.enter_context(serve()) for _ in range(3)]


@pytest.fixture
def servers(_running: list[RunningServer]) -> list[RunningServer]:
    """Three servers for the module (starting and stopping them is most of a test's time), fresh state per test."""
    deadline = time.monotonic() + 5
    while any(s.state.in_flight for s in _running) and time.monotonic() < deadline:
        time.sleep(0.01)  # a previous test's abandoned request still ending on the server
    for s in _running:
        for f in dataclasses.fields(ServerState):
            if f.name != "closing":
                setattr(s.state, f.name, f.default_factory() if f.default_factory is not dataclasses.MISSING
                        else f.default)
    return _running


def pool(urls: list[str], **kwargs: object) -> OpenAIBackend:
    return OpenAIBackend(MODEL_ID, base_url=urls, api_key_env=KEY_ENV, **kwargs)  # type: ignore[arg-type]


def counts(servers: list[RunningServer]) -> list[int]:
    return [len(s.state.requests) for s in servers]


def test_an_idle_pool_is_used_round_robin(servers: list[RunningServer]) -> None:
    chosen = pool([s.base_url for s in servers])
    for i in range(6):  # one row per call: every endpoint idle each time, so ties go round-robin
        assert chosen.generate([conv(f"q{i}")], SamplingParams()) == [f"echo: q{i}"]
    assert counts(servers) == [2, 2, 2]


@pytest.mark.slow
def test_requests_go_to_the_least_loaded(servers: list[RunningServer]) -> None:
    slow, fast1, fast2 = servers
    slow.state.delay_s, fast1.state.delay_s, fast2.state.delay_s = 0.6, 0.02, 0.02
    questions = [f"question {i}" for i in range(30)]
    out = pool([s.base_url for s in servers], max_concurrency=4).generate([conv(q) for q in questions],
                                                                          SamplingParams())
    assert out == [f"echo: {q}" for q in questions]  # input order, whoever answered
    n_slow, n_fast1, n_fast2 = counts(servers)
    assert n_slow + n_fast1 + n_fast2 == 30
    assert 1 <= n_slow < min(n_fast1, n_fast2)  # the slow one's slots stay busy, the others take the rest


@pytest.mark.slow
def test_per_endpoint_concurrency_holds_across_threads(servers: list[RunningServer]) -> None:
    for s in servers[:2]:
        s.state.delay_s, s.state.jitter_s = 0.03, 0.05
    chosen = pool([s.base_url for s in servers[:2]], max_concurrency=3)
    batches = [[conv(f"t{t} r{r}") for r in range(15)] for t in range(3)]
    with ThreadPoolExecutor(max_workers=3) as threads:
        results = list(threads.map(lambda b: chosen.generate(b, SamplingParams()), batches))
    assert results == [[f"echo: t{t} r{r}" for r in range(15)] for t in range(3)]
    # Three calls at once share each endpoint's three slots: full, never over.
    assert [s.state.max_in_flight for s in servers[:2]] == [3, 3]


def test_a_per_minute_limit_is_a_bucket_of_one_seconds_worth() -> None:
    rpm = _Bucket(240, now=0.0)  # 4 a second, bursts of 4
    for _ in range(4):
        assert rpm.wait(1, 0.0) == 0.0
        rpm.take(1, 0.0)
    assert rpm.wait(1, 0.0) == pytest.approx(0.25)  # then one every 0.25 s
    assert rpm.wait(1, 0.25) == pytest.approx(0.0)
    tpm = _Bucket(6000, now=0.0)  # 100 tokens a second
    tpm.take(150, 0.0)  # more than the bucket holds: goes when it is full, and leaves a debt
    assert tpm.wait(50, 0.0) == pytest.approx(1.0)
    tpm.refund(148, 0.0)  # the server said 2 tokens: the estimate comes back
    assert tpm.wait(50, 0.0) == 0.0 and tpm.level == pytest.approx(98)
    assert _Bucket(30, now=0.0).capacity == 1.0  # under one a second: one at a time, every 2 s


@pytest.mark.slow
def test_requests_per_minute_delay_requests(servers: list[RunningServer]) -> None:
    start = time.monotonic()
    # 240/min: a burst of one second's worth (4), then one every 0.25 s: the last of 8 leaves at ~1.0 s.
    pool([servers[0].base_url], requests_per_minute=240).generate([conv(f"q{i}") for i in range(8)], SamplingParams())
    assert time.monotonic() - start >= 0.9


@pytest.mark.slow
def test_tokens_per_minute_use_the_estimate_then_the_servers_usage(servers: list[RunningServer]) -> None:
    server = servers[0]
    params = SamplingParams(max_new_tokens=46)  # estimate: 11 characters / 3 + 46 = ~50 tokens a row
    rows = [conv("hi") for _ in range(4)]
    reply = {"choices": [{"message": {"role": "assistant", "content": "x"}}]}
    server.state.raw_content_type = "application/json"
    # No usage in the replies: the estimate stands. 6000/min = 100 a second, a bucket of 100: two rows
    # at once, then one every 0.5 s.
    server.state.raw_body = json.dumps(reply)
    start = time.monotonic()
    pool([server.base_url], tokens_per_minute=6000).generate(rows, params)
    assert 0.9 <= time.monotonic() - start < 6
    # The server says each used 2 tokens: the estimate is given back, the bucket stays nearly full.
    server.state.raw_body = json.dumps({**reply, "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    chosen = pool([server.base_url], tokens_per_minute=6000, max_concurrency=1)
    chosen.generate(rows, params)
    assert chosen._pool.endpoints[0].tpm.level >= 100 - 8 - 1e-6  # 4 x 2 tokens taken (less whatever refilled)
    assert chosen.stats().total.tokens == 8


@pytest.mark.slow
def test_a_dead_endpoint_is_skipped(servers: list[RunningServer]) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    chosen = pool([dead, servers[0].base_url, servers[1].base_url], max_concurrency=2, max_retries=2)
    questions = [f"q{i}" for i in range(30)]
    assert chosen.generate([conv(q) for q in questions], SamplingParams()) == [f"echo: {q}" for q in questions]
    stats = chosen.stats().endpoints
    assert 1 <= stats[dead].requests == stats[dead].failures <= FAILURES_BEFORE_COOLDOWN + 1
    assert stats[dead].requests == chosen.stats().total.retries  # each failure was retried elsewhere
    assert counts(servers[:2]) == [stats[servers[0].base_url].requests, stats[servers[1].base_url].requests]
    # Cooling down: the next call does not even try it.
    before = stats[dead].requests
    chosen.generate([conv("again")] * 6, SamplingParams())
    assert chosen.stats().endpoints[dead].requests == before


@pytest.mark.slow
def test_the_deadline_is_total_across_endpoints(servers: list[RunningServer]) -> None:
    """Two servers that drip a byte every 0.1 s: attempts move between them until the total deadline, not 6 of them."""
    for s in servers[:2]:
        s.state.drip_s = 0.1
    chosen = pool([s.base_url for s in servers[:2]], timeout_s=0.5, max_retries=5, deadline_s=1.3)
    start = time.monotonic()
    with pytest.raises(BackendError) as info:
        chosen.generate([conv("hi")], SamplingParams())
    elapsed = time.monotonic() - start
    # Two attempts of 0.5 s; a third would start with 0.3 s left, less than an attempt's own limit.
    assert 0.9 <= elapsed < 1.3 + 2  # (slack for a loaded machine)
    message = str(info.value)
    assert "timed out after 0.5 s (2 attempts on 2 endpoints" in message
    assert "past the 1.3 s deadline" in message
    assert counts(servers[:2]) == [1, 1]


def test_a_deadline_shorter_than_an_attempt_cuts_it(servers: list[RunningServer]) -> None:
    servers[0].state.drip_s = 0.1
    start = time.monotonic()
    with pytest.raises(BackendError, match=r"timed out at the 0.6 s deadline \(1 attempt,"):
        pool([servers[0].base_url], timeout_s=5, deadline_s=0.6).generate([conv("hi")], SamplingParams())
    assert time.monotonic() - start < 3


@pytest.mark.slow
def test_a_retry_waits_for_a_free_slot_only_until_the_deadline(servers: list[RunningServer]) -> None:
    """A fails at once, B's one slot is busy for 3 s: the retry, for B (A failed it), ends at the 1.5 s deadline."""
    a, b = servers[:2]
    a.state.fail_first, b.state.delay_s = 100, 3.0
    chosen = pool([a.base_url, b.base_url], max_concurrency=1, max_retries=3, timeout_s=5, deadline_s=1.5)
    start = time.monotonic()
    with pytest.raises(BackendError) as info:
        chosen.generate([conv("q0"), conv("q1")], SamplingParams())  # q0 goes to A, q1 to B
    assert 1.4 <= time.monotonic() - start < 3
    message = str(info.value)
    assert "HTTP 503 (1 attempt," in message and "no endpoint was free for a retry before the deadline" in message
    assert counts([a, b]) == [1, 1]


@pytest.mark.slow
def test_retries_are_bounded_and_change_endpoint(servers: list[RunningServer]) -> None:
    for s in servers[:2]:
        s.state.fail_first, s.state.fail_status = 100, 503
    servers[0].state.retry_after_ms = servers[1].state.retry_after_ms = 10
    chosen = pool([s.base_url for s in servers[:2]], max_retries=2)
    start = time.monotonic()
    with pytest.raises(BackendError, match=r"HTTP 503 \(3 attempts on 2 endpoints"):
        chosen.generate([conv("hi")], SamplingParams())
    # The first retry goes to the other endpoint at once, the second (both failed) after the retry-after.
    assert time.monotonic() - start < 3
    assert sorted(counts(servers[:2])) == [1, 2]  # A, B, then A again (B failed too)
    total = chosen.stats().total
    assert (total.requests, total.failures, total.retries) == (3, 3, 2)


@pytest.mark.slow
def test_an_endpoint_that_asks_to_wait_is_left_alone_that_long(servers: list[RunningServer]) -> None:
    """A 429 with Retry-After: the other endpoints take the traffic until it has passed (not just this request's
    retry), and the endpoint is used again after it."""
    a, b = servers[:2]
    a.state.fail_first, a.state.fail_status, a.state.retry_after_ms = 1, 429, 1500
    chosen = pool([a.base_url, b.base_url])
    for i in range(6):  # idle endpoints take turns, but A asked for 1.5 s
        assert chosen.generate([conv(f"q{i}")], SamplingParams()) == [f"echo: q{i}"]
    assert counts([a, b]) == [1, 6]
    time.sleep(1.6)
    for i in range(4):
        chosen.generate([conv(f"r{i}")], SamplingParams())
    assert counts([a, b]) == [3, 8]  # healthy again: turns as before


def test_a_failed_batch_leaves_no_slot_taken(servers: list[RunningServer]) -> None:
    """The first failing row cancels the others, queued or in flight: every slot comes back."""
    a, b = servers[:2]
    a.state.delay_s = b.state.delay_s = 0.05
    a.state.fail_first, a.state.fail_status = 1, 400  # not retried: the batch fails
    chosen = pool([a.base_url, b.base_url], max_concurrency=2)
    with pytest.raises(BackendError, match="HTTP 400"):
        chosen.generate([conv(f"q{i}") for i in range(20)], SamplingParams())
    assert [e.in_flight for e in chosen._pool.endpoints] == [0, 0] and not chosen._pool._waiters
    assert chosen.generate([conv("next")] * 5, SamplingParams()) == ["echo: next"] * 5


def test_a_single_endpoint_still_backs_off(servers: list[RunningServer]) -> None:
    servers[0].state.fail_first = 1
    start = time.monotonic()
    assert pool([servers[0].base_url], max_retries=1).generate([conv("hi")], SamplingParams()) == ["echo: hi"]
    assert time.monotonic() - start >= 0.3  # nowhere else to go: 0.5 s backoff less jitter


@pytest.mark.slow
def test_counters_of_tokens_and_latency(servers: list[RunningServer]) -> None:
    a, b = servers[:2]
    a.state.delay_s = b.state.delay_s = 0.1
    a.state.fail_first, a.state.retry_after_ms = 1, 10
    chosen = pool([a.base_url, b.base_url], max_concurrency=1)
    before = chosen.stats()
    start = time.monotonic()
    chosen.generate([conv("a b c")] * 6, SamplingParams())
    elapsed = time.monotonic() - start
    delta = chosen.stats().since(before)
    total = delta.total
    # The fake server counts words: prompt "a b c" = 3, reply "echo: a b c" = 4; the failed attempt reports none.
    assert (total.requests, total.failures, total.retries) == (7, 1, 1)
    assert (total.prompt_tokens, total.completion_tokens, total.tokens) == (18, 24, 42)
    assert 0.7 <= total.latency_s <= 2 * elapsed + 0.1  # 7 attempts of >= 0.1 s, two endpoints in parallel
    assert delta.endpoints[a.base_url].failures == 1
    assert sum(s.requests for s in delta.endpoints.values()) == 7
    assert chosen.stats().since(chosen.stats()).total.requests == 0


def test_base_url_forms() -> None:
    assert endpoint_urls("http://a/v1") == ["http://a/v1"]
    assert endpoint_urls(" http://a/v1 ,http://b/v1") == ["http://a/v1", "http://b/v1"]
    assert endpoint_urls(["http://a/v1", "http://b/v1"]) == ["http://a/v1", "http://b/v1"]
    for bad in ("", [], " , "):
        with pytest.raises(BackendError, match="names no URL"):
            OpenAIBackend(MODEL_ID, base_url=bad)
    for key in ("requests_per_minute", "tokens_per_minute"):
        with pytest.raises(BackendError, match=key):
            OpenAIBackend(MODEL_ID, base_url="http://a/v1", **{key: -1})  # type: ignore[arg-type]
    with pytest.raises(BackendError, match="deadline"):
        OpenAIBackend(MODEL_ID, base_url="http://a/v1", deadline_s=0)


# ----------------------------------------------------------------------------- settings: config, CLI


def test_config_takes_a_list_or_one_url(tmp_path) -> None:  # noqa: ANN001
    from evolm.config import load_config
    from evolm.errors import InputError
    from evolm.judge.judge import build_judge
    from evolm.training.checks import launch_errors

    urls = ["http://a:8000/v1", "http://b:8000/v1"]
    path = tmp_path / "c.yaml"
    path.write_text(f"judge: {{backend: openai, base_url: {json.dumps(urls)}, max_concurrency: 4}}\n")
    assert load_config(path).judge.base_url == urls
    cfg = load_config(None, ["judge.backend=openai", "judge.base_url=[http://a:8000/v1, http://b:8000/v1]",
                             "judge.requests_per_minute=600", "judge.deadline=30"])
    assert cfg.judge.base_url == urls and launch_errors(cfg) == []
    judge = build_judge(cfg.judge)
    assert [e.url for e in judge.backend._pool.endpoints] == urls
    assert (judge.backend._pool.max_concurrency, judge.backend.deadline_s) == (32, 30.0)
    assert load_config(None, ["judge.backend=openai", "judge.base_url=http://a:8000/v1"]).judge.base_url == "http://a:8000/v1"
    with pytest.raises(InputError, match="judge.base_url 'nonsense' is not an http"):  # refused as the config loads
        load_config(None, ["judge.base_url=[http://a:8000/v1, nonsense]"])
    with pytest.raises(InputError, match="judge base_url is set but its backend is 'hf'"):  # judge.backend: hf
        load_config(None, [f"judge.base_url={json.dumps(urls)}"])
    for override in ("judge.max_concurrency=0", "judge.tokens_per_minute=-1", "judge.base_url=[]"):
        with pytest.raises(InputError):
            load_config(None, [override])


def test_cli_base_url_repeated_or_comma_separated(servers: list[RunningServer], tmp_path) -> None:  # noqa: ANN001
    from evolm.cli import main

    answers = tmp_path / "a.jsonl"
    answers.write_text("".join(json.dumps({"prompt": f"q{i}", "response": "r"}) + "\n" for i in range(6)))
    a, b, c = (s.base_url for s in servers)
    out = tmp_path / "s.jsonl"
    assert main(["judge", "--judge", MODEL_ID, "--backend", "openai", "--base-url", a, "--base-url", f"{b},{c}",
                 "--input", str(answers), "--output", str(out), "--no-rubric", "--mode", "prob"]) == 0
    assert len(out.read_text().splitlines()) == 6
    assert all(n >= 1 for n in counts(servers)) and sum(counts(servers)) == 6


# ----------------------------------------------------------------------------- judge tokens and seconds per step


def test_judge_tokens_and_seconds_reach_the_step(servers: list[RunningServer]) -> None:
    from evolm.judge.judge import Judge
    from evolm.training.judging import JudgeCost, judge_rows, step_rewards

    judge = Judge(pool([s.base_url for s in servers[:2]]), mode="prob")
    rows = [{"role": "policy", "question": "What is 2 + 2?", "rubric": "", "rubric_text": ""}] * 4
    before = judge.backend.stats().total.tokens
    per_process = [judge_rows(rows[:2], ["4", "four"], [judge]), judge_rows(rows[2:], ["5", "five"], [judge])]
    served = judge.backend.stats().total.tokens - before
    assert served > 0
    for _, cost in per_process:  # one cost per process's batch, beside its rows
        assert cost.tokens is not None and cost.seconds > 0
    gathered = [r for scored, _ in per_process for r in scored]
    result = step_rewards(["policy"] * 4, gathered, [0, 0, 1, 1], cost=JudgeCost.total([c for _, c in per_process]))
    assert result.judge_tokens == served  # summed over processes
    assert result.judge_latency_s == max(c.seconds for _, c in per_process)  # the slowest process
    assert result.metrics()["judge_tokens"] == served


def test_no_judge_server_no_tokens() -> None:
    from evolm.training.judging import JudgeCost, RowReward, step_rewards

    result = step_rewards(["policy"], [RowReward(0.5)], [0], cost=JudgeCost(seconds=0.2))
    assert (result.judge_tokens, result.judge_latency_s) == (None, 0.2)
    assert "judge_tokens" not in result.metrics()
