"""The two wire protocols ``evolm serve`` answers, read into ``Answer``s: OpenRLHF's ``/get_reward`` (query = prompt +
response, decoded together) and slime's ``/reward``; the question a chat-templated prompt holds; size limits
checked as the text is read. A malformed request is a ``RequestRejected`` (a 4xx).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from evolm.rubrics import Rubric
from evolm.serve.settings import ServeSettings


class RequestRejected(Exception):
    """A request answered with an error: ``status``, one-line ``message`` and optional headers."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


@dataclass(frozen=True)
class Answer:
    """One answer to score: the question the judge sees, the answer text, and the label as sent."""

    question: str
    response: str
    label: Any = None
    prompt_mismatch: bool = False  # the query did not start with its prompt (see ``response_from_query``)
    request: int | None = None  # the request it came in (set by the batcher): a listwise judge lists one request's
    # answers together
    cost: int = 1  # the judge's work for it, in the batcher's units (``evolm.serve.batcher.costed``)
    rubric: Rubric | None = None  # the rubric it is judged under, once known (``evolm.serve.batcher.RubricSource``)
    source: str = ""  # where that rubric came from (``batcher.SOURCES``, or ``batcher.TO_WRITE``); "": not looked up


_USER_TURN = (("<|im_start|>user\n", "<|im_end|>"),  # ChatML (Qwen, SmolLM2)
              ("<|start_header_id|>user<|end_header_id|>\n\n", "<|eot_id|>"))  # Llama 3
ANCHOR = 24  # characters of the prompt's end that find the response when the prompt did not come back exactly
_MARKER_NAME = 64  # the longest name of an end marker <|name|> (or DeepSeek's <｜name｜>)


def _last_turn(text: str, start: str, end: str) -> str | None:
    """The text of the last ``start ... end`` turn (turns taken left to right, as a non-greedy regex would), else None.

    One left-to-right pass with ``str.find``: a regex ``start(.*?)end`` rescans the rest of the text
    from every unclosed start (quadratic: ``"<|im_start|>user\\n" * n`` froze the server).
    """
    found, at = None, 0
    while (s := text.find(start, at)) >= 0:
        e = text.find(end, s + len(start))
        if e < 0:
            break  # no end after this start: none after any later start either
        found, at = text[s + len(start) : e], e + len(end)
    return found


def _marker_start(text: str, end: int) -> int | None:
    """Where an end marker (``</s>``, ``<|name|>``, ``<｜name｜>``) ending at ``end`` starts, else None (O(1))."""
    if text.endswith("</s>", 0, end):
        return end - 4
    if end < 4 or text[end - 1] != ">" or text[end - 2] not in "|\uff5c":
        return None
    bar, k = text[end - 2], end - 2
    while k > 0 and end - 2 - k < _MARKER_NAME and not (text[k - 1].isspace() or text[k - 1] in "<>|\uff5c"):
        k -= 1
    if k == end - 2 or k < 2 or text[k - 1] != bar or text[k - 2] != "<":
        return None
    return k - 2


def strip_end_markers(text: str) -> str:
    """``text`` without its trailing end-of-turn markers (and the whitespace between and after them), in linear time.

    >>> strip_end_markers("It is 4. <|im_end|>\\n<|endoftext|></s>\\n")
    'It is 4. '
    """
    cut = end = len(text)
    while True:
        while end > 0 and text[end - 1].isspace():
            end -= 1
        start = _marker_start(text, end)
        if start is None:
            return text[:cut]
        cut = end = start


def question_text(prompt: Any) -> str:
    """The question in a prompt: the last user turn of a message list or of ChatML / Llama 3 text, else the text.

    Engines send the policy's prompt as rendered for the policy; the judge and the rubric writer
    want the question itself (a system prompt or template markup would only add noise).

    >>> question_text("<|im_start|>system\\nBe brief.<|im_end|>\\n<|im_start|>user\\nWhat is 2+2?<|im_end|>\\n")
    'What is 2+2?'
    >>> question_text([{"role": "user", "content": "Hi"}])
    'Hi'
    """
    if isinstance(prompt, list):
        users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        if not users or not isinstance(users[-1], str):
            raise RequestRejected(422, "a prompt given as messages needs a user message with text content")
        return users[-1]
    if not isinstance(prompt, str):
        raise RequestRejected(422, f"a prompt must be text or a list of messages, not {type(prompt).__name__}")
    for start, end in _USER_TURN:
        turn = _last_turn(prompt, start, end)
        if turn is not None:
            return turn
    return prompt


