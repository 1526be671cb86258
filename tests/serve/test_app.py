"""evolm serve (evolm.serve.app): both wire protocols on a real uvicorn server, batching, limits, rubrics.

Fast tests use a tiny random judge or ``FakeJudge`` (tests/reward_server.py); the slow test runs
``evolm serve --judge smollm2-135m-instruct --mode yesno`` as a subprocess and checks the issue's
must-show against ``evolm judge`` on the same rows.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from reward_server import RUBRIC, RUBRIC_TEXT, FakeJudge, FakeWriter, running

from evolm.cli import main
from evolm.eval.rubric_source import RubricTable
from evolm.judge.judge import Judge, JudgeItem
from evolm.rubrics import Rubric
from evolm.scores import Judgment, scores_of
from evolm.serve.app import create_app
from evolm.serve.batcher import RubricSource
from evolm.serve.protocols import Answer, question_text, response_from_query
from evolm.serve.settings import ServeSettings


def _body(prompt: str, responses: list[str], labels: list | None = None) -> dict:
    body = {"query": [prompt + r for r in responses], "prompts": [prompt] * len(responses)}
    return body if labels is None else {**body, "labels": labels}


async def _post_all(url: str, bodies: list[dict], path: str = "/get_reward", timeout: float = 60) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=timeout) as client:
        return await asyncio.gather(*(client.post(url + path, json=b) for b in bodies))


def test_question_and_response_from_what_engines_send() -> None:
    chatml = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    assert question_text(chatml) == "What is 2+2?"
    llama3 = "<|start_header_id|>user<|end_header_id|>\n\nName a colour.<|eot_id|><|start_header_id|>assistant"
    assert question_text(llama3) == "Name a colour."
    assert question_text([{"role": "system", "content": "s"}, {"role": "user", "content": "Hi"}]) == "Hi"
    assert question_text("plain question") == "plain question"
    assert response_from_query(chatml + "It is 4.<|im_end|>\n", chatml) == ("It is 4.", False)
    assert response_from_query("Q?A <|im_end|><|endoftext|>", "Q?") == ("A ", False)
    assert response_from_query("Q? A", "Q?") == (" A", False)  # the response's own whitespace is kept
    # the prompt did not come back byte for byte: the response starts after the prompt's end
    assert response_from_query(chatml.replace("2+2", "2 + 2") + "4", chatml) == ("4", True)
    assert response_from_query("Q ?A", "Q?") == (" ?A", True)  # nothing to anchor on: after the shared start


@pytest.mark.slow
def test_rewards_equal_judge_score_on_the_same_rows(tiny_backend) -> None:
    """Concurrent requests with mixed prompts: each reward is Judge.score's on that row (no mix-up in batching)."""
    judge = Judge(tiny_backend, mode="prob")
    rows = [(f"Question {q}: what is {q} + {q}?", f"Answer {k}: {q * 2 + k}.") for q in range(4) for k in range(4)]
    expected = scores_of(judge.score([JudgeItem(p, r) for p, r in rows]))
    bodies = [_body(p, [r]) for p, r in rows[::2]] + [{"query": [p + r for p, r in rows[1::2]],
                                                        "prompts": [p for p, _ in rows[1::2]]}]
    with running(create_app(judge, settings=ServeSettings(max_wait_ms=20))) as url:
        replies = asyncio.run(_post_all(url, bodies))
        health = httpx.get(url + "/health").json()
    assert all(r.status_code == 200 for r in replies)
    got = [r.json()["rewards"][0] for r in replies[:-1]] + replies[-1].json()["rewards"]
    want = expected[::2] + expected[1::2]
    assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-6
    last = replies[-1].json()
    assert last["scores"] == last["rewards"] and last["extra_logs"]["no_rubric"] == [1.0] * 8
    assert health["answers"] == 16 and health["batches"] < 9  # 9 requests, batched


def test_concurrent_requests_are_scored_together_grouped_by_question() -> None:
    judge = FakeJudge()
    bodies = [_body(f"Q{i % 4}?", [f"a{i}-{k}" for k in range(4)]) for i in range(16)]
    with running(create_app(judge, settings=ServeSettings(max_batch=64, max_wait_ms=50))) as url:
        replies = asyncio.run(_post_all(url, bodies))
    assert [len(r.json()["rewards"]) for r in replies] == [4] * 16
    assert len(judge.calls) < 16 and sum(map(len, judge.calls)) == 64
    for call in judge.calls:  # answers to one question are adjacent in every judge call
        questions = [it.question for it in call]
        assert questions == sorted(questions)


@pytest.mark.slow
def test_malformed_requests_get_a_json_4xx_and_the_server_keeps_serving() -> None:
    with running(create_app(FakeJudge())) as url:
        bad = [
            httpx.post(url + "/get_reward", content=b"{not json", headers={"content-type": "application/json"}),
            httpx.post(url + "/get_reward", json=["a list"]),
            httpx.post(url + "/get_reward", json={"query": ["Q?A"]}),  # no prompts
            httpx.post(url + "/get_reward", json={"query": ["Q?A", "Q?B"], "prompts": ["Q?"]}),
            httpx.post(url + "/get_reward", json={"query": [1], "prompts": ["Q?"]}),
            httpx.post(url + "/reward", json={"prompt": "Q?"}),
            httpx.post(url + "/reward", json={"prompt": 3, "response": "A"}),
            httpx.post(url + "/reward", content=b"[" * 100_000 + b"]" * 100_000),  # nested past the recursion limit
            httpx.post(url + "/reward", content=b'{"prompt": "Q?", "response": "A \\ud800"}'),  # a lone surrogate
        ]
        good = httpx.post(url + "/get_reward", json=_body("Q?", ["A"]))
        empty = httpx.post(url + "/get_reward", json={"query": [], "prompts": []})
    assert [r.status_code for r in bad] == [400, 422, 422, 422, 422, 422, 422, 400, 400]
    assert "lone surrogate" in bad[-1].json()["error"]
    assert all(set(r.json()) == {"error"} and r.json()["error"] for r in bad)
    assert good.status_code == 200 and good.json()["rewards"] == [0.01]
    assert empty.json() == {"rewards": [], "scores": [], "extra_logs": {k: [] for k in empty.json()["extra_logs"]}}


