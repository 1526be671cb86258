"""evolm serve shares its judge and writer between clients: per-client queues, fair batches and writing,
answers costed by length, /health silent about who asked what, and a request value evolm cannot read answered
400.

Each test runs the app on a real uvicorn server (``reward_server.running``); two clients are two peer
addresses, 127.0.0.2 and 127.0.0.3, as two machines would be.
"""

from __future__ import annotations

import json
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest
from reward_server import FakeJudge, FakeWriter, running

from evolm.judge.judge import JudgeItem
from evolm.scores import Judgment
from evolm.serve.app import create_app
from evolm.serve.batcher import RubricSource
from evolm.serve.protocols import Answer
from evolm.serve.settings import ServeSettings
from evolm.serve.sources import answer_cost

LABEL = json.dumps({"criteria": [{"criterion": "The answer is correct.", "weight": 1.0}]})
FLOODER, OTHER = "127.0.0.2", "127.0.0.3"


def _client(address: str, timeout: float = 60) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=timeout)


def _body(prompt: str, responses: list[str], label: bool = True) -> dict:
    body = {"query": [prompt + r for r in responses], "prompts": [prompt] * len(responses)}
    return {**body, "labels": [LABEL] * len(responses)} if label else body


@dataclass
class UnitJudge(FakeJudge):
    """A judge that takes ``unit_s`` per criterion per started 4,000 characters of each item, as a yesno
    judge's forward passes do; ``calls`` holds each call's items as it starts."""

    unit_s: float = 0.002

    def score(self, items: list[JudgeItem]) -> list[Judgment]:
        out = super().score(items)
        units = sum(max(1, len(it.rubric.criteria) if it.rubric else 1)
                    * max(1, math.ceil((len(it.question) + len(it.answer)) / 4000)) for it in items)
        time.sleep(self.unit_s * units)
        return out