def response_from_query(query: str, prompt: str) -> tuple[str, bool]:
    """The response in an OpenRLHF query (prompt + response), and whether the prompt was not its exact prefix.

    OpenRLHF decodes prompt and response tokens together with special tokens kept, so the prompt may
    not come back byte for byte: then the response starts after the prompt's last ``ANCHOR`` characters
    (the generation prompt, e.g. ``<|im_start|>assistant\\n``), else where query and prompt first
    differ. Trailing end-of-turn markers (``<|im_end|>``, ``</s>``...) are the policy's stop tokens.

    >>> response_from_query("Q: 2+2?A: 4<|im_end|>", "Q: 2+2?")
    ('A: 4', False)
    """
    if query.startswith(prompt):
        return strip_end_markers(query[len(prompt) :]), False
    anchor = prompt[-ANCHOR:]
    at = query.find(anchor) if anchor else -1
    if at >= 0:
        return strip_end_markers(query[at + len(anchor) :]), True
    return strip_end_markers(query[len(os.path.commonprefix([query, prompt])) :]), True


def _text_list(body: dict, key: str, n: int | None) -> list:
    value = body.get(key)
    if not isinstance(value, list):
        raise RequestRejected(422, f"'{key}' must be a list, not {type(value).__name__}")
    if n is not None and len(value) != n:
        raise RequestRejected(422, f"'{key}' has {len(value)} entries, 'query' has {n}")
    return value


def _check_chars(text: str, what: str, limits: ServeSettings) -> None:
    if len(text) > limits.max_answer_chars:
        raise RequestRejected(413, f"{what} has {len(text)} characters; at most {limits.max_answer_chars} "
                              "(--max-answer-chars)")


def openrlhf_answers(body: Any, limits: ServeSettings = ServeSettings()) -> list[Answer]:  # noqa: B008 - frozen
    """The answers of an OpenRLHF ``/get_reward`` body ``{"query": [str], "prompts": [str], "labels": [...]}``.

    ``RequestRejected`` 422 for a malformed body, 413 past ``limits`` (answers per request, characters per text).
    """
    if not isinstance(body, dict):
        raise RequestRejected(422, "the body must be a JSON object with 'query' and 'prompts'")
    queries = _text_list(body, "query", None)
    if len(queries) > limits.max_answers:
        raise RequestRejected(413, f"{len(queries)} answers in one request; at most {limits.max_answers} "
                              "(--max-answers)")
    prompts = _text_list(body, "prompts", len(queries))
    labels = _text_list(body, "labels", len(queries)) if body.get("labels") is not None else [None] * len(queries)
    out = []
    for n, (q, p, label) in enumerate(zip(queries, prompts, labels, strict=True)):
        if not isinstance(q, str) or not isinstance(p, str):
            raise RequestRejected(422, f"query and prompt {n} must be text")
        _check_chars(q, f"query {n}", limits)
        _check_chars(p, f"prompt {n}", limits)
        response, mismatch = response_from_query(q, p)
        out.append(Answer(question_text(p), response, label, mismatch))
    return out


def slime_answer(body: Any, limits: ServeSettings = ServeSettings()) -> Answer:  # noqa: B008 - frozen
    """The answer of a slime ``remote_rm`` body ``{"prompt": str | messages, "response": str, "label": ...}``."""
    if not isinstance(body, dict) or not isinstance(body.get("response"), str) or "prompt" not in body:
        raise RequestRejected(422, "the body must be a JSON object with 'prompt' and 'response' (text)")
    _check_chars(body["response"], "the response", limits)
    question = question_text(body["prompt"])
    _check_chars(question, "the question", limits)
    return Answer(question, body["response"], body.get("label"))