def test_a_full_queue_answers_503_with_retry_after() -> None:
    judge = FakeJudge(gate=threading.Event())
    with running(create_app(judge, settings=ServeSettings(max_batch=1, max_queue=1, max_wait_ms=1))) as url:
        with httpx.Client(timeout=30) as client, ThreadPoolExecutor(2) as pool:
            first = pool.submit(client.post, url + "/get_reward", json=_body("Q?", ["scoring"]))
            assert judge.entered.wait(10)  # the first is being scored; the second waits in the queue
            second = pool.submit(client.post, url + "/get_reward", json=_body("Q?", ["queued"]))
            deadline = time.monotonic() + 10
            while httpx.get(url + "/health").json()["queued"] < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            third = client.post(url + "/get_reward", json=_body("Q?", ["refused"]))
            judge.gate.set()
            assert first.result().status_code == 200 and second.result().status_code == 200
    assert third.status_code == 503 and int(third.headers["retry-after"]) >= 1 and "queued" in third.json()["error"]


def test_a_request_past_its_deadline_gets_504_and_the_next_is_served() -> None:
    judge = FakeJudge(gate=threading.Event())
    with running(create_app(judge, settings=ServeSettings(deadline_s=0.3))) as url:
        late = httpx.post(url + "/get_reward", json=_body("Q?", ["slow"]), timeout=30)
        judge.gate.set()
        after = httpx.post(url + "/reward", json={"prompt": "Q?", "response": "fast"}, timeout=30)
    assert late.status_code == 504 and "deadline" in late.json()["error"]
    assert after.status_code == 200 and after.json() == 0.04


def test_a_failing_judge_fails_only_the_request_that_broke_it() -> None:
    judge = FakeJudge(fail_on="BOOM")
    with running(create_app(judge, settings=ServeSettings(max_wait_ms=50))) as url:
        ok, broken = asyncio.run(_post_all(url, [_body("Q?", ["fine"]), _body("Q?", ["BOOM"])]))
        again = httpx.post(url + "/get_reward", json=_body("Q?", ["fine again"]))
    assert broken.status_code == 500 and "the judge failed" in broken.json()["error"]
    assert ok.status_code == 200 and again.status_code == 200


def test_slime_reward_is_a_bare_number_and_takes_messages() -> None:
    judge = FakeJudge()
    with running(create_app(judge)) as url:
        plain = httpx.post(url + "/reward", json={"prompt": "Q?", "response": "x" * 50, "label": None})
        messages = httpx.post(url + "/reward", json={"prompt": [{"role": "user", "content": "Q2?"}],
                                                     "response": "y", "label": RUBRIC_TEXT})
    assert plain.json() == 0.5 and messages.json() == 0.9
    assert judge.calls[-1][0].question == "Q2?" and judge.calls[-1][0].rubric == Rubric.from_obj(RUBRIC)


def test_a_label_rubric_is_used_and_logged() -> None:
    judge = FakeJudge()
    with running(create_app(judge)) as url:
        reply = httpx.post(url + "/get_reward", json=_body("Q?", ["a", "b", "c"], [RUBRIC_TEXT, RUBRIC, "42"])).json()
    assert reply["rewards"][:2] == [0.9, 0.9] and reply["rewards"][2] == 0.01  # "42" is no rubric: judge alone
    assert reply["extra_logs"]["rubric_from_label"] == [1.0, 1.0, 0.0]
    assert reply["extra_logs"]["no_rubric"] == [0.0, 0.0, 1.0]


def test_rubrics_are_written_once_per_question_and_cached() -> None:
    judge, writer = FakeJudge(), FakeWriter()
    rubrics = RubricSource(writer=writer, cache_size=2)
    with running(create_app(judge, rubrics, ServeSettings(max_wait_ms=20))) as url:
        first = asyncio.run(_post_all(url, [_body(f"Q{i % 2}?", ["a", "b"]) for i in range(6)]))
        again = httpx.post(url + "/get_reward", json=_body("Q0?", ["c"])).json()
        labelled = httpx.post(url + "/get_reward", json=_body("Q9?", ["d"], [RUBRIC])).json()
        health = httpx.get(url + "/health").json()
    assert all(r.json()["extra_logs"]["rubric_written"] == [1.0, 1.0] for r in first)
    assert again["extra_logs"]["rubric_written"] == [1.0] and labelled["extra_logs"]["rubric_from_label"] == [1.0]
    assert writer.prompts == 2 and rubrics.written == 2 and len(rubrics.cache) == 2
    assert "rubrics_written" not in health and "rubric_cache" not in health  # they would tell who asked what
    assert all(it.rubric is not None for call in judge.calls for it in call)


def test_rubric_cache_is_bounded_least_recently_used_first() -> None:
    source = RubricSource(writer=FakeWriter(), cache_size=2)
    for q in ("A", "B", "A", "C"):  # C evicts B (A was used more recently)
        source.resolve([Answer(q, "x")])
    assert source.written == 3 and len(source.cache) == 2
    source.resolve([Answer("B", "x")])
    assert source.written == 4


def test_rubric_file_and_missing_scores() -> None:
    table = RubricTable(by_id={}, by_prompt={"Q1?": Rubric.from_obj(RUBRIC)})
    judge = FakeJudge(missing_on="??")
    with running(create_app(judge, RubricSource(table=table))) as url:
        reply = httpx.post(url + "/get_reward", json={
            "query": ["Q1?a", "Q2?" + "x" * 30, "Q2?" + "x" * 10 + "??"], "prompts": ["Q1?", "Q2?", "Q2?"]}).json()
    assert reply["extra_logs"]["rubric_from_file"] == [1.0, 0.0, 0.0]
    assert reply["extra_logs"]["missing_score"] == [0.0, 0.0, 1.0]
    assert reply["rewards"] == [0.9, 0.3, 0.3]  # a missing score takes its question's mean in the batch


