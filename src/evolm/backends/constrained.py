"""Constrained (structured) decoding of the rubric role and the generative judge, opt-in.

A constrained reply is sampled under a grammar: at each step the tokens that cannot continue a
reply matching the JSON schema get probability zero and the rest are renormalised. Every rubric
then parses (2-5 criteria, each with text, a weight in (0, 1] and scoring levels) and every judge
reply has a score in [0, 1]. Under xgrammar (transformers) and vLLM the rubric grammar also makes the
weights multiples of 0.1 that sum to exactly 1 (``RUBRIC_EBNF``); a server that takes only a JSON schema
(``openai_response_format``) cannot enforce the sum (the parser then normalises the weights;
``format_validity`` wants 1 +- 0.15). No grammar makes the text mean anything.

Off in the paper's config (``rubric.constrained``, ``judge.constrained``). GRPO caveat: TRL
computes the log-probabilities of a constrained sample under the *unconstrained* model, so the
policy-gradient and KL terms see tokens the model was forced to, not the distribution that
sampled them (measured in ``bench/constrained_gap.py``, docs/FIDELITY.md).

Three forms, one schema:

- transformers: ``logits_processor`` builds one xgrammar ``LogitsProcessor`` per ``generate()``
  call, one grammar per row (compiled grammars are cached per tokenizer object and schema).
- vLLM: ``vllm_structured_outputs`` gives the ``StructuredOutputsParams`` keyword arguments.
- OpenAI-compatible servers: ``openai_response_format`` gives the ``response_format`` field.

Thinking templates: where the template lets the reply think (Qwen3 with thinking on), the
grammar allows one ``<think>...</think>`` block before the JSON (``REPLY_MAY_THINK``); where the
prompt already opened the block (Qwen3-Thinking-2507, R1 style) the reply must close it first
(``REPLY_THINKING``); where the prompt closed it (``enable_thinking=False``) only JSON is allowed.
The thinking text itself is free (anything but ``</think>``). Over HTTP the server renders the
prompt, so ``openai_response_format`` cannot allow a think block: serve a thinking model with
vLLM's ``--reasoning-parser`` (it applies the format after the reasoning) or turn thinking off.

xgrammar is imported on first use; without it, a one-line ``BackendError`` says what to install.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Sequence
from typing import Any

from evolm.backends.base import THINK_CLOSE, THINK_OPEN, opened_thinking
from evolm.errors import BackendError

_PLAIN = '\\x00-\\x1f"\\\\'  # no control characters (json.loads refuses them raw), no quotes or escapes
_BLANK = '\\x20\\x7f\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000'  # what str.strip() removes


def _text(most: int, nonblank: bool = True) -> dict[str, Any]:
    """A one-line string of at most ``most`` characters; with ``nonblank``, one that does not start blank.

    Written as a pattern, bounds included: xgrammar 0.2.9 ignores ``minLength``/``maxLength`` beside a
    pattern, and without one its bounded strings admit control characters (``\\x0b``), which
    ``json.loads`` refuses: a reply would match the grammar and still not parse. A criterion starting
    with a non-blank character is never blank (the parser drops blank ones, a random model writes them).
    """
    if not nonblank:
        return {"type": "string", "pattern": f"^[^{_PLAIN}]{{0,{most}}}$"}
    return {"type": "string", "pattern": f"^[^{_PLAIN}{_BLANK}][^{_PLAIN}]{{0,{most - 1}}}$"}


WEIGHT_UNITS = 10  # rubric weights are multiples of 1/10 = 0.1 that sum to exactly 1 (finer steps: many tiny criteria)
CRITERION_CHARS, LEVEL_CHARS = 80, 30  # a criterion (JSON keys included) fits ~95 tokens: 5 of them fit 480
LEVELS = ("1.0", "0.5", "0.0")  # the scoring levels every constrained criterion has, as the prompt's example
MAX_CRITERIA = 5  # what the rubric prompt asks for (2-5 criteria); rubric.max_criteria may lower the grammar's cap


def _weight_text(units: int) -> str:
    return f"{units / WEIGHT_UNITS:g}"


def rubric_schema(max_criteria: int = MAX_CRITERIA) -> dict[str, Any]:
    """The rubric reply's JSON schema with 2 to ``max_criteria`` (at most 5) criteria; ``RUBRIC_SCHEMA`` is 2-5."""
    return {
        "type": "object",
        "properties": {
            "criteria": {
                "type": "array",
                "minItems": 2,
                "maxItems": max_criteria,
                "items": {
                    "type": "object",
                    "properties": {
                        "criterion": _text(CRITERION_CHARS),
                        "weight": {"enum": [float(_weight_text(u)) for u in range(1, WEIGHT_UNITS)]},
                        "scoring_levels": {
                            "type": "object",
                            "properties": {level: _text(LEVEL_CHARS) for level in LEVELS},
                            "required": list(LEVELS),
                            "additionalProperties": False,
                        },
                    },
                    "required": ["criterion", "weight", "scoring_levels"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["criteria"],
        "additionalProperties": False,
    }


RUBRIC_SCHEMA: dict[str, Any] = rubric_schema(MAX_CRITERIA)
"""A rubric as ``rubric_messages`` asks for it (docs/METHOD.md §2.1): 2-5 criteria, each a non-blank text of at most 80
characters, a weight that is a multiple of 0.1, and the scoring levels "1.0", "0.5", "0.0" (texts of at most
30 characters). A JSON schema cannot say that the weights sum to 1: servers that take only a schema
(``openai_response_format``) get this one; xgrammar and vLLM decode under ``RUBRIC_EBNF``, which also does."""


def _rubric_ebnf(max_criteria: int = MAX_CRITERIA) -> str:
    """The rubric grammar with the weights' sum built in: ``R<n>_<r>`` is the rest of a list after ``n`` criteria
    with ``r`` units of weight left; the last criterion takes exactly what is left, so the sum is exactly 1."""
    plain = '[^"\\\\\\x00-\\x1f]'
    first = '[^"\\\\\\x00-\\x20]'
    lines = [
        'root ::= "{\\"criteria\\": [" L "]}"',
        f"ctext ::= {first} {plain}{{0,{CRITERION_CHARS - 1}}}",
        f"ltext ::= {first} {plain}{{0,{LEVEL_CHARS - 1}}}",
        "levels ::= " + ' "{" ' + ' ", " '.join(f'"\\"{lv}\\": \\"" ltext "\\""' for lv in LEVELS) + ' "}"',
    ]
    for u in range(1, WEIGHT_UNITS + 1):
        lines.append(f'C{u} ::= "{{\\"criterion\\": \\"" ctext "\\", \\"weight\\": {_weight_text(u)}, '
                     f'\\"scoring_levels\\": " levels "}}"')
    lines.append("L ::= " + " | ".join(f'C{w} ", " R1_{WEIGHT_UNITS - w}' for w in range(1, WEIGHT_UNITS)))
    for n in range(1, max_criteria):  # n criteria written; at most max_criteria in all
        for r in range(1, WEIGHT_UNITS):
            more = n < max_criteria - 1  # another criterion may follow this one
            alts = [f"C{r}"] + ([f'C{w} ", " R{n + 1}_{r - w}' for w in range(1, r)] if more else [])
            lines.append(f"R{n}_{r} ::= " + " | ".join(alts))
    return "\n".join(lines)


RUBRIC_EBNF = _rubric_ebnf()
"""``RUBRIC_SCHEMA`` as an xgrammar EBNF grammar whose weights sum to exactly 1 (multiples of 0.1), in the
compact ``json.dumps`` layout: every constrained rubric is format-valid by ``rubrics.format_validity``."""


def rubric_token_bounds(tokenizer: Any, max_criteria: int = MAX_CRITERIA) -> tuple[int, int]:
    """Tokens (as ``tokenizer`` counts them) of the shortest whole rubric the grammar allows, and of a long plain one.

    Shortest: 2 criteria whose texts are one character each. A token budget below it cannot hold any rubric:
    every constrained rubric is cut at the budget, and a cut rubric does not parse. Long plain: ``max_criteria``
    criteria whose texts fill their character limits with plain English words. A budget below it cuts the
    longer rubrics a model writes (SmolLM2-135M's own 5-criterion rubrics came to 346-406 tokens, plain English
    at the limits to 365). Thinking, where the template thinks, comes on top of either.
    """
    plain = "The answer states the correct final result clearly and explains each step of the work shown here."

    def tokens(n: int, criterion: str, level: str) -> int:
        units = [1] * (n - 1) + [WEIGHT_UNITS - (n - 1)]  # the layout the grammar writes (json.dumps defaults)
        text = json.dumps({"criteria": [{"criterion": criterion, "weight": u / WEIGHT_UNITS,
                                          "scoring_levels": dict.fromkeys(LEVELS, level)} for u in units]})
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return tokens(2, "x", "x"), tokens(max_criteria, plain[:CRITERION_CHARS], plain[:LEVEL_CHARS])


def rubric_criteria_cap(schema: dict[str, Any]) -> int | None:
    """The criteria cap of a rubric schema made by ``rubric_schema`` (2-5), or None for any other schema."""
    cap = schema.get("properties", {}).get("criteria", {}).get("maxItems")
    return cap if isinstance(cap, int) and 2 <= cap <= MAX_CRITERIA and schema == rubric_schema(cap) else None


def rubric_ebnf(schema: dict[str, Any]) -> str | None:
    """The EBNF grammar (weights summing to exactly 1) of a rubric schema, or None for any other schema."""
    cap = rubric_criteria_cap(schema)
    return None if cap is None else RUBRIC_EBNF if cap == MAX_CRITERIA else _rubric_ebnf(cap)

JUDGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "reasoning": _text(2000, nonblank=False),
        "score": {"type": "number", "minimum": 0, "maximum": 1},
    },
    "required": ["reasoning", "score"],
    "additionalProperties": False,
}
"""The generative judge's reply (``judge.generative_messages``): its reasoning, then the 0-1 score
``parse_judge_score`` reads. The reasoning is bounded (2000 characters) so that a reply always ends."""

REPLY_JSON, REPLY_MAY_THINK, REPLY_THINKING = "json", "may_think", "thinking"
"""Where a reply starts: straight at the JSON; free to open one think block first; inside a think block."""

_MAX_BLANK = 4  # newlines / spaces allowed between ``</think>`` and the JSON
_INSTALL = "constrained decoding needs xgrammar: pip install 'xgrammar>=0.2.9'"


def reply_start(prompt: str, thinking: bool) -> str:
    """Where the reply to a rendered ``prompt`` starts (``REPLY_*``), for a template that thinks or not.

    >>> reply_start("<|im_start|>assistant\\n", thinking=True), reply_start("<|im_start|>assistant\\n", False)
    ('may_think', 'json')
    >>> reply_start("assistant\\n<think>\\n", True), reply_start("assistant\\n<think>\\n\\n</think>\\n\\n", True)
    ('thinking', 'json')
    """
    if not thinking:
        return REPLY_JSON
    if opened_thinking(prompt):
        return REPLY_THINKING
    return REPLY_JSON if prompt.rstrip().endswith(THINK_CLOSE) else REPLY_MAY_THINK


def require_xgrammar() -> Any:
    """The ``xgrammar`` module, or a one-line ``BackendError`` saying how to install it."""
    try:
        import xgrammar
    except ImportError:
        raise BackendError(_INSTALL) from None
    return xgrammar


def _schema_key(schema: dict[str, Any]) -> str:
    return json.dumps(schema)  # key order kept: xgrammar emits properties in the order given


def grammar(schema: dict[str, Any], start: str = REPLY_JSON) -> Any:
    """The xgrammar ``Grammar`` of a reply: compact JSON under ``schema``, after a think block as ``start`` says."""
    xgr = require_xgrammar()
    ebnf = rubric_ebnf(schema)
    body = xgr.Grammar.from_ebnf(ebnf) if ebnf is not None else \
        xgr.Grammar.from_json_schema(_schema_key(schema), any_whitespace=False)
    if start == REPLY_JSON:
        return body
    begin = THINK_OPEN if start == REPLY_MAY_THINK else ""
    tag = {"type": "structural_tag",
           "format": {"type": "tag", "begin": begin, "content": {"type": "any_text"}, "end": THINK_CLOSE}}
    think = xgr.Grammar.concat(xgr.Grammar.from_structural_tag(json.dumps(tag)),
                               xgr.Grammar.from_ebnf(f"root ::= [ \\n]{{0,{_MAX_BLANK}}}"), body)
    return xgr.Grammar.union(body, think) if start == REPLY_MAY_THINK else think


# Compiled grammars per tokenizer object (weakly held: a tokenizer that goes away takes its grammars
# with it), then per (vocabulary size, stop tokens, schema, start). Compiling a schema for a 150k
# vocabulary takes a second or so; a run compiles each one once.
_CACHE: weakref.WeakKeyDictionary[Any, dict[Any, Any]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def compiled_grammar(tokenizer: Any, vocab_size: int, schema: dict[str, Any], start: str = REPLY_JSON,
                     stop_token_ids: Sequence[int] | None = None) -> Any:
    """The ``CompiledGrammar`` of ``grammar(schema, start)`` for a Hugging Face tokenizer, cached.

    ``vocab_size`` is the model's (its logits' width, often larger than the tokenizer's);
    ``stop_token_ids`` are the tokens ``generate`` stops on (default: the tokenizer's EOS): the
    grammar allows them, and only them, once the JSON is complete.
    """
    xgr = require_xgrammar()
    stops = tuple(sorted({int(t) for t in stop_token_ids})) if stop_token_ids else ()
    with _LOCK:
        per_tok = _CACHE.setdefault(tokenizer, {})
        compiler_key = ("compiler", int(vocab_size), stops)
        if compiler_key not in per_tok:
            info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=int(vocab_size),
                                                      stop_token_ids=list(stops) or None)
            per_tok[compiler_key] = xgr.GrammarCompiler(info)
        key = (int(vocab_size), stops, _schema_key(schema), start)
        if key not in per_tok:
            per_tok[key] = per_tok[compiler_key].compile_grammar(grammar(schema, start))
        return per_tok[key]


def logits_processor(tokenizer: Any, vocab_size: int, schema: dict[str, Any], starts: Sequence[str],
                     stop_token_ids: Sequence[int] | None = None) -> Any:
    """A fresh transformers ``LogitsProcessor`` for ONE ``generate()`` call over ``len(starts)`` rows.

    Row ``i`` decodes under ``grammar(schema, starts[i])``. xgrammar's processor keeps one matcher
    per row and fixes the batch size at its first call, so it serves exactly one call: build a new
    one for every batch. transformers applies it before temperature and top-p (custom processors
    come first), so nucleus sampling picks among allowed tokens only.
    """
    require_xgrammar()  # the one-line error when it is missing
    from xgrammar.contrib.hf import LogitsProcessor

    return LogitsProcessor([compiled_grammar(tokenizer, vocab_size, schema, s, stop_token_ids) for s in starts])


def vllm_structured_outputs(schema: dict[str, Any], start: str = REPLY_JSON) -> dict[str, Any]:
    """Keyword arguments of vLLM's ``StructuredOutputsParams`` (``SamplingParams(structured_outputs=...)``).

    ``{"json": schema}`` for a reply that starts at the JSON; with a think block allowed or opened,
    the xgrammar EBNF of ``grammar(schema, start)`` (vLLM's xgrammar backend compiles it).
    """
    if start == REPLY_JSON:
        ebnf = rubric_ebnf(schema)
        return {"grammar": ebnf} if ebnf is not None else {"json": schema}
    return {"grammar": str(grammar(schema, start))}


def openai_response_format(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """The ``response_format`` field of a chat completion that decodes under ``schema`` (vLLM, SGLang, OpenAI).

    Not ``strict``: OpenAI's strict mode refuses open maps such as ``scoring_levels``; vLLM and SGLang
    enforce the whole schema either way.

    >>> openai_response_format({"type": "object"}, "rubric")["json_schema"]["name"]
    'rubric'
    """
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}


def schema_name(schema: dict[str, Any]) -> str:
    """A name for ``schema`` in a request: ``rubric``, ``judge_score``, or ``reply``."""
    return "rubric" if rubric_criteria_cap(schema) is not None else "judge_score" if schema == JUDGE_SCHEMA else "reply"
