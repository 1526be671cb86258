"""The reward server: EvoLM's rubric + judge reward over HTTP, for RL engines in other processes.

OpenRLHF, slime and verl compute rewards in their own workers; they reach an external reward by
HTTP. ``evolm serve`` (``cli/serve.py``) loads the judge once (``judge.build_judge``, the builder that
``evolm judge`` and training use, so a reward here equals ``evolm judge`` on the same row) and
answers two wire protocols, verified against the engines' sources:

- ``POST /get_reward``, OpenRLHF's remote reward model (OpenRLHF@3c3be623). Client:
  ``openrlhf/utils/agent.py`` (``SingleTurnAgentExecutor._fetch_rewards_via_http``: ``{"query":
  [...], "prompts": [...], "labels": [...]}``, one rollout per request; reads ``rewards``, ``scores``
  then ``extra_logs``; up to 0.10.1 the same body came from ``openrlhf/utils/remote_rm_utils.py``);
  reference server: ``openrlhf/cli/serve_rm.py`` (answers ``{"rewards", "scores", "extra_logs"}``, lists).
  OpenRLHF's query is the prompt and the response decoded together with special tokens; the
  response is the query minus its prompt, end-of-turn markers stripped (``response_from_query``).
- ``POST /reward``, slime's ``remote_rm`` (``slime/rollout/rm_hub/__init__.py``, slime@624b824a): it posts
  ``{"prompt", "response", "label"}`` and keeps whatever JSON comes back as the sample's reward, so
  the reply is a bare number (a dict would need ``--reward-key``).

A prompt may be chat-templated text (ChatML or Llama 3) or a list of messages: the judge and the
rubric writer see the last user turn (``question_text``). Rubrics come from the label when it
parses as one; else from the rubric writer (once per distinct question, kept in a bounded LRU keyed
by its sha256) or a rubric file; else the judge scores alone. ``extra_logs`` says which, per answer.

Requests are not scored one by one: an asyncio batcher collects what arrives within a few milliseconds (up to
``max_batch`` units of work: an answer counts its rubric's criteria, from its label, the writer or the file, a
listwise answer the size of its list, times its length in ``cost_chars``; ``sources.costed``, the writer's
rubrics written first) and scores it in ``Judge.score`` calls in a worker thread, answers to one question next
to each other, so they share the judge's prompt prefix as in training. A client is its peer address
(``client_of``). A request larger than a batch is scored over several; each batch, and each writer call, is
shared between the clients waiting by fair queueing, then between a client's requests (``fairness``), and a
batch is cut to about ``max_batch_s`` seconds of judging, so one client cannot hold the judge from the others.
A ``listwise`` judge is the exception: there a request's answers to one question are one list, judged with no
other client's answers and never split between batches (a large request is a batch of its own). A client's
full queue (``max_client_queue``), or a full queue (``max_queue``) for a client with requests waiting, answers
503 with ``Retry-After``; a request past its deadline 504, and one whose client has gone is dropped: their
answers not yet scored never are, not even those of the batch being judged (a slow judge's batch goes to it in
chunks, ``Batcher.chunk``). A malformed request is a 4xx, one over a size limit (body, answers, characters per
text, criteria per label, a listwise list's answers) 413, before any judging; every error body is ``{"error":
...}`` and the server keeps serving. Bodies are decoded and their text handled off the event loop, in linear
time (``/health`` answers while a 200k-character request is read or a batch is judged); a connection that does
not send its headers or body in time is closed (``guarded_h11``). All model calls run in that one thread: the
judge and a rubric writer may share one model. A missing score is filled from the same request's answers
(``scoring.fill_within_request``), never from another client's. The judge's results can be kept
(``--judge-cache N``, off by default here: a cache shared by clients tells one whether another sent an answer,
through ``extra_logs.judge_cached`` and the time a reply takes; ``evolm.judge.cache``): an answer scored
before, under the same question, rubric and judge, is not judged again; ``/health`` gives the cache's hit
rate. (No ``from __future__ import annotations`` here: FastAPI reads the endpoints' annotations at run time.)
"""