def test_health_and_openapi_pages() -> None:
    with running(create_app(FakeJudge())) as url:
        health = httpx.get(url + "/health").json()
        docs = httpx.get(url + "/docs")
        spec = httpx.get(url + "/openapi.json").json()
    assert health["status"] == "ok" and health["rubrics"] == "label only"
    assert docs.status_code == 200 and {"/get_reward", "/reward", "/health"} <= set(spec["paths"])


def test_serve_without_the_extra_is_a_one_line_error(monkeypatch, capsys) -> None:
    monkeypatch.setitem(sys.modules, "fastapi", None)  # import fastapi now raises ImportError
    assert main(["serve", "--judge", "no-such-model"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "pip install 'evolm[serve]'" in err


def test_serve_flags(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["serve", "--judge", "j", "--rubric-model", "w", "--rubrics", "r.jsonl"])
    assert e.value.code == 2 and "not allowed with" in capsys.readouterr().err
    assert main(["serve", "--judge", "j", "--rubrics", "/no/such/rubrics.jsonl"]) == 2


# ----------------------------------------------------------------------------- the must-show


def _wait_up(url: str, proc: subprocess.Popen, log: Path, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"evolm serve exited: {log.read_text()[-2000:]}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise AssertionError("evolm serve did not come up")


@pytest.mark.slow
def test_smollm2_yesno_server_matches_evolm_judge(tmp_path: Path) -> None:
    from openai_server import free_port

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    log = tmp_path / "serve.log"
    with log.open("w") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "evolm.cli", "serve", "--judge", "smollm2-135m-instruct",
                                 "--mode", "yesno", "--dtype", "float32", "--port", str(port),  # float32: the same
                                 "--deadline-s", "1800"],  # scores whatever the batching (bf16 moves ~1e-3); the
                                stdout=sink, stderr=sink, env=env)  # client's wait: a loaded CPU is not a 504 here
    try:
        _wait_up(url, proc, log, 600)
        questions = [f"What is {a} + {a + 1}? Answer briefly." for a in range(8)]
        bodies, rows = [], []
        for i in range(16):
            q = questions[i % 8]
            answers = [f"It is {2 * (i % 8) + 1 + k}." for k in range(4)]
            label = RUBRIC_TEXT if i % 2 else ""
            bodies.append(_body(q, answers, [label] * 4))
            rows += [{"prompt": q, "response": a, **({"rubric": label} if label else {})} for a in answers]
        replies = asyncio.run(_post_all(url, bodies, timeout=1800))
        bad = httpx.post(url + "/get_reward", json={"query": "not a list", "prompts": []})
        after = httpx.post(url + "/get_reward", json=bodies[0], timeout=600)
    finally:
        proc.terminate()  # a batch being scored holds the exit until it ends: then kill
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert [r.status_code for r in replies] == [200] * 16
    rewards = [x for r in replies for x in r.json()["rewards"]]
    assert len(rewards) == 64 and all(len(r.json()["rewards"]) == 4 for r in replies)
    assert all(0.0 <= x <= 1.0 for x in rewards)
    assert 400 <= bad.status_code < 500 and "error" in bad.json()
    # float rounding only: how a batch splits into shared prefixes (instructions, then question) moves scores ~1e-6
    assert after.status_code == 200 and after.json()["rewards"] == pytest.approx(rewards[:4], abs=1e-4)

    src, out = tmp_path / "rows.jsonl", tmp_path / "scores.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["judge", "--judge", "smollm2-135m-instruct", "--mode", "yesno", "--dtype", "float32", "--input",
                 str(src), "--output", str(out)]) == 0
    judged = [json.loads(line)["score"] for line in out.read_text(encoding="utf-8").splitlines()]
    assert max(abs(a - b) for a, b in zip(rewards, judged, strict=True)) < 1e-4


# ----------------------------------------------------------------------------- one client cannot stall the server


_OLD_END_MARKERS = (r"(?:<([|\uff5c])[^\s<>|\uff5c]{1,64}\1>|</s>)"  # the regex strip_end_markers replaced
                    r"(?:\s*(?:<([|\uff5c])[^\s<>|\uff5c]{1,64}\2>|</s>))*\s*$")


def test_text_handling_is_linear_and_strips_what_the_regex_stripped() -> None:
    """``"</s> " * n`` took 37 s at 200k characters with the end-marker regex; the user-turn regex was quadratic too."""
    import random
    import re

    from evolm.serve.protocols import strip_end_markers

    old = re.compile(_OLD_END_MARKERS)
    pieces = ["</s>", "<|im_end|>", "<|x|>", " ", "\n", "a", "<", "|", ">", "\uff5c", "<\uff5cend\uff5c>", "<||>",
              "<|a b|>", "<|" + "n" * 64 + "|>", "<|" + "n" * 65 + "|>", "</s", "s>"]
    rng = random.Random(0)
    for _ in range(5000):  # the same result as the regex on random marker soup
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        assert strip_end_markers(text) == old.sub("", text), repr(text)
    for hostile in ("</s> " * 40_000, "<|im_end|> " * 20_000, "<|" * 100_000):
        t0 = time.process_time()
        response_from_query("Q?" + hostile + "x", "Q?")
        response_from_query("Q?" + hostile, "Q?")
        assert time.process_time() - t0 < 0.5
    llama = "<|start_header_id|>user<|end_header_id|>\n\n"
    for hostile in ("<|im_start|>user\n" * 12_000, llama * 5_000 + "<|eot_id|>"):
        t0 = time.process_time()
        question_text(hostile)
        assert time.process_time() - t0 < 0.5
    assert question_text("<|im_start|>user\nA<|im_end|><|im_start|>user\nB<|im_end|><|im_start|>user\nC") == "B"


