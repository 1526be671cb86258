"""The adapter's text generation on TRL's engine (``trl_adapter`` contract items 4 and 5): ``TrainerGenerate`` (the
trainer's current weights, on its vLLM engine or the unwrapped model), constrained rubric steps, and the vLLM work
of a step counted. Like ``trl_adapter``, it may name TRL internals (tests/training/test_trl_adapter.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from evolm.backends.base import Conversation, SamplingParams, tokenizer_thinks
from evolm.config import RunConfig
from evolm.errors import RunError


def trl_version() -> str:
    """The installed TRL's version, for the errors that say the adapter's contract with it is broken."""
    import trl

    return trl.__version__


# ======================================================================= constrained rubric steps (contract item 5)


@dataclass(frozen=True)
class RubricGrammar:
    """What TRL's rubric-step samples decode under (``rubric.constrained``)."""

    schema: dict[str, Any]  # the rubric's JSON schema (``backends.constrained.rubric_schema``)
    thinking: bool  # the tokenizer's template opens a think block: the grammar allows one first


def rubric_grammar(cfg: RunConfig, trainer: Any) -> RubricGrammar | None:
    """The grammar of the trainer's rubric steps (``None``: ``rubric.constrained`` off), after refusing a TRL whose
    vLLM generation cannot take it."""
    if not cfg.rubric.constrained:
        return None
    from evolm.backends.constrained import rubric_schema

    if trainer.args.use_vllm and not isinstance(getattr(trainer.vllm_generation, "generation_kwargs", None), dict):
        raise RunError(f"trl {trl_version()}: VLLMGeneration has no generation_kwargs; the adapter needs updating")
    return RubricGrammar(rubric_schema(cfg.rubric.max_criteria), tokenizer_thinks(trainer.processing_class))


@contextmanager
def _vllm_structured(vg: Any, tokenizer: Any, conversation: Conversation, template_kwargs: dict[str, Any],
                     schema: dict[str, Any] | None, thinking: bool) -> Iterator[None]:
    """``VLLMGeneration.generation_kwargs`` with ``structured_outputs`` for ``schema`` while it runs, then restored.

    The grammar's start (a think block allowed, opened, or not) is read from ``conversation`` rendered; every
    prompt of the call shares its template. ``schema=None``: nothing changes.
    """
    if schema is None:
        yield
        return
    from evolm.backends.constrained import reply_start, vllm_structured_outputs

    prompt = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True, **template_kwargs)
    saved = vg.generation_kwargs
    structured = vllm_structured_outputs(schema, reply_start(prompt, thinking))
    vg.generation_kwargs = {**saved, "structured_outputs": structured}
    try:
        yield
    finally:
        vg.generation_kwargs = saved


@contextmanager
def constrained_generation(trainer: Any, inputs: list[dict[str, Any]], grammar: RubricGrammar | None
                           ) -> Iterator[None]:
    """TRL's own generation constrained to ``grammar`` while it runs, on rubric steps only (contract item 5)."""
    if grammar is None or not inputs or inputs[0].get("role") != "rubric":
        yield
        return
    if getattr(trainer.args, "use_vllm", False):
        with _vllm_structured(trainer.vllm_generation, trainer.processing_class, inputs[0]["prompt"],
                              trainer.args.chat_template_kwargs or {}, grammar.schema, grammar.thinking):
            yield
        return
    from evolm.backends.hf import grammar_generate

    # TRL calls ``generate`` on ``accelerator.unwrap_model(trainer.model_wrapped)`` (``_generate_single_turn``)
    with grammar_generate(trainer.accelerator.unwrap_model(trainer.model_wrapped), trainer.processing_class,
                          grammar.schema, grammar.thinking):
        yield


# ============================================================================= generation on the trainer's engine