def _wait_queued(url: str, n: int, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while httpx.get(url + "/health").json()["queued"] < n:
        assert time.monotonic() < deadline, "the flood did not queue"
        time.sleep(0.02)


@pytest.mark.slow
def test_a_flooding_client_cannot_starve_another_clients_one_answer_request() -> None:
    """One client sends 40 requests of 64 answers at once, more than --max-queue; another client's one-answer
    requests are let in and answered in the next judge call or two (a batch holds 8 answers: fewer than the
    flooder's requests), while the flooder gets 503 past its own queue limit. (Before: the flood filled the
    shared queue and the other client got 503, or waited behind one share per flooding request.)"""
    judge = UnitJudge(unit_s=0.002)
    settings = ServeSettings(max_batch=8, max_batch_s=0.3, max_wait_ms=1, max_queue=32, max_client_queue=16,
                             deadline_s=30)
    with running(create_app(judge, settings=settings)) as url, _client(FLOODER) as flooder, \
            _client(OTHER) as other, ThreadPoolExecutor(40) as pool:
        answers = [f"a{k}" for k in range(64)]
        flood = [pool.submit(flooder.post, url + "/get_reward", json=_body(f"Flood {r}?", answers))
                 for r in range(40)]
        _wait_queued(url, 15)
        waits, lags = [], []
        for k in range(3):
            before = len(judge.calls)
            t0 = time.perf_counter()
            reply = other.post(url + "/get_reward", json=_body(f"Mine {k}?", ["It is 4."]))
            waits.append(time.perf_counter() - t0)
            assert reply.status_code == 200, reply.text
            mine = next(n for n, call in enumerate(judge.calls)
                        if any(f"Mine {k}" in it.question for it in call))
            lags.append(mine - before)  # judge calls begun between sending it and its own
        replies = [f.result() for f in flood]
    refused = [r for r in replies if r.status_code == 503]
    assert refused and all("--max-client-queue" in r.json()["error"] for r in refused)
    assert int(refused[0].headers["retry-after"]) >= 1
    assert all(r.status_code in (200, 503) for r in replies)
    assert sum(r.status_code == 200 for r in replies) >= 16
    # within a few calls (some begin while its request is read), not after the flood's 64 calls
    assert max(lags) <= 8 and max(waits) < 1.0, (lags, waits)  # a batch of 8 answers is ~0.02 s here


def test_a_full_queue_still_lets_in_a_client_with_nothing_waiting() -> None:
    judge = FakeJudge(gate=threading.Event())
    settings = ServeSettings(max_batch=1, max_wait_ms=1, max_queue=3, max_client_queue=64)
    with running(create_app(judge, settings=settings)) as url, _client(FLOODER) as flooder, \
            _client(OTHER) as other, ThreadPoolExecutor(5) as pool:
        # one in the judge first, then three waiting: sent together, all four could queue before the judge
        # took one, and the fourth would be refused (--max-queue 3)
        held = [pool.submit(flooder.post, url + "/get_reward", json=_body("Q?", ["held 0"]))]
        assert judge.entered.wait(10)
        held += [pool.submit(flooder.post, url + "/get_reward", json=_body("Q?", [f"held {k}"]))
                 for k in range(1, 4)]
        _wait_queued(url, 3)
        more = flooder.post(url + "/get_reward", json=_body("Q?", ["one more"]))
        mine = pool.submit(other.post, url + "/get_reward", json=_body("Mine?", ["mine"]))
        _wait_queued(url, 4)  # admitted past --max-queue: it had none waiting
        judge.gate.set()
        assert mine.result().status_code == 200 and all(f.result().status_code == 200 for f in held)
    assert more.status_code == 503 and "--max-queue" in more.json()["error"]


def test_x_forwarded_for_does_not_make_another_client() -> None:
    """The server has no proxy in front: a header the client sets does not change who it is."""
    judge = FakeJudge(gate=threading.Event())
    settings = ServeSettings(max_batch=1, max_wait_ms=1, max_client_queue=1)
    with running(create_app(judge, settings=settings)) as url, _client(FLOODER) as flooder, \
            _client(OTHER) as other, ThreadPoolExecutor(3) as pool:
        first = pool.submit(flooder.post, url + "/get_reward", json=_body("Q?", ["in the judge"]))
        assert judge.entered.wait(10)
        second = pool.submit(flooder.post, url + "/get_reward", json=_body("Q?", ["waiting"]))
        _wait_queued(url, 1)
        spoofed = flooder.post(url + "/get_reward", json=_body("Q?", ["spoofed"]),
                               headers={"X-Forwarded-For": "10.0.0.9"})
        mine = pool.submit(other.post, url + "/get_reward", json=_body("Q?", ["mine"]))
        _wait_queued(url, 2)
        judge.gate.set()
        assert first.result().status_code == second.result().status_code == mine.result().status_code == 200
    assert spoofed.status_code == 503 and "--max-client-queue" in spoofed.json()["error"]


@dataclass
class SlowWriter(FakeWriter):
    """A rubric writer that takes ``seconds`` per rubric and records the questions it wrote for, in order."""

    seconds: float = 0.02
    asked: list | None = None

    def generate(self, conversations, params, *, progress: bool = False) -> list[str]:  # noqa: ANN001
        time.sleep(self.seconds * len(conversations))
        self.asked = (self.asked or []) + [json.dumps(c) for c in conversations]
        return super().generate(conversations, params, progress=progress)


@pytest.mark.slow
def test_rubric_writing_is_shared_between_clients() -> None:
    """A flood of 200 new questions (4 s of writing) from one client; another client's new question is written
    in the next writer call or two, not after the 200."""
    writer = SlowWriter(seconds=0.02)
    settings = ServeSettings(max_batch_s=0.3, max_wait_ms=1, deadline_s=60)
    with running(create_app(FakeJudge(), RubricSource(writer=writer), settings)) as url, \
            _client(FLOODER) as flooder, _client(OTHER) as other, ThreadPoolExecutor(4) as pool:
        assert other.post(url + "/get_reward", json=_body("Warm?", ["x"], label=False)).status_code == 200
        flood = [pool.submit(flooder.post, url + "/get_reward",
                             json={"query": [f"F{r}-{k}?a" for k in range(50)],
                                   "prompts": [f"F{r}-{k}?" for k in range(50)]}) for r in range(4)]
        _wait_queued(url, 4)
        t0 = time.perf_counter()
        reply = other.post(url + "/get_reward", json=_body("Mine?", ["x"], label=False))
        took = time.perf_counter() - t0
        written_then = writer.prompts
        assert all(f.result().status_code == 200 for f in flood)
    assert reply.status_code == 200 and reply.json()["extra_logs"]["rubric_written"] == [1.0]
    assert took < 1.5 and written_then < 1 + 60, (took, written_then)  # not after the flood's 200 questions


@pytest.mark.slow
def test_a_request_past_its_deadline_is_not_written_for() -> None:
    """Writing goes a few questions a call once the writer is timed; a request whose deadline passes gets no
    more."""
    writer = SlowWriter(seconds=0.1)
    settings = ServeSettings(max_batch_s=0.4, max_wait_ms=1, deadline_s=1.0)
    with running(create_app(FakeJudge(), RubricSource(writer=writer), settings)) as url:
        assert httpx.post(url + "/get_reward", json=_body("Warm?", ["x"], label=False)).status_code == 200
        late = httpx.post(url + "/get_reward", json={"query": [f"Q{k}?a" for k in range(40)],
                                                     "prompts": [f"Q{k}?" for k in range(40)]}, timeout=30)
        time.sleep(0.5)
    assert late.status_code == 504
    assert writer.prompts < 1 + 20  # about 1 s of writing at 0.1 s a question, not the 4 s of all 40


@pytest.mark.slow
def test_an_answer_costs_its_length_so_a_long_one_is_judged_alone() -> None:
    """Four 400,000-character answers (about 0.2 s of judging each here) and then another client's short
    answer: each long answer is a judge call of its own, and the short one waits for about one of them, not
    all four."""
    assert answer_cost(Answer("Q?", "x" * 400_000), 4000) == 101
    judge = UnitJudge(unit_s=0.002)
    settings = ServeSettings(max_wait_ms=1, max_batch_s=0.5, deadline_s=60)
    with running(create_app(judge, settings=settings)) as url, _client(FLOODER) as flooder, \
            _client(OTHER) as other, ThreadPoolExecutor(1) as pool:
        for k in range(3):  # the judge's time per unit of work, measured
            assert other.post(url + "/get_reward", json=_body("Warm?", [f"w{k}"])).status_code == 200
        long = pool.submit(flooder.post, url + "/get_reward", json=_body("Long?", ["x" * 400_000] * 4))
        deadline = time.monotonic() + 30
        while not any(len(it.answer) > 1000 for call in judge.calls for it in call):
            assert time.monotonic() < deadline
            time.sleep(0.005)
        t0 = time.perf_counter()
        short = other.post(url + "/get_reward", json=_body("Short?", ["x"]))
        took = time.perf_counter() - t0
        assert long.result().status_code == 200
    assert short.status_code == 200 and took < 0.6, took  # ~0.2 s of one long answer, not 0.8 s of four
    for call in judge.calls:
        assert len(call) == 1 or all(len(it.answer) < 1000 for it in call)


def _health(url: str) -> dict:
    return {k: v for k, v in httpx.get(url + "/health").json().items() if k != "busy_s"}


def test_health_does_not_say_whether_another_client_asked_the_same_question() -> None:
    seen = []
    for question in ("Asked before?", "Never asked?"):
        with running(create_app(FakeJudge(), RubricSource(writer=FakeWriter()))) as url:
            with _client(FLOODER) as first:
                reply = first.post(url + "/get_reward", json=_body("Asked before?", ["a"], False))
                assert reply.status_code == 200
            with _client(OTHER) as probe:
                assert probe.post(url + "/get_reward", json=_body(question, ["b"], False)).status_code == 200
            seen.append(_health(url))
    assert seen[0] == seen[1] and "rubrics_written" not in seen[0] and "rubric_cache" not in seen[0]


def test_a_value_evolm_cannot_read_is_400_and_a_bug_a_json_500(monkeypatch) -> None:
    """A rubric weight of 1 followed by 400 zeros (too large for a float) is never a bare 500; an InputError
    or ValueError from reading a request is 400 with one line of JSON, and any other error a JSON 500."""
    from evolm.errors import InputError

    huge = '{"criteria": [{"criterion": "Correct.", "weight": 1' + "0" * 400 + "}]}"
    with running(create_app(FakeJudge())) as url:
        reply = httpx.post(url + "/get_reward", content=json.dumps(_body("Q?", ["a"])).replace(
            '"labels": [' + json.dumps(LABEL), '"labels": [' + json.dumps(huge)).encode(),
            headers={"content-type": "application/json"})
        assert json.dumps(huge) in reply.request.content.decode()
        assert reply.status_code in (200, 400), reply.text  # 200 once the rubric reader skips such a weight
        assert reply.status_code == 200 or set(reply.json()) == {"error"}
        raw = httpx.post(url + "/reward", content=b'{"prompt": "Q?", "response": "a", "label": {"criteria": '
                         b'[{"criterion": "c", "weight": 1' + b"0" * 400 + b"}]}}")
        assert raw.status_code in (200, 400) and (raw.status_code == 200 or "error" in raw.json())
        for error, status in ((InputError("weight 1e400 is not a number"), 400), (ValueError("bad"), 400),
                              (OverflowError("int too large to convert to float"), 400),
                              (KeyError("bug"), 500)):
            def fail(label: object, error: Exception = error) -> None:
                raise error

            monkeypatch.setattr("evolm.serve.sources.label_rubric", fail)
            reply = httpx.post(url + "/get_reward", json=_body("Q?", ["a"]))
            assert reply.status_code == status and set(reply.json()) == {"error"}, reply.text
            assert (str(error.args[0]) if status == 400 else "KeyError") in reply.json()["error"]
        monkeypatch.undo()
        assert httpx.post(url + "/get_reward", json=_body("Q?", ["a"])).status_code == 200


@pytest.mark.parametrize("whole", [False, True])
def test_a_client_that_comes_back_saves_up_no_credit(whole: bool) -> None:
    """A client's share is counted while it has work waiting: one that was idle starts level with the
    others."""
    from evolm.serve.fairness import Job, level, pick_batch

    def job(client: str, n: int) -> Job:
        answers = [Answer("Q?", str(k), cost=1) for k in range(n)]
        return Job(answers, None, client=client)  # type: ignore[arg-type]

    load = level({"a": 500.0}, [job("a", 1), job("b", 1)])
    assert load == {"a": 500.0, "b": 500.0}
    jobs = [job("a", 10), job("b", 10)]
    picked = pick_batch(jobs, 10 if not whole else 20, whole, load)
    assert sorted(n for _, n in picked) == ([5, 5] if not whole else [10, 10])