def test_health_answers_while_a_200k_character_request_and_a_batch_run() -> None:
    judge = FakeJudge(gate=threading.Event())
    with running(create_app(judge)) as url, ThreadPoolExecutor(1) as pool:
        big = pool.submit(httpx.post, url + "/get_reward", json=_body("Q?", ["</s> " * 40_000]), timeout=60)
        assert judge.entered.wait(20)  # the batch is in the judge, held there
        waits = []
        for _ in range(5):
            t0 = time.perf_counter()
            assert httpx.get(url + "/health", timeout=10).json()["status"] == "ok"
            waits.append(time.perf_counter() - t0)
        judge.gate.set()
        assert big.result().status_code == 200
    assert max(waits) < 1.0
    assert judge.calls[0][0].answer == ""  # the response was all end markers


def test_size_limits_are_413_with_a_json_error() -> None:
    settings = ServeSettings(max_body_mb=0.01, max_answers=3, max_answer_chars=100)
    judge = FakeJudge()
    with running(create_app(judge, settings=settings)) as url:
        body = json.dumps(_body("Q?", ["x" * 90] * 3)).encode() + b" " * 20_000
        declared = httpx.post(url + "/get_reward", content=body, headers={"content-type": "application/json"})
        chunked = httpx.post(url + "/get_reward", content=iter([body[:5000], body[5000:]]),
                             headers={"content-type": "application/json"})  # no Content-Length: counted as read
        answers = httpx.post(url + "/get_reward", json=_body("Q?", ["a"] * 4))
        chars = httpx.post(url + "/get_reward", json=_body("Q?", ["a" * 99]))
        slime = httpx.post(url + "/reward", json={"prompt": "Q?", "response": "a" * 101})
        ok = httpx.post(url + "/get_reward", json=_body("Q?", ["a" * 90] * 3))
    for reply, words in ((declared, "--max-body-mb"), (chunked, "--max-body-mb"), (answers, "--max-answers"),
                         (chars, "--max-answer-chars"), (slime, "--max-answer-chars")):
        assert reply.status_code == 413 and set(reply.json()) == {"error"} and words in reply.json()["error"]
    assert ok.status_code == 200 and sum(map(len, judge.calls)) == 3  # nothing over a limit reached the judge


def test_a_batch_is_shared_between_clients_then_between_a_clients_requests() -> None:
    from evolm.serve.fairness import Job, pick_batch

    def job(client: str, n: int, sent_work: int = 0) -> Job:
        return Job([Answer("Q?", str(k)) for k in range(n)], None, client=client,  # type: ignore[arg-type]
                   work_sent=sent_work)

    def given(picked: list, jobs: list[Job]) -> list[int]:
        return [dict((id(j), n) for j, n in picked).get(id(x), 0) for x in jobs]

    one = [job("a", 5000), job("b", 1)]
    assert given(pick_batch(one, 64, False, {}), one) == [63, 1]
    flood = [job("a", 100) for _ in range(200)] + [job("b", 3)]  # a's 200 requests are one client's share
    assert given(pick_batch(flood, 8, False, {}), flood)[-1] == 3
    own = [job("a", 5000, sent_work=900), job("a", 1)]  # within a client, the least served request first
    assert given(pick_batch(own, 1, False, {}), own) == [0, 1]
    load = {"a": 0.0, "b": 0.0}
    assert sum(n for _, n in pick_batch([job("a", 100), job("b", 100)], 64, False, load)) == 64
    assert load == {"a": 32.0, "b": 32.0}


@dataclass
class SlowJudge(FakeJudge):
    seconds_per_call: float = 0.02

    def score(self, items: list[JudgeItem]) -> list[Judgment]:
        time.sleep(self.seconds_per_call)
        return super().score(items)


@pytest.mark.slow
def test_a_large_request_cannot_starve_a_small_one() -> None:
    """5,000 answers (79 judge calls of 64) and then 1 answer: the small one is in the next call, not the 80th."""
    judge = SlowJudge()
    big_answers = [f"answer {i}" for i in range(5000)]
    with running(create_app(judge, settings=ServeSettings(max_batch=64, max_wait_ms=1))) as url, \
            ThreadPoolExecutor(1) as pool:
        big = pool.submit(httpx.post, url + "/get_reward", json=_body("Q?", big_answers), timeout=120)
        deadline = time.monotonic() + 30
        while not judge.calls and time.monotonic() < deadline:
            time.sleep(0.005)
        t0 = time.perf_counter()
        small = httpx.post(url + "/reward", json={"prompt": "Small?", "response": "x" * 10}, timeout=60)
        small_s = time.perf_counter() - t0
        calls_then = len(judge.calls)
        rewards = big.result().json()["rewards"]
    assert small.status_code == 200 and small.json() == 0.1
    assert calls_then < 20 and small_s < 2  # served within a couple of calls, not after the 79 of the big one
    assert rewards == [min(1.0, len(a) / 100) for a in big_answers]  # every answer scored, in order
    assert max(map(len, judge.calls)) <= 64 and sum(map(len, judge.calls)) == 5001


@pytest.mark.slow
def test_requests_past_their_deadline_free_their_slots_and_are_never_scored() -> None:
    judge = FakeJudge(gate=threading.Event())
    settings = ServeSettings(max_batch=1, max_queue=2, max_wait_ms=1, deadline_s=0.5)
    with running(create_app(judge, settings=settings)) as url, ThreadPoolExecutor(3) as pool:
        first = pool.submit(httpx.post, url + "/get_reward", json=_body("Q?", ["held"]), timeout=30)
        assert judge.entered.wait(10)  # the judge is busy with the first until the gate opens
        late = [pool.submit(httpx.post, url + "/get_reward", json=_body("Q?", [f"late {i}"]), timeout=30)
                for i in range(2)]
        assert [f.result().status_code for f in late] == [504, 504]
        health = httpx.get(url + "/health").json()
        after = pool.submit(httpx.post, url + "/get_reward", json=_body("Q?", ["after"]), timeout=30)
        time.sleep(0.2)
        judge.gate.set()
        assert first.result().status_code == 504 and after.result().status_code == 200
    assert health["queued"] == 0 and health["dropped"] == 3  # the slots were free while the judge was still busy
    scored = [it.answer for call in judge.calls for it in call]
    assert scored == ["held", "after"]  # the late ones were dropped, not scored after their clients left


