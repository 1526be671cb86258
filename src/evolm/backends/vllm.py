"""Backend for in-process vLLM (GPU only; ``pip install 'evolm[vllm]'``).

Used for generation within a step at scale (docs/METHOD.md §6): the a+ answers and the rubrics should come
from the engine the trainer already holds (TRL's colocated ``vllm.LLM``), not from a second copy
of the weights, so the constructor takes either a model to load or an existing ``LLM`` object.
``vllm`` is imported inside the constructor: importing this module never needs it, and without it
constructing the backend fails with one line naming the extra to install.

Thinking templates (those whose rendering makes the reply think) are handled as in the
``hf`` backend: ``next_token_logprobs`` renders the prompt with that tokenizer, ends it after an
empty think block (``close_thinking``) and sends the token ids through ``LLM.generate``, so the
one-token read is the reply after thinking, whatever ``enable_thinking`` says; ``generate`` puts a
think block opened by the template back in front of the reply (``opened_thinking``).

Untrusted text reaches the engine neutralised, as in the ``hf`` backend: vLLM renders and
tokenizes the prompt itself (special tokens in the text honoured), so control strings in system
and user messages (the engine tokenizer's ``control_strings`` and any ``<|...|>``) are broken by a
zero-width space before the conversation is handed over (``neutralise_conversation``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evolm.backends.base import (
    Conversation,
    SamplingParams,
    chat_kwargs,
    close_thinking,
    control_pattern,
    control_strings,
    match_candidates,
    neutralise_conversation,
    opened_thinking,
    tokenizer_thinks,
)
from evolm.backends.constrained import REPLY_JSON, reply_start, vllm_structured_outputs
from evolm.errors import BackendError

TOP_LOGPROBS = 20
"""Next tokens asked for by the probability modes (vLLM's default ``max_logprobs``)."""

_INSTALL_HINT = "the vllm backend needs vLLM (CUDA only): pip install 'evolm[vllm]'"


class VLLMBackend:
    """Batches of conversations through ``vllm.LLM.chat``; vLLM schedules the whole batch itself.

    Give ``model`` (a local path or hub id; loaded with ``dtype``, ``gpu_memory_utilization``,
    ``seed`` and any further ``llm_kwargs`` for ``vllm.LLM``) or ``llm``, an engine built
    elsewhere, e.g. the trainer's colocated one (then the loading arguments are ignored).
    ``thinking`` says whether the chat template makes the reply think; ``None`` detects it from the
    engine's tokenizer on first use.
    """

    name = "vllm"

    def __init__(
        self,
        model: str | None = None,
        *,
        llm: Any | None = None,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.9,
        seed: int = 0,
        thinking: bool | None = None,
        escape_special: bool = True,
        **llm_kwargs: Any,
    ) -> None:
        if (model is None) == (llm is None):
            raise BackendError("vllm backend: give exactly one of a model to load or an existing vllm.LLM")
        try:
            import vllm
        except ImportError as exc:
            raise BackendError(f"{_INSTALL_HINT} ({exc})") from None
        self._sampling_params_cls: Any = vllm.SamplingParams
        if llm is None:
            llm = vllm.LLM(
                model=str(model), dtype=dtype, gpu_memory_utilization=gpu_memory_utilization, seed=seed, **llm_kwargs
            )
        self.llm: Any = llm
        self.model = model
        self._thinking = thinking
        self.escape_special = escape_special
        self._controls: Any = None

    def __repr__(self) -> str:
        source = repr(self.model) if self.model is not None else f"llm={type(self.llm).__name__}"
        return f"VLLMBackend({source})"

    def generate(
        self, conversations: Sequence[Conversation], params: SamplingParams, *, progress: bool = False
    ) -> list[str]:
        """One completion per conversation, in order (``LLM.chat`` returns outputs in input order).

        With ``params.seed`` set, row ``i`` samples with ``seed + i``: repeatable, yet identical
        prompts in one batch (a group of samples) still get different completions (with
        ``params.seed_per_row`` false every row samples with ``seed``: identical prompts agree). With
        ``params.json_schema`` every row decodes under it (``structured_outputs``); a thinking
        template may think first (the grammar allows one think block before the JSON).
        """
        if not conversations:
            return []
        structured = self._structured(params)

        def sampling(index: int) -> Any:
            return self._sampling_params_cls(
                n=1,
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_new_tokens,
                seed=None if params.seed is None else params.seed + index if params.seed_per_row else params.seed,
                **structured,
            )

        per_row = params.seed is not None
        sampling_params = [sampling(i) for i in range(len(conversations))] if per_row else sampling(0)
        outputs = self._chat(conversations, sampling_params, params.chat_template_kwargs, progress)
        thinking = self.thinking
        texts = []
        for output in outputs:
            prompt = getattr(output, "prompt", None)  # vLLM's rendered prompt text
            opened = opened_thinking(prompt) if thinking and isinstance(prompt, str) else ""
            texts.append(opened + output.outputs[0].text)
        return texts

    def _structured(self, params: SamplingParams) -> dict[str, Any]:
        """``{"structured_outputs": StructuredOutputsParams(...)}`` for a schema, else ``{}``.

        ``LLM.chat`` renders the prompt itself, so the reply's start is read from one rendering here.
        """
        if params.json_schema is None:
            return {}
        try:
            from vllm.sampling_params import StructuredOutputsParams
        except ImportError as exc:
            raise BackendError(f"vllm backend: this vLLM has no structured outputs ({exc}); upgrade vLLM") from None
        start = REPLY_JSON
        if self.thinking:
            hello = [{"role": "user", "content": "Hello"}]
            prompt = self.llm.get_tokenizer().apply_chat_template(
                hello, tokenize=False, add_generation_prompt=True, **chat_kwargs(params.chat_template_kwargs))
            start = reply_start(prompt, True)
        return {"structured_outputs": StructuredOutputsParams(**vllm_structured_outputs(params.json_schema, start))}

    @property
    def thinking(self) -> bool:
        """Whether the engine's chat template makes the reply think (``tokenizer_thinks``, once, on first use)."""
        if self._thinking is None:
            try:
                tokenizer = self.llm.get_tokenizer()
            except Exception:  # noqa: BLE001 - an engine without a reachable tokenizer: no think handling
                tokenizer = None
            self._thinking = tokenizer_thinks(tokenizer)
        return self._thinking

    def next_token_logprobs(
        self,
        conversations: Sequence[Conversation],
        candidates: Sequence[str],
        *,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> list[dict[str, float]]:
        """Log-probabilities of each candidate as the reply's first token, one dict per conversation.

        One greedy token with the top 20 alternatives (vLLM also returns the sampled token; the
        entries are distinct token ids); candidates are matched with ``match_candidates``. With a
        thinking template the prompt is rendered here and ends after an empty think block.
        """
        if not conversations:
            return []
        sampling_params = self._sampling_params_cls(n=1, temperature=0.0, max_tokens=1, logprobs=TOP_LOGPROBS)
        if self.thinking:
            outputs = self._generate_after_thinking(conversations, sampling_params, chat_kwargs(chat_template_kwargs))
        else:
            outputs = self._chat(conversations, sampling_params, chat_kwargs(chat_template_kwargs), False)
        rows = []
        for output in outputs:
            steps = output.outputs[0].logprobs
            first = steps[0] if steps else {}
            scored = [(self._decoded(tid, lp), lp.logprob) for tid, lp in first.items()]
            rows.append(match_candidates(scored, candidates))
        return rows

    def _safe(self, conversations: Sequence[Conversation]) -> list[Conversation]:
        """The conversations with control strings in untrusted messages neutralised (unless ``escape_special`` is off).

        The pattern comes from the engine's tokenizer once; an engine without one gets the generic ``<|...|>`` shape.
        """
        if not self.escape_special:
            return [list(conversation) for conversation in conversations]
        if self._controls is None:
            try:
                tokenizer = self.llm.get_tokenizer()
            except Exception:  # noqa: BLE001 - no reachable tokenizer: the generic pattern only
                tokenizer = None
            self._controls = control_pattern(control_strings(tokenizer))
        return [neutralise_conversation(conversation, self._controls) for conversation in conversations]

    def _chat(
        self, conversations: Sequence[Conversation], sampling_params: Any, template_kwargs: dict[str, Any],
        progress: bool,
    ) -> list[Any]:
        """``LLM.chat`` on a batch; its errors (e.g. a prompt longer than the context) become one line."""
        try:
            outputs = self.llm.chat(
                self._safe(conversations),
                sampling_params=sampling_params,
                use_tqdm=progress,
                chat_template_kwargs=dict(template_kwargs) or None,
            )
        except (ValueError, RuntimeError) as exc:
            raise BackendError(f"vllm backend: generation failed: {type(exc).__name__}: {exc}") from exc
        if len(outputs) != len(conversations):
            raise BackendError(f"vllm backend: got {len(outputs)} outputs for {len(conversations)} conversations")
        return list(outputs)

    def _generate_after_thinking(
        self, conversations: Sequence[Conversation], sampling_params: Any, template_kwargs: dict[str, Any]
    ) -> list[Any]:
        """``LLM.generate`` on prompts rendered by the engine's tokenizer and closed after an empty think block.

        Token ids, not text, go to the engine: vLLM would add a BOS to a text prompt whose template
        already wrote one. The ids are those ``LLM.chat`` would use, plus the think block.
        """
        tokenizer = self.llm.get_tokenizer()
        prompts = []
        for conversation in self._safe(conversations):
            text = tokenizer.apply_chat_template(
                conversation, tokenize=False, add_generation_prompt=True, **template_kwargs
            )
            prompts.append({"prompt_token_ids": list(tokenizer.encode(close_thinking(text), add_special_tokens=False))})
        try:
            outputs = self.llm.generate(prompts, sampling_params=sampling_params, use_tqdm=False)
        except (ValueError, RuntimeError) as exc:
            raise BackendError(f"vllm backend: generation failed: {type(exc).__name__}: {exc}") from exc
        if len(outputs) != len(conversations):
            raise BackendError(f"vllm backend: got {len(outputs)} outputs for {len(conversations)} conversations")
        return list(outputs)

    def _decoded(self, token_id: int, logprob: Any) -> str:
        """The token's text: vLLM fills ``decoded_token`` when it detokenizes, else decode it here."""
        if logprob.decoded_token is not None:
            return str(logprob.decoded_token)
        return str(self.llm.get_tokenizer().decode([token_id]))
