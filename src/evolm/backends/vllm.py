"""Backend for in-process vLLM (GPU only; ``pip install 'evolm[vllm]'``).

Used for phase-boundary generation at scale (SPEC §6): the a+ answers and the rubrics should come
from the engine the trainer already holds (TRL's colocated ``vllm.LLM``), not from a second copy
of the weights, so the constructor takes either a model to load or an existing ``LLM`` object.
``vllm`` is imported inside the constructor: importing this module never needs it, and without it
constructing the backend fails with one line naming the extra to install.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evolm.backends.base import Conversation, SamplingParams, chat_kwargs, match_candidates
from evolm.errors import BackendError

TOP_LOGPROBS = 20
"""Next tokens asked for by the probability modes (vLLM's default ``max_logprobs``)."""

_INSTALL_HINT = "the vllm backend needs vLLM (CUDA only): pip install 'evolm[vllm]'"


class VLLMBackend:
    """Batches of conversations through ``vllm.LLM.chat``; vLLM schedules the whole batch itself.

    Give ``model`` (a local path or hub id; loaded with ``dtype``, ``gpu_memory_utilization``,
    ``seed`` and any further ``llm_kwargs`` for ``vllm.LLM``) or ``llm``, an engine built
    elsewhere, e.g. the trainer's colocated one (then the loading arguments are ignored).
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

    def __repr__(self) -> str:
        source = repr(self.model) if self.model is not None else f"llm={type(self.llm).__name__}"
        return f"VLLMBackend({source})"

    def generate(
        self, conversations: Sequence[Conversation], params: SamplingParams, *, progress: bool = False
    ) -> list[str]:
        """One completion per conversation, in order (``LLM.chat`` returns outputs in input order).

        With ``params.seed`` set, row ``i`` samples with ``seed + i``: repeatable, yet identical
        prompts in one batch (a group of samples) still get different completions.
        """
        if not conversations:
            return []

        def sampling(index: int) -> Any:
            return self._sampling_params_cls(
                n=1,
                temperature=params.temperature,
                top_p=params.top_p,
                max_tokens=params.max_new_tokens,
                seed=None if params.seed is None else params.seed + index,
            )

        per_row = params.seed is not None
        sampling_params = [sampling(i) for i in range(len(conversations))] if per_row else sampling(0)
        outputs = self._chat(conversations, sampling_params, params.chat_template_kwargs, progress)
        return [output.outputs[0].text for output in outputs]

    def next_token_logprobs(
        self,
        conversations: Sequence[Conversation],
        candidates: Sequence[str],
        *,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> list[dict[str, float]]:
        """Log-probabilities of each candidate as the reply's first token, one dict per conversation.

        One greedy token with the top 20 alternatives (vLLM also returns the sampled token; the
        entries are distinct token ids); candidates are matched with ``match_candidates``.
        """
        if not conversations:
            return []
        sampling_params = self._sampling_params_cls(n=1, temperature=0.0, max_tokens=1, logprobs=TOP_LOGPROBS)
        outputs = self._chat(conversations, sampling_params, chat_kwargs(chat_template_kwargs), False)
        rows = []
        for output in outputs:
            steps = output.outputs[0].logprobs
            first = steps[0] if steps else {}
            rows.append(match_candidates([(self._decoded(tid, lp), lp.logprob) for tid, lp in first.items()], candidates))
        return rows

    def _chat(
        self, conversations: Sequence[Conversation], sampling_params: Any, template_kwargs: dict[str, Any], progress: bool
    ) -> list[Any]:
        """``LLM.chat`` on a batch; its errors (e.g. a prompt longer than the context) become one line."""
        try:
            outputs = self.llm.chat(
                [list(conversation) for conversation in conversations],
                sampling_params=sampling_params,
                use_tqdm=progress,
                chat_template_kwargs=dict(template_kwargs) or None,
            )
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