@pytest.mark.slow
def test_a_client_that_leaves_has_its_answers_dropped() -> None:
    judge = FakeJudge(gate=threading.Event())
    with running(create_app(judge, settings=ServeSettings(max_batch=1, max_wait_ms=1))) as url, \
            ThreadPoolExecutor(1) as pool:
        first = pool.submit(httpx.post, url + "/get_reward", json=_body("Q?", ["held"]), timeout=30)
        assert judge.entered.wait(10)
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
            httpx.post(url + "/get_reward", json=_body("Q?", ["gone"] * 20), timeout=0.5)
        deadline = time.monotonic() + 10
        while httpx.get(url + "/health").json()["dropped"] < 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        health = httpx.get(url + "/health").json()
        judge.gate.set()
        assert first.result().status_code == 200
        time.sleep(0.2)
    assert health["dropped"] == 1 and health["queued"] == 0
    assert [it.answer for call in judge.calls for it in call] == ["held"]


def _closed_within(sock, seconds: float) -> float | None:  # noqa: ANN001
    """Seconds until the server closes ``sock`` (reading whatever it sends), or None if still open after ``seconds``."""
    sock.settimeout(0.1)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        try:
            if sock.recv(65536) == b"":
                return time.monotonic() - t0
        except TimeoutError:
            continue
        except ConnectionResetError:
            return time.monotonic() - t0
    return None


def test_slow_headers_slow_bodies_and_trickling_keep_alive_connections_are_closed() -> None:
    import socket

    settings = ServeSettings(header_timeout_s=0.5, body_timeout_s=0.5)
    with running(create_app(FakeJudge(), settings=settings)) as url:
        port = int(url.rsplit(":", 1)[1])
        silent = socket.create_connection(("127.0.0.1", port))
        slow_headers = socket.create_connection(("127.0.0.1", port))
        slow_headers.sendall(b"POST /get_reward HTTP/1.1\r\nHost: x\r\n")
        slow_body = socket.create_connection(("127.0.0.1", port))
        slow_body.sendall(b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 100\r\n\r\n{\"query\"")
        trickle = socket.create_connection(("127.0.0.1", port))
        trickle.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        trickle.settimeout(5)
        assert trickle.recv(65536).startswith(b"HTTP/1.1 200")

        def drip() -> None:  # a byte every 0.1 s: uvicorn's keep-alive timeout restarts on every byte
            for ch in b"GET /health HTTP/1.1\r\n":
                try:
                    trickle.sendall(bytes([ch]))
                except OSError:
                    return
                time.sleep(0.1)

        threading.Thread(target=drip, daemon=True).start()
        closed = [_closed_within(s, 5) for s in (silent, slow_headers, slow_body, trickle)]
        healthy = httpx.get(url + "/health").status_code
        for s in (silent, slow_headers, slow_body, trickle):
            s.close()
    assert all(c is not None and c < 2 for c in closed), closed
    assert healthy == 200


def test_serve_help_states_every_limit_and_its_default(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    defaults = ServeSettings()
    for flag, default in (("--max-body-mb", "16"), ("--max-answers", "8192"), ("--max-answer-chars", "500000"),
                          ("--header-timeout-s", "10"), ("--body-timeout-s", "60"), ("--max-connections", "1024"),
                          ("--max-queue", "256"), ("--deadline-s", "300"), ("--max-batch", "64"),
                          ("--max-batch-s", "2"), ("--max-label-criteria", "64"), ("--max-list", "32")):
        assert flag in text and f"(default: {default})" in text, flag
    assert (defaults.max_body_mb, defaults.max_answers, defaults.max_answer_chars) == (16, 8192, 500_000)
    assert (defaults.header_timeout_s, defaults.body_timeout_s, defaults.max_connections) == (10, 60, 1024)
    assert "keep-alive connections close after 5 s" in text and f"{defaults.max_header_kb} KiB" in text
    assert "Here 0, not 10000: one cache for every client tells a client whether another sent" in text


def test_the_judge_cache_is_off_in_serve_so_one_client_cannot_see_anothers_answers() -> None:
    """With serve's default (no cache), an answer another client sent earlier is judged afresh: judge_cached is 0.0
    for it, as for an answer nobody sent."""
    from evolm.cli.serve import make_parser
    from evolm.judge.cache import cached_judge

    sub = __import__("argparse").ArgumentParser().add_subparsers()
    make_parser(sub)
    args = sub.choices["serve"].parse_args(["--judge", "j"])
    judge = FakeJudge()
    with running(create_app(cached_judge(judge, args.judge_cache))) as url:
        httpx.post(url + "/get_reward", json=_body("Q?", ["secret answer"]), timeout=30)
        probe = httpx.post(url + "/get_reward", json=_body("Q?", ["secret answer", "never sent"]), timeout=30).json()
    assert args.judge_cache == 0 and probe["extra_logs"]["judge_cached"] == [0.0, 0.0]
    assert len(judge.calls) == 2


def test_a_batch_is_cut_to_what_the_judge_scores_in_max_batch_s() -> None:
    from evolm.serve.batcher import Batcher

    batcher = Batcher(score=lambda answers: [], settings=ServeSettings(max_batch=64, max_batch_s=2.0))
    assert batcher.room() == 8  # nothing measured yet: a small first call, to time the judge
    batcher.unit_s = 0.5
    assert batcher.room() == 4
    batcher.unit_s = 10.0
    assert batcher.room() == 1
    batcher.unit_s = 0.001
    assert batcher.room() == 64


def test_headers_over_the_size_limit_are_refused() -> None:
    """h11 keeps at most ``max_header_kb`` of an unfinished request head in memory (a head that arrives whole
    in one read is parsed: the limit bounds what a client can make the server hold, not the head's size)."""
    import socket

    with running(create_app(FakeJudge(), settings=ServeSettings(max_header_kb=8))) as url:
        sock = socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1])))
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"a" * 20_000)  # headers still unfinished
        sock.settimeout(5)
        reply = sock.recv(65536)
        sock.close()
    assert reply.startswith(b"HTTP/1.1 400")