import asyncio
import json
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any

from evolm.errors import BackendError
from evolm.judge.cache import CachedJudge
from evolm.serve.batcher import Batcher
from evolm.serve.protocols import Answer, RequestRejected, openrlhf_answers, slime_answer
from evolm.serve.scoring import Scored, score_answers
from evolm.serve.settings import ServeSettings
from evolm.serve.sources import SOURCES, RubricSource, costed, written

INSTALL = "the reward server needs FastAPI and uvicorn: pip install 'evolm[serve]'"


def _json_body(raw: bytes) -> Any:
    """The request's JSON; 400 for what is not JSON, nests too deeply, or holds a lone surrogate escape."""
    from evolm.errors import InputError
    from evolm.runs.jsonl import check_text

    try:
        body = json.loads(raw)
        check_text(body, "the body")
        return body
    except ValueError as e:
        raise RequestRejected(400, f"the body is not JSON: {e}") from None
    except RecursionError:
        raise RequestRejected(400, "the body is JSON nested too deeply") from None
    except InputError as e:
        raise RequestRejected(400, str(e)) from None


def client_of(request: Any) -> str:
    """Who sent ``request``, for queue limits and fair shares: its connection's peer address (port left out:
    one machine opening many connections is one client). The server has no API keys, and a header the client
    sets could be changed at will to pass for many clients; uvicorn runs without proxy headers
    (``http.uvicorn_options``), so X-Forwarded-For cannot either. Behind a reverse proxy every request is the
    proxy's: one client."""
    return request.client.host if request.client is not None else ""


def _read(parse: Callable[[], list[Answer]]) -> list[Answer]:
    """``parse()``, with a value in the request that the parsers refuse (an ``InputError`` or ``ValueError``,
    e.g. a rubric weight too large for a float) a 400 naming it, not a bare 500."""
    from evolm.errors import InputError

    try:
        return parse()
    except (InputError, ValueError, ArithmeticError, RecursionError) as e:
        why = f"the request holds a value evolm cannot read: {type(e).__name__}: {e}"
        raise RequestRejected(400, why) from None


async def _client_gone(request: Any) -> None:
    """Return once the client of ``request`` (its body already read) has closed the connection."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def require_serve_extra() -> None:
    """FastAPI and uvicorn are the ``serve`` extra: a one-line ``BackendError`` naming it when absent."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        raise BackendError(INSTALL) from None


def _body_doc(example: dict) -> dict:
    return {"requestBody": {"required": True, "content": {"application/json": {"example": example}}}}


_RUBRIC = ('{"criteria": [{"criterion": "The answer is 4.", "weight": 1.0, '
           '"scoring_levels": {"1.0": "yes", "0.0": "no"}}]}')
LOG_KEYS = (*SOURCES, "missing_score", "prompt_mismatch", "judge_cached")