class TrainerGenerate:
    """``generate(conversations, params) -> texts`` with the trainer's current weights.

    Every process calls it with the same full list (the step's rows are computed identically
    everywhere); each process generates an equal share (accelerate's ``split_between_processes``, padded), and
    the shares are gathered, so the collective vLLM modes see equally long lists on every process.
    """

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self._materialising = False

    @contextmanager
    def materialising(self) -> Iterator[None]:
        """While a step's rows are materialised: colocated vLLM in sleep mode stays awake from the first call through
        TRL's generation of the step (``_awake_for_step``)."""
        self._materialising = True
        try:
            yield
        finally:
            self._materialising = False

    def __call__(self, conversations: Sequence[Conversation], params: SamplingParams) -> list[str]:
        return self.share(self._generate_here)(conversations, params)

    def share(self, generate: Callable[[list[Conversation], SamplingParams], list[str]]
              ) -> Callable[[Sequence[Conversation], SamplingParams], list[str]]:
        """``generate`` spread over the processes: each writes an equal share of the list (padded) and
        the shares are gathered, so every process gets the same texts. Also for a fixed writer or answerer
        (``rubric.writer``, ``contrast.answerer``): a server samples each request anew, and one copy of the
        work per process would give each process different rubrics or pairs."""
        acc = self.trainer.accelerator
        world, rank = acc.num_processes, acc.process_index

        def shared(conversations: Sequence[Conversation], params: SamplingParams) -> list[str]:
            convs = list(conversations)
            if not convs:
                return []
            if world == 1:
                return generate(convs, params)
            from accelerate.utils import gather_object

            # accelerate's split: contiguous shares, the short ones padded with the last item (equal lengths)
            with acc.split_between_processes(convs, apply_padding=True) as mine:
                texts = generate(list(mine), params)
            per, extra = divmod(len(convs), world)
            return [t for part in gather_object([texts[: per + (rank < extra)]]) for t in part]

        return shared

    def _generate_here(self, convs: list[Conversation], params: SamplingParams) -> list[str]:
        t = self.trainer
        if getattr(t.args, "use_vllm", False):
            return self._generate_on_vllm(convs, params)
        from trl.models import unwrap_model_for_generation

        from evolm.backends.hf import HFBackend

        with unwrap_model_for_generation(t.model_wrapped, t.accelerator,
                                         gather_deepspeed3_params=t.args.ds3_gather_for_generation,
                                         gradient_checkpointing_kwargs=t.args.gradient_checkpointing_kwargs) as model:
            backend = HFBackend(model, t.processing_class, batch_size=max(8, t.args.per_device_train_batch_size),
                                synced_gpus=None)  # ZeRO-3 shards (ds3_gather_for_generation off): transformers syncs
            return backend.generate(convs, params)

    def _generate_on_vllm(self, convs: list[Conversation], params: SamplingParams) -> list[str]:
        t = self.trainer
        vg = t.vllm_generation
        tok = t.processing_class
        kwargs = {**(t.args.chat_template_kwargs or {}), **(params.chat_template_kwargs or {})}
        ids = [tok.apply_chat_template(c, tokenize=True, add_generation_prompt=True, return_dict=False, **kwargs)
               for c in convs]
        if t.state.global_step != t._last_loaded_step:
            vg.sync_weights()
            t._last_loaded_step = t.state.global_step
        saved = (vg.temperature, vg.top_p, vg.max_completion_length)
        vg.temperature, vg.top_p, vg.max_completion_length = params.temperature, params.top_p, params.max_new_tokens
        try:
            with _awake_for_step(vg, self._materialising), \
                    _vllm_structured(vg, tok, convs[0], kwargs, params.json_schema,
                                     params.json_schema is not None and tokenizer_thinks(tok)):
                _, completion_ids, _, _ = vg.generate(prompts=ids, images=None, num_generations=1)
        finally:
            vg.temperature, vg.top_p, vg.max_completion_length = saved
        return tok.batch_decode(completion_ids, skip_special_tokens=True)


# ============================================================================= vLLM weight syncs (contract item 4)


class VLLMCounts:
    """Weight syncs and ``generate`` calls of the trainer's vLLM engine since the last step's rewards."""

    def __init__(self) -> None:
        self.syncs = self.generates = 0

    def take(self) -> dict[str, float]:
        """The counts as step metrics (``vllm_weight_syncs``, ``vllm_generate_calls``), then zero again."""
        taken = {"vllm_weight_syncs": float(self.syncs), "vllm_generate_calls": float(self.generates)}
        self.syncs = self.generates = 0
        return taken


def count_vllm_calls(vg: Any, counts: VLLMCounts) -> None:
    """Count ``vg.sync_weights`` and ``vg.generate`` calls, TRL's own included (instance attributes shadow the
    methods; TRL calls them through ``self``)."""
    sync, generate = vg.sync_weights, vg.generate

    def counted_sync(*args: Any, **kwargs: Any) -> Any:
        counts.syncs += 1
        return sync(*args, **kwargs)

    def counted_generate(*args: Any, **kwargs: Any) -> Any:
        counts.generates += 1
        return generate(*args, **kwargs)

    vg.sync_weights, vg.generate = counted_sync, counted_generate


class _AwakeWarning:
    """Drops vLLM's warning about waking an awake engine: TRL's ``generate`` wakes the KV cache evolm already woke."""

    def filter(self, record: Any) -> bool:
        return "is not sleeping" not in record.getMessage()


@contextmanager
def _awake_for_step(vg: Any, materialising: bool) -> Iterator[None]:
    """Colocated vLLM in sleep mode, awake for evolm's calls while a step materialises and left awake for TRL's
    generation of the step, which sleeps it (contract item 4): one weight sync per step instead of one per call.
    Outside a step (held-out evaluation after the update, next to a checkpoint save) TRL's own handling stays."""
    if not (materialising and getattr(vg, "mode", None) == "colocate" and getattr(vg, "enable_sleep_mode", False)):
        yield
        return
    import logging

    if getattr(vg, "_llm_weights_sleeping", True):
        vg.sync_weights()  # wakes the weights and pushes the current ones
    if vg.llm.llm_engine.is_sleeping():
        vg.llm.wake_up(tags=["kv_cache"])
    awake_warning = logging.getLogger("vllm.v1.executor.abstract")
    if not any(isinstance(f, _AwakeWarning) for f in awake_warning.filters):
        awake_warning.addFilter(_AwakeWarning())
    vg.enable_sleep_mode = False  # this call: no wake-up, no re-push, no sleep after
    try:
        yield
    finally:
        vg.enable_sleep_mode = True