@pytest.mark.slow
def test_a_newcomer_goes_first_when_a_batch_has_room_for_one_answer() -> None:
    """With batches of one answer, the 1-answer request is the next judge call, not the 200-answer request that got
    there first. The judge holds its first call until both requests wait, so the order does not hang on timing."""
    judge = FakeJudge(gate=threading.Event())
    with running(create_app(judge, settings=ServeSettings(max_batch=1, max_wait_ms=1))) as url, \
            ThreadPoolExecutor(2) as pool:
        big = pool.submit(httpx.post, url + "/get_reward", json=_body("Q?", ["a"] * 200), timeout=120)
        assert judge.entered.wait(10)
        small = pool.submit(httpx.post, url + "/reward", json={"prompt": "Small?", "response": "x"}, timeout=60)
        deadline = time.monotonic() + 30
        while httpx.get(url + "/health").json()["queued"] < 2:
            assert time.monotonic() < deadline, "the small request did not queue"
            time.sleep(0.02)
        judge.gate.set()
        assert small.result().status_code == 200 and big.result().status_code == 200
    assert [it.question for it in judge.calls[1]] == ["Small?"]  # the call after the one it waited behind


class CountingListBackend:
    """A listwise judge's backend whose digit is the number of answers the list shows: a score says which group
    an answer was judged in."""

    def next_token_logprobs(self, conversations, candidates, **_):  # noqa: ANN001, ANN202
        import math
        import re

        out = []
        for conv in conversations:
            n = int(re.search(r"Rate answer \d+ of (\d+)\.", conv[1]["content"]).group(1))  # type: ignore[union-attr]
            out.append({str(d): 0.0 if d == min(n, 9) else -math.inf for d in range(10)})
        return out


@pytest.mark.slow
def test_listwise_requests_are_one_group_each_never_mixed_or_split() -> None:
    """Two clients' concurrent listwise requests to one question score as each does alone (each a list of its own
    answers, not one list of both), and a request larger than --max-batch is still one list."""
    judge = Judge(CountingListBackend(), mode="listwise")  # type: ignore[arg-type]
    a, b = _body("Q?", ["4", "four"]), _body("Q?", ["5"])
    app = create_app(judge, settings=ServeSettings(max_batch=64, max_wait_ms=300))
    with running(app) as url:
        alone = [r.json()["rewards"] for r in (httpx.post(url + "/get_reward", json=x) for x in (a, b))]
        together = [r.json()["rewards"] for r in asyncio.run(_post_all(url, [a, b]))]
    assert app.state.batcher.batches == 3  # the two together were judged in one batch
    assert alone == [[2 / 9, 2 / 9], [1 / 9]]
    assert together == alone
    with running(create_app(judge, settings=ServeSettings(max_batch=2, max_wait_ms=1))) as url:
        big = httpx.post(url + "/get_reward", json=_body("Q?", [str(k) for k in range(4)]), timeout=30).json()
    assert big["rewards"] == [4 / 9] * 4  # one list of 4, though a batch holds 2


