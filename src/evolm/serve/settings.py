"""How ``evolm serve`` batches, bounds and times out requests: one settings model, whose fields the flags are
made from."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from evolm.config.settings import Settings


def setting(default: Any, help: str, **constraints: Any) -> Any:  # noqa: A002 - the flag's help, as config's
    """A settings field: its default, its help (the flag's), its range (``ge=1``...)."""
    return Field(default, description=help, **constraints)


class ServeSettings(Settings):
    """How requests are batched, bounded and timed out (``evolm serve --help`` gives the flags)."""

    model_config = ConfigDict(frozen=True)

    # Parameters that control batching
    max_batch: int = setting(64, "work in one batch, in answers each counted by its rubric's criteria (from its "
                             "label, the writer or --rubrics; a listwise answer: by the size of its list) times "
                             "its length (--cost-chars); a larger request is scored over several batches, each "
                             "shared fairly between the clients waiting, then between a client's requests, so it "
                             "cannot hold up small ones", ge=1)
    max_batch_s: float = setting(2.0, "seconds a batch should take, about: a batch holds at most the work the "
                                 "judge did in that time on recent batches (at least one answer), so a request "
                                 "behind a large one waits about two batches; it goes to the judge in calls of "
                                 "about a quarter of that, and a request past its deadline has its answers left "
                                 "out of the calls still to come", gt=0)
    max_wait_ms: float = setting(5.0, "how long a batch waits for more requests once one arrives; a few ms cost "
                                 "little next to a forward pass", gt=0)
    max_queue: int = setting(256, "requests waiting beyond the batch being scored, all clients; past it only a "
                             "client with none waiting is let in, the others get 503 with Retry-After", ge=1)
    max_client_queue: int = setting(64, "requests one client (a peer address) may have waiting; one more gets 503 "
                                    "with Retry-After, so one client cannot fill --max-queue. An engine that "
                                    "sends one rollout per request from one machine needs it above its requests "
                                    "in flight", ge=1)
    deadline_s: float = setting(300.0, "seconds a request may take in all, queueing included; then 504 (its "
                                "answers are dropped unscored)", gt=0)
    cost_chars: int = setting(4000, "characters of question, answer and criterion text (about 1k tokens) that "
                              "count as one unit of work per criterion: a 500,000-character answer costs 125 "
                              "units a criterion, what its forward passes take, so it is a batch of its own, not "
                              "1/64 of one", ge=1)
    rubric_cache: int = setting(4096, "written rubrics kept, one per question, least recently used dropped first",
                                ge=1)

    # Parameters that control what one request or connection may take
    max_body_mb: float = setting(16.0, "request body size in MiB; a larger body is answered 413 (from its "
                                 "Content-Length, or as it is read)", gt=0)
    max_answers: int = setting(8192, "answers in one request; more is answered 413", ge=1)
    max_label_criteria: int = setting(64, "criteria in one label's rubric; more is answered 413 before judging (a "
                                      "criterion is a forward pass in yesno, and rubric text in every prompt of "
                                      "the other modes)", ge=1)
    max_list: int = setting(32, "answers a listwise judge lists together (one request's answers to one question "
                            "and rubric); more is answered 413 before judging (a list's cost grows with its size "
                            "squared)", ge=1)
    max_answer_chars: int = setting(500_000, "characters in one query, prompt or response (about a 128k-token "
                                    "context); more is answered 413", ge=1)
    header_timeout_s: float = setting(10.0, "seconds a connection has to send a request's headers, from its start "
                                      "or its last reply; then it is closed", gt=0)
    body_timeout_s: float = setting(60.0, "seconds a request's body may take after its headers; then the "
                                    "connection is closed", gt=0)
    keep_alive_s: int = setting(5, "seconds an idle keep-alive connection is kept open (uvicorn's "
                                "timeout_keep_alive)", ge=1)
    max_connections: int = setting(1024, "connections open (or requests in progress) at once; beyond it requests "
                                   "get 503 (uvicorn's limit_concurrency)", ge=1)
    max_header_kb: int = setting(64, "KiB of an unfinished request head buffered at most (h11's incomplete-event "
                                 "limit); more is answered 400", ge=1)

    # Parameters that control a local judge
    threads: int = setting(0, "CPU threads of a local judge's forward passes (torch's intra-op threads); 0: "
                           "torch's default (the cores). On a CPU shared with other work, fewer threads than "
                           "cores keep a call from stalling (docs/SECURITY.md)", ge=0)