def create_app(judge: Any, rubrics: RubricSource | None = None, settings: ServeSettings | None = None) -> Any:
    """The FastAPI app around ``judge`` (anything with ``score(list[JudgeItem])``); its state lives in it.

    The batcher starts and stops with the app's lifespan, so run it under a server that runs the
    lifespan (uvicorn does by default).
    """
    require_serve_extra()
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse
    from starlette.requests import ClientDisconnect

    rubrics = rubrics if rubrics is not None else RubricSource()
    settings = settings or ServeSettings()
    listwise = getattr(judge, "mode", None) == "listwise"
    batcher = Batcher(lambda answers, chunk, wanted: score_answers(judge, answers, listwise, chunk, wanted),
                      settings, whole=listwise,
                      resolve=lambda answers: written(rubrics, answers, listwise, settings.cost_chars))

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # noqa: ANN202 - FastAPI's lifespan contract
        batcher.start()
        try:
            yield
        finally:
            await batcher.stop()

    app = FastAPI(title="evolm reward server", lifespan=lifespan,
                  description="EvoLM's rubric + judge reward: OpenRLHF's /get_reward, slime's /reward.")
    app.state.batcher, app.state.rubrics, app.state.settings = batcher, rubrics, settings

    async def rejected(request: Request, exc: RequestRejected) -> JSONResponse:
        return JSONResponse({"error": exc.message}, status_code=exc.status, headers=exc.headers)

    async def failed(request: Request, exc: Exception) -> JSONResponse:  # a bug: still one line of JSON
        return JSONResponse({"error": f"internal error: {type(exc).__name__}"}, status_code=500)

    app.add_exception_handler(RequestRejected, rejected)
    app.add_exception_handler(Exception, failed)

    async def answers_of(request: Request,
                         parse: Callable[[Any, ServeSettings], list[Answer]]) -> list[Answer]:
        """The body read within ``max_body_mb`` (else 413), then parsed off the event loop by ``parse`` and
        costed (``costed``: 413 over the criteria or list caps, before any judging)."""
        limit = int(settings.max_body_mb * 2**20)
        too_big = RequestRejected(413, f"the body is over the {settings.max_body_mb:g} MiB limit "
                                  "(--max-body-mb)")
        length = request.headers.get("content-length", "")
        if length.isdigit() and int(length) > limit:
            raise too_big
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_big
                chunks.append(chunk)
        except ClientDisconnect:
            raise RequestRejected(499, "the client closed the connection") from None
        # JSON decoding and text handling are linear but take a while on megabytes: not on the event loop
        return await asyncio.to_thread(
            _read, lambda: costed(parse(_json_body(b"".join(chunks)), settings), settings, listwise, rubrics))

    async def _scored(request: Request, answers: list[Answer], arrived: float) -> list[Scored]:
        gone = asyncio.ensure_future(_client_gone(request))
        try:
            return await batcher.submit(answers, gone, settings.deadline_s - (time.monotonic() - arrived),
                                        client_of(request))
        finally:
            gone.cancel()

    @app.post("/get_reward", openapi_extra=_body_doc({"query": ["What is 2+2?The answer is 4."],
                                                      "prompts": ["What is 2+2?"], "labels": [_RUBRIC]}))
    async def get_reward(request: Request) -> JSONResponse:
        """OpenRLHF's remote reward: rewards and scores (the same values, in [0, 1]) and per-answer logs."""
        arrived = time.monotonic()
        answers = await answers_of(request, openrlhf_answers)
        scored = await _scored(request, answers, arrived) if answers else []
        rewards = [s.score for s in scored]
        return JSONResponse({"rewards": rewards, "scores": rewards,
                             "extra_logs": {k: [s.logs[k] for s in scored] for k in LOG_KEYS}})

    @app.post("/reward",
              openapi_extra=_body_doc({"prompt": "What is 2+2?", "response": "4", "label": _RUBRIC}))
    async def reward(request: Request) -> JSONResponse:
        """slime's remote_rm: the reward in [0, 1] as a bare JSON number."""
        arrived = time.monotonic()
        answers = await answers_of(request, lambda b, s: [slime_answer(b, s)])
        (scored,) = await _scored(request, answers, arrived)
        return JSONResponse(scored.score)

    @app.get("/health")
    async def health() -> dict:
        """Liveness, and what the server has done: batches, answers. Not the rubrics written nor the rubric
        cache's size: one client would see from them whether another had asked its question."""
        return {"status": "ok", "mode": getattr(judge, "mode", None), "rubrics": rubrics.kind,
                "queued": batcher.queued(), "dropped": batcher.dropped, "batches": batcher.batches,
                "answers": batcher.answers, "busy_s": round(batcher.busy_s, 3), **_judge_cache_health(judge)}

    return app


def _judge_cache_health(judge: Any) -> dict:
    """The judge cache's counts for /health (none without a cache): results kept, answers asked for, hit
    rate."""
    if not isinstance(judge, CachedJudge):
        return {}
    s = judge.cache.stats
    return {"judge_cache": {"entries": len(judge.cache), "lookups": s.lookups, "hits": s.hits,
                            "duplicates": s.duplicates, "sent": s.sent,
                            "hit_rate": None if s.hit_rate is None else round(s.hit_rate, 4)}}