def test_serve_threads_sets_the_judges_cpu_threads_before_it_loads(monkeypatch) -> None:
    """--threads N: the judge's forward passes run on N threads, set before the judge loads."""
    import torch

    from evolm.errors import InputError

    seen = []

    def judge_from_args(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        seen.append(torch.get_num_threads())
        raise InputError("stop here")

    before = torch.get_num_threads()
    monkeypatch.setattr("evolm.cli.serve.judge_from_args", judge_from_args)
    torch.set_num_threads(2)
    try:
        assert main(["serve", "--judge", "j", "--threads", "1"]) == 2
    finally:
        torch.set_num_threads(before)
    assert seen == [1]


def _label(n_criteria: int, text: str = "The answer is correct.") -> str:
    return json.dumps({"criteria": [{"criterion": f"{text} ({k})", "weight": 1.0} for k in range(n_criteria)]})


@dataclass
class CriteriaJudge(FakeJudge):
    """A judge whose call takes ``seconds_per_criterion`` per criterion of its items' rubrics (a yesno judge's forward
    passes), so a test sees what the batcher counts."""

    seconds_per_criterion: float = 0.002
    started: int = 0  # calls begun (``calls`` has a call once it has ended)

    def score(self, items: list[JudgeItem]) -> list[Judgment]:
        self.started += 1
        time.sleep(self.seconds_per_criterion * sum(max(1, len(it.rubric.criteria)) if it.rubric else 1
                                                    for it in items))
        return super().score(items)


def test_a_label_over_the_criteria_cap_is_413_at_once_and_others_are_served() -> None:
    """A 1-answer request whose label has 20,000 criteria (a 1 MB body) is refused before judging, in well under
    2 s, and a 1-answer request sent beside it is answered as fast as alone."""
    judge = CriteriaJudge()
    with running(create_app(judge, settings=ServeSettings(max_wait_ms=5))) as url:
        t0 = time.perf_counter()
        assert httpx.post(url + "/get_reward", json=_body("Q?", ["small"]), timeout=60).status_code == 200
        alone_s = time.perf_counter() - t0
        big = _body("Big?", ["x"], [_label(20_000)])
        assert len(json.dumps(big)) > 900_000
        t0 = time.perf_counter()
        replies = asyncio.run(_post_all(url, [big, _body("Q?", ["small"])]))
        both_s = time.perf_counter() - t0
    assert replies[0].status_code == 413 and "--max-label-criteria" in replies[0].json()["error"]
    assert replies[1].status_code == 200 and replies[1].json()["rewards"] == [0.05]
    assert both_s < 2 and both_s < alone_s + 1.5
    assert all(len(it.rubric.criteria) < 100 for call in judge.calls for it in call if it.rubric)  # never judged


@pytest.mark.slow
def test_batches_count_criteria_so_requests_under_the_cap_share_fairly() -> None:
    """Many answers each with a 64-criterion label (under the cap), then a 1-answer request: the small one waits about
    one call's worth of criteria, not for every answer that happened to fit in a batch of 64 answers."""
    judge = CriteriaJudge(seconds_per_criterion=0.002)
    settings = ServeSettings(max_batch=64, max_batch_s=0.3, max_wait_ms=1)
    heavy = _body("Heavy?", [f"a{k}" for k in range(64)], [_label(64)] * 64)  # 64 answers x 64 criteria: ~8 s
    with running(create_app(judge, settings=settings)) as url, ThreadPoolExecutor(1) as pool:
        first = pool.submit(httpx.post, url + "/get_reward", json=heavy, timeout=120)
        deadline = time.monotonic() + 30
        while len(judge.calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        t0 = time.perf_counter()
        small = httpx.post(url + "/reward", json={"prompt": "Small?", "response": "x" * 10}, timeout=60)
        small_s = time.perf_counter() - t0
        assert first.result().status_code == 200
    assert small.status_code == 200 and small_s < 1.5  # one or two calls of ~0.3 s, not an ~8 s call of 64 answers
    work = [sum(len(it.rubric.criteria) if it.rubric else 1 for it in call) for call in judge.calls]
    assert max(work) <= 64 + 64  # a batch's room is criteria: at most one answer over it


def test_a_listwise_list_over_the_cap_is_413_at_once_and_others_are_served() -> None:
    judge = Judge(CountingListBackend(), mode="listwise")  # type: ignore[arg-type]
    with running(create_app(judge, settings=ServeSettings(max_list=32, max_wait_ms=5))) as url:
        t0 = time.perf_counter()
        replies = asyncio.run(_post_all(url, [_body("Q?", [f"a{k}" for k in range(200)]), _body("R?", ["one"])]))
        took = time.perf_counter() - t0
        fits = httpx.post(url + "/get_reward", json=_body("Q?", [f"a{k}" for k in range(32)]), timeout=60)
    assert replies[0].status_code == 413 and "--max-list" in replies[0].json()["error"]
    assert replies[1].status_code == 200 and replies[1].json()["rewards"] == [1 / 9]
    assert took < 2 and fits.status_code == 200 and fits.json()["rewards"] == [1.0] * 32


@pytest.mark.slow
def test_a_missing_score_is_never_filled_from_another_clients_answers() -> None:
    """Client A's answer gets no score; client B's answers to the same question, in the same batch, do. A's reward is
    0.0 (its own request has no other score to fill from), never B's mean; a missing score within a request is filled
    from that request's answers to the same question."""
    judge = FakeJudge(missing_on="MISSING")
    a, b = _body("Q?", ["MISSING"]), _body("Q?", ["x" * 40, "x" * 60])
    both = _body("Q?", ["MISSING", "x" * 40, "x" * 60])
    app = create_app(judge, settings=ServeSettings(max_wait_ms=300))
    with running(app) as url:
        for _ in range(3):
            ra, rb = asyncio.run(_post_all(url, [a, b]))
            assert ra.json()["rewards"] == [0.0] and ra.json()["extra_logs"]["missing_score"] == [1.0]
            assert rb.json()["rewards"] == [0.4, 0.6]
        own = httpx.post(url + "/get_reward", json=both, timeout=30).json()
    assert any(len(call) == 3 for call in judge.calls)  # A and B were in one judge call
    assert own["rewards"] == pytest.approx([0.5, 0.4, 0.6])


@pytest.mark.parametrize("mode", ["prob", "yesno", "listwise"])  # rar_explicit: yesno's passes, 0/1 verdicts
def test_an_overlong_label_gets_no_other_clients_mean_in_any_mode(tiny_backend, mode: str) -> None:
    """The attack as filed: A's label is too long for the judge's context (unscored), B's fits; A's reward is
    never B's mean, in every mode that scores with the tiny judge."""
    judge = Judge(tiny_backend, mode=mode, max_context=2000)
    a = _body("Q?", ["An answer."], [_label(2, "word " * 2000)])
    b = _body("Q?", ["An answer.", "Another answer here."], [RUBRIC_TEXT] * 2)
    with running(create_app(judge, settings=ServeSettings(max_wait_ms=300))) as url:
        ra, rb = (r.json() for r in asyncio.run(_post_all(url, [a, b])))
    assert ra["extra_logs"]["missing_score"] == [1.0] and rb["extra_logs"]["missing_score"] == [0.0, 0.0]
    assert ra["rewards"] == [0.0] and sum(rb["rewards"]) / 2 != 0.0


@dataclass
class LongRubricWriter(FakeWriter):
    """A rubric writer that writes ``criteria`` criteria for a question holding "Heavy", one for any other."""

    criteria: int = 64

    def generate(self, conversations, params, *, progress: bool = False) -> list[str]:  # noqa: ANN001
        self.prompts += len(conversations)
        return [_label(self.criteria if "Heavy" in json.dumps(conv) else 1) for conv in conversations]


@pytest.mark.slow
@pytest.mark.parametrize("source", ["rubric_written", "rubric_from_file"])
def test_written_and_file_rubrics_cost_their_criteria_so_a_small_request_is_not_starved(source: str) -> None:
    """Light traffic first (the judge's time per unit measured on 1-criterion answers), then 32 answers whose rubric,
    written by the server's writer or read from --rubrics, has 64 criteria, then another client's 1-answer request: the
    small one waits a call or two of 64 criteria, not one call of the 32 answers counted as one unit each (~4 s)."""
    judge = CriteriaJudge(seconds_per_criterion=0.002)
    rubrics = (RubricSource(writer=LongRubricWriter()) if source == "rubric_written" else RubricSource(
        table=RubricTable(by_id={}, by_prompt={"Heavy?": Rubric.from_obj(_label(64)), "Small?": Rubric.from_obj(_label(1))})))
    settings = ServeSettings(max_batch=64, max_batch_s=0.3, max_wait_ms=1)
    with running(create_app(judge, rubrics, settings)) as url, ThreadPoolExecutor(1) as pool:
        for k in range(3):
            assert httpx.post(url + "/reward", json={"prompt": "Small?", "response": f"warm {k}"}, timeout=60).json() == 0.9
        warm = len(judge.calls)
        heavy = pool.submit(httpx.post, url + "/get_reward", json=_body("Heavy?", [f"a{k}" for k in range(32)]),
                            timeout=120)
        deadline = time.monotonic() + 30
        while judge.started <= warm and time.monotonic() < deadline:  # the heavy request's first call has begun
            time.sleep(0.005)
        t0 = time.perf_counter()
        small = httpx.post(url + "/get_reward", json=_body("Small?", ["x"]), timeout=60)
        small_s = time.perf_counter() - t0
        reply = heavy.result()
    assert reply.status_code == 200 and reply.json()["extra_logs"][source] == [1.0] * 32
    assert small.status_code == 200 and small.json()["extra_logs"][source] == [1.0]
    assert small_s < 1.5  # a call or two of ~0.13 s, not the ~4 s of 32 answers x 64 criteria
    work = [sum(len(it.rubric.criteria) for it in call) for call in judge.calls[warm:]]
    assert max(work) <= 64 + 64 and sum(work) == 32 * 64 + 1  # a batch's room is criteria, whatever the source


class GatedBackend:
    """A judge's backend that counts the forward passes it is asked for (one per conversation); its first call waits
    for ``gate``, as a long forward pass would."""

    def __init__(self, backend, gate: threading.Event) -> None:  # noqa: ANN001
        self.backend, self.gate, self.passes = backend, gate, []

    def __getattr__(self, name: str):  # noqa: ANN204 - the tiny backend's tokenizer, context length...
        return getattr(self.backend, name)

    def next_token_logprobs(self, conversations, candidates, **kwargs):  # noqa: ANN001, ANN003, ANN201
        self.passes.append(len(conversations))
        if len(self.passes) == 1:
            self.gate.wait(30)
        return self.backend.next_token_logprobs(conversations, candidates, **kwargs)


@pytest.mark.slow
def test_a_request_past_its_deadline_has_the_rest_of_its_batch_left_unjudged(tiny_backend) -> None:
    """A (3 answers x 8 criteria) and B (1 answer x 8 criteria, sent 1.5 s later) are judged in one batch, in chunks
    of 8 forward passes (--max-batch-s 4 at 0.125 s a pass); B's chunk is first and runs long. A's deadline passes
    meanwhile: A gets its 504 at its deadline, its three chunks are never judged, and B's reward is the judge's
    own."""
    gate = threading.Event()
    backend = GatedBackend(tiny_backend, gate)
    judge = Judge(backend, mode="yesno")  # type: ignore[arg-type]
    label = _label(8)
    app = create_app(judge, settings=ServeSettings(max_batch=64, max_batch_s=4.0, max_wait_ms=2500, deadline_s=4.0))
    app.state.batcher.unit_s = 0.125  # as measured: a batch holds 32 passes, a judge call 8
    with running(app) as url, ThreadPoolExecutor(2) as pool:
        t0 = time.perf_counter()
        a = pool.submit(httpx.post, url + "/get_reward", json=_body("Zebra?", ["a1", "a2", "a3"], [label] * 3),
                        timeout=60)
        time.sleep(1.5)
        b = pool.submit(httpx.post, url + "/get_reward", json=_body("Apple?", ["It is red."], [label]), timeout=60)
        ra = a.result()
        a_s, judging = time.perf_counter() - t0, not gate.is_set() and len(backend.passes) == 1
        gate.set()
        rb = b.result()
        health = httpx.get(url + "/health").json()
    alone = judge.score([JudgeItem("Apple?", "It is red.", Rubric.from_obj(label))])[0].score
    assert ra.status_code == 504 and a_s < 4.0 + 1.0 and judging  # at its deadline, while B's chunk still ran
    assert rb.status_code == 200 and rb.json()["rewards"] == pytest.approx([alone], abs=1e-6)
    assert backend.passes[:1] == [8] and sum(backend.passes) == 8 + 8  # B's chunk, then B alone here: none of A's
    assert health["answers"] == 1 and health["dropped"] == 1


def test_a_batch_is_judged_in_chunks_that_never_split_a_list_and_leave_out_dropped_requests() -> None:
    from evolm.serve.batcher import score_answers

    calls: list[list[str]] = []

    class Recording(CountingListBackend):
        def next_token_logprobs(self, conversations, candidates, **kw):  # noqa: ANN001, ANN003, ANN202
            calls.append([c[1]["content"] for c in conversations])
            return super().next_token_logprobs(conversations, candidates, **kw)

    judge = Judge(Recording(), mode="listwise")  # type: ignore[arg-type]
    answers = [Answer("Q?", f"one {k}", cost=3, request=1) for k in range(3)] + \
        [Answer("Q?", f"two {k}", cost=2, request=2) for k in range(2)] + [Answer("R?", "three", request=3)]
    scored = score_answers(judge, answers, listwise=True, chunk=5, wanted=lambda request: request != 2)
    assert [s.score if s else None for s in scored] == [3 / 9] * 3 + [None, None, 1 / 9]
    assert len(calls) == 2 and len(calls[0]) == 6  # request 1's list of 3, alone (9 > 5), twice; then request 3's
    assert not any("two" in text for call in calls for text in call)  # request 2 was dropped: never judged
