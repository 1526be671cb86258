"""How a run uses the GPUs of a node (``evolm train --dry-run``): the tokens of a step per role, a step's time from
assumed rates, the disk its checkpoints take, and the layouts of training processes and judge servers that fit.

Everything here is arithmetic over budgets and assumptions, said as such: the token counts are the settings' upper
bounds (every reply as long as its budget allows), and the times come from rates the caller passes (defaults
``RATES``: assumptions for an H100, not measurements; ``evolm train --smoke`` measures a step on the real node).

A step's time, per process (the processes run in parallel; the judge serves all of them):

- generation: a process's sequences run in waves of as many as colocated vLLM's KV cache holds at the configured
  length (prompt + completion budget; ``memory.estimate``'s room, recomputed for that length), each wave as long as
  its completion budget at ``decode`` tokens per second per sequence, plus the prompts at ``prefill`` tokens per
  second. Rows beyond the room wait (or are preempted), which is what makes a small share slow;
- judging: the step's requests in waves of the judge's room: the servers' KV cache at the judge's
  sequence length (at most ``JUDGE_MAX_SEQS`` per server), or fewer when the processes send fewer
  (``judge.max_concurrency`` per process and URL), each reply ``judge.max_new_tokens`` at ``judge`` tokens
  per second;
- training: each process's rows (prompt + completion tokens) at ``train`` tokens per second per GPU, scaled from an
  8B model by parameter count (forward, backward with checkpointing, and the reference model's forward).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from evolm.config import WRITER_REGIMES, RunConfig
from evolm.training import memory

GB = 10**9
JUDGE_MAX_SEQS = 256  # vLLM's default max_num_seqs: sequences one server runs at once, whatever its room
JUDGE_SERVER_SHARE = 0.9  # vllm serve's default --gpu-memory-utilization: a judge server alone on its GPU
RATE_MODEL_PARAMETERS = 8.19e9  # the rates below are for Qwen3-8B; the training rate scales with parameters


@dataclass(frozen=True)
class Rates:
    """Assumed speeds (not measurements): tokens per second."""

    decode: float = 60.0  # per sequence, the policy in colocated vLLM (8B, bf16, an H100, a batch of a few)
    prefill: float = 8000.0  # prompt tokens per GPU
    train: float = 3000.0  # training tokens per GPU (8B, ZeRO-3, checkpointing, the reference forward included)
    judge: float = memory.JUDGE_TOKENS_PER_SECOND  # per judge request on a busy server (--judge-tokens-per-second)
    mean_tokens: int = 4096  # a reply's mean length (answers, rubrics, the judge's), at most its budget

    def text(self) -> str:
        return (f"assumed: replies of {self.mean_tokens:,} tokens on average (at most their budget); tokens/s: "
                f"decode {self.decode:g} per sequence, prefill {self.prefill:g} per GPU, training {self.train:g} per "
                f"GPU for an 8B model, judge {self.judge:g} per request")


RATES = Rates()


@dataclass(frozen=True)
class RoleTokens:
    """Upper bounds of one step's tokens in one role, over all processes."""

    role: str
    generated: int  # by the policy model (answers, rubrics, fresh pair answers)
    prompts: int  # prompt tokens of that generation
    judge_requests: int
    judge_generated: int
    trained: int  # prompt + completion tokens of the rows trained on

    def text(self) -> str:
        return (f"{self.role}: generated <= {self.generated:,} (prompts {self.prompts:,}); judge "
                f"{self.judge_requests:,} requests, <= {self.judge_generated:,} tokens; trained {self.trained:,}")


def step_tokens(cfg: RunConfig, prompt_tokens: int) -> list[RoleTokens]:
    """The tokens of one step of each role the run trains (budgets: every reply as long as allowed)."""
    s, j = cfg.schedule, cfg.judge
    p, rows, completion = s.prompts_per_step, s.prompts_per_step * s.samples_per_prompt, cfg.policy_tokens
    reply = j.max_new_tokens if _generative(cfg) else 1
    out = []
    if s.regime != "rubric_only":
        written = p * cfg.rubric.max_new_tokens if s.regime == "coevolve" else 0
        out.append(RoleTokens("policy", written + rows * completion, (p if written else 0) * prompt_tokens
                              + rows * prompt_tokens, rows, rows * reply, rows * (prompt_tokens + completion)))
    if s.regime in WRITER_REGIMES:
        fresh = 0 if cfg.contrast.pairs == "labelled" else p * cfg.pair_answer_tokens
        out.append(RoleTokens("rubric", fresh + rows * completion, (p if fresh else 0) * prompt_tokens
                              + rows * prompt_tokens, 2 * rows, 2 * rows * reply, rows * (prompt_tokens + completion)))
    return out


def _reply(cfg: RunConfig, rates: Rates) -> int:
    """The judge's mean reply: ``rates.mean_tokens`` within its budget (the probability modes read one token)."""
    return min(cfg.judge.max_new_tokens, rates.mean_tokens) if _generative(cfg) else 1


def _generative(cfg: RunConfig) -> bool:
    from evolm.judge.judge import GENERATIVE_MODES

    return cfg.judge.mode in GENERATIVE_MODES


def checkpoint_parts(cfg: RunConfig, facts: memory.ModelFacts,
                     sharding: memory.Sharding) -> list[tuple[str, float]]:
    """What one checkpoint holds, (part, bytes), as transformers' Trainer and DeepSpeed write it:

    - LoRA: the fp32 adapter and its two Adam moments;
    - DeepSpeed: its ZeRO state (``global_stepN/``: an fp32 master copy and Adam's two moments, 12 bytes a
      parameter; a float32 model keeps the moments alone); below ZeRO-3 also the module's weights in its
      model states; and the weights ``Trainer.save_model`` writes (``model.safetensors``), which under ZeRO-3
      exist only with ``zero3_save_16bit_model``: DeepSpeed then gathers the consolidated 16-bit copy beside
      the ZeRO state;
    - else: the weights and Adam's two moments, in the weights' dtype.

    >>> from evolm.config import load_config
    >>> cfg, zero3 = load_config("configs/paper-qwen3-8b.yaml"), memory.Sharding(True, 3, save_16bit=True)
    >>> parts = checkpoint_parts(cfg, memory.KNOWN_MODELS[cfg.model.name], zero3)
    >>> [(part.split(" (")[0], round(b / 1e9)) for part, b in parts]
    [('ZeRO state', 98), ('16-bit weights', 16)]
    """
    wb = 4 if cfg.model.dtype == "float32" or cfg.grpo.get("use_cpu") else 2
    n, lora = facts.parameters(), cfg.model.lora
    if lora.r > 0:
        adapter = facts.lora_parameters(lora.r, list(lora.target_modules))
        return [("LoRA adapter and its Adam moments", adapter * 12)]
    if not sharding.deepspeed:
        return [("weights", n * wb), ("Adam's two moments", n * 2 * wb)]
    parts = [("ZeRO state (fp32 master weights, Adam's two moments)", n * 12) if wb == 2
             else ("ZeRO state (Adam's two moments)", n * 2 * wb)]
    if sharding.zero_stage < 3:
        parts += [("weights in DeepSpeed's model states", n * wb), ("weights (model.safetensors)", n * wb)]
    elif sharding.save_16bit:
        parts.append(("16-bit weights (zero3_save_16bit_model)", n * wb))
    return parts


def checkpoint_bytes(cfg: RunConfig, facts: memory.ModelFacts, sharding: memory.Sharding) -> float:
    """One checkpoint's bytes (``checkpoint_parts``)."""
    return sum(b for _, b in checkpoint_parts(cfg, facts, sharding))


@dataclass(frozen=True)
class CheckpointDisk:
    """The checkpoints' disk against the free space of ``output_dir``'s disk."""

    parts: list[tuple[str, float]]  # one checkpoint's
    count: int  # checkpoints on disk at once, at most
    limit: int | None  # grpo.save_total_limit
    folder: Path  # where they go (output_dir/checkpoints)
    measured: Path  # its nearest existing parent, whose disk was measured
    free: float  # bytes free there
    held: float  # bytes already in ``folder`` (a resumed run's checkpoints, rotated out in turn)
    smoke: float  # bytes of the smoke run's checkpoints beside output_dir (delete them after it passed)

    @property
    def one(self) -> float:
        return sum(b for _, b in self.parts)

    @property
    def fits(self) -> bool:
        return self.free + self.held >= self.count * self.one

    def text(self) -> str:
        why = (f"grpo.save_total_limit {self.limit}, and the next one written before the oldest goes"
               if self.limit else "every one the run writes: grpo.save_total_limit unset")
        return (f"{self.count} x {_gb(self.one)} = {_gb(self.count * self.one)} at most ({why}); one holds "
                + " + ".join(f"{_gb(b)} of {part}" for part, b in self.parts)
                + f"; in {self.folder}, whose disk ({self.measured}) has {self._room()}")

    def warning(self) -> str | None:
        """The dry run's line when the disk cannot hold them: the run would fail at a save, hours in."""
        if self.fits:
            return None
        smoke = f"; the smoke run's checkpoints beside it take {_gb(self.smoke)}" if self.smoke else ""
        fewer = (f", or lower grpo.save_total_limit (1: {_gb(2 * self.one)} at a save)"
                 if self.limit != 1 else "")
        return (f"evolm: warning: the checkpoints need up to {_gb(self.count * self.one)} in {self.folder} "
                f"({self.count} x {_gb(self.one)}) and its disk ({self.measured}) has {self._room()}{smoke}: "
                f"the run would fail at a save with the disk full; free space, put output_dir on a larger "
                f"disk{fewer}")

    def _room(self) -> str:
        return f"{_gb(self.free)} free" + (f" + {_gb(self.held)} of its checkpoints" if self.held else "")


def checkpoint_disk(cfg: RunConfig, facts: memory.ModelFacts, sharding: memory.Sharding) -> CheckpointDisk:
    """The checkpoints ``cfg`` keeps on disk at once and the space there. transformers' Trainer deletes the
    oldest beyond ``grpo.save_total_limit`` only once the new one is written (``rotate_checkpoints`` after the
    save): ``limit + 1`` at a save. No limit keeps one per ``schedule.save_every`` steps and per phase end."""
    import shutil

    from evolm.runs.records import CHECKPOINTS_DIR
    from evolm.training.smoke import smoke_dir

    s = cfg.schedule
    written = sum(1 for step in range(1, cfg.total_steps + 1)
                  if step % s.save_every == 0 or step % s.steps_per_phase == 0)
    limit = cfg.grpo.get("save_total_limit")
    limit = limit if isinstance(limit, int) and limit > 0 else None
    folder = Path(cfg.output_dir) / CHECKPOINTS_DIR
    measured = folder.absolute()
    while not measured.exists():
        measured = measured.parent
    count = min(limit + 1, written) if limit else written
    return CheckpointDisk(checkpoint_parts(cfg, facts, sharding), count, limit, folder, measured,
                          float(shutil.disk_usage(measured).free), _bytes_in(folder),
                          _bytes_in(smoke_dir(cfg) / CHECKPOINTS_DIR))


def _bytes_in(folder: Path) -> float:
    return float(sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())) if folder.is_dir() else 0.0


def _gb(n: float) -> str:
    return f"{n / GB:,.0f} GB"


# ----------------------------------------------------------------------------- layouts


@dataclass(frozen=True)
class Layout:
    """Training processes on GPUs of their own, and where the judge runs: ``judge_gpus`` GPUs serving it alone, or
    (0) a server on each training GPU holding ``judge_share`` of it."""

    training: int
    judge_gpus: int
    judge_share: float = 0.0

    @property
    def gpus(self) -> int:
        return self.training + self.judge_gpus

    def text(self) -> str:
        judge = (f"judge on {self.judge_gpus} GPU(s) of its own" if self.judge_gpus else
                 f"judge beside training on each GPU ({self.judge_share:g} of it)")
        return f"{self.training} training + {judge}"


@dataclass
class LayoutPlan:
    """One layout's fit and time."""

    layout: Layout
    peak_gib: float
    fits: bool
    room: float | None  # sequences of the configured length colocated vLLM holds at once (None: no vLLM)
    judge_room: int  # judge requests in flight at once (the servers' room, or what the processes send)
    step_seconds: dict[str, float] = field(default_factory=dict)  # role -> a step's time
    run_seconds: float = 0.0
    why: str = ""  # why it does not fit, or cannot run the config's batch

    @property
    def idle_judge_gpus(self) -> int:
        return self.layout.judge_gpus


def judge_server_room(cfg: RunConfig, layout: Layout, gpu_gib: float, prompt_tokens: int,
                      rates: Rates = RATES) -> int:
    """Judge requests the servers run at once: each one's KV room at the judge's mean sequence length
    (prompt, answer and reply, each at ``rates.mean_tokens`` at most), at most ``JUDGE_MAX_SEQS``. An unknown
    judge shape counts 1 per server."""
    facts = memory.model_facts(cfg.judge.model)
    servers = layout.judge_gpus or layout.training
    if facts is None:
        return servers
    share = JUDGE_SERVER_SHARE if layout.judge_gpus else layout.judge_share
    free = share * gpu_gib * memory.GIB - facts.parameters() * 2 - memory.VLLM_BUFFERS_GIB * memory.GIB
    length = prompt_tokens + min(cfg.policy_tokens, rates.mean_tokens) + _reply(cfg, rates)
    per_server = max(0, int(free // (length * facts.kv_bytes_per_token())))
    return servers * min(JUDGE_MAX_SEQS, per_server)


def judge_urls(layout: Layout) -> int:
    """The judge URLs of ``layout`` as ``commands`` starts them: one ``vllm serve --data-parallel-size`` over
    GPUs of its own, else a server per training GPU."""
    return 1 if layout.judge_gpus else layout.training


def judge_room(cfg: RunConfig, layout: Layout, gpu_gib: float, prompt_tokens: int,
               rates: Rates = RATES) -> int:
    """Judge requests in flight at once: the servers' room (``judge_server_room``), or fewer when the
    processes send fewer: each sends at most ``judge.max_concurrency`` to each URL (``backends.pool``)."""
    sent = layout.training * judge_urls(layout) * cfg.judge.max_concurrency
    return min(sent, judge_server_room(cfg, layout, gpu_gib, prompt_tokens, rates))


def judge_row(cfg: RunConfig, layout: Layout, gpu_gib: float, prompt_tokens: int,
              rates: Rates = RATES) -> str:
    """The dry run's "judge in flight" row: what the processes send against the servers' room, and the
    ``judge.max_concurrency`` that fills the room without a queue (a request waiting in the server's queue
    spends its ``judge.timeout`` there)."""
    room = judge_server_room(cfg, layout, gpu_gib, prompt_tokens, rates)
    urls, mc = judge_urls(layout), cfg.judge.max_concurrency
    sent, fills = layout.training * urls * mc, max(1, room // (layout.training * urls))
    head = (f"{min(sent, room)} requests at once: {layout.training} processes x {urls} judge URL"
            f"{'s' if urls > 1 else ''} x judge.max_concurrency {mc} = {sent}; the servers' room {room} "
            f"(their KV cache at the mean length assumed below, at most {JUDGE_MAX_SEQS} per server)")
    if sent < room and mc < fills:
        return f"{head}: judge.max_concurrency={fills} fills it"
    if sent > room:
        return (f"{head}: the rest wait in the servers' queues, judge.timeout running "
                f"(judge.max_concurrency={fills})")
    return head


def plan_layout(cfg: RunConfig, layout: Layout, facts: memory.ModelFacts, sharding: memory.Sharding,
                gpu_gib: float, prompt_tokens: int, rates: Rates = RATES) -> LayoutPlan:
    """The memory fit and the step times of ``cfg`` on ``layout``."""
    from evolm.training.grpo_config import batch_error

    n = layout.training
    setup = memory.setup_for(cfg, facts, n, sharding, gpu_gib, prompt_tokens)
    est = memory.estimate(facts, setup)
    judge_gib = layout.judge_share * gpu_gib if not layout.judge_gpus else 0.0  # a judge server's pool, held always
    peak = est.peak_gib + judge_gib
    room = _room(cfg, facts, setup, prompt_tokens)
    jroom = judge_room(cfg, layout, gpu_gib, prompt_tokens, rates)
    plan = LayoutPlan(layout, peak, peak <= gpu_gib, room, jroom)
    if err := batch_error(cfg, n):
        plan.fits, plan.why = False, err
    elif not plan.fits:
        plan.why = f"estimated {peak:.1f} GiB per training GPU > {gpu_gib:g}"
    elif room is not None and room < 1:
        plan.fits, plan.why = False, "colocated vLLM has no room for one sequence of the configured length"
    elif jroom < 1:
        plan.fits, plan.why = False, "the judge's share holds no request of its length"
    counts = _steps_per_role(cfg)
    for t in step_tokens(cfg, prompt_tokens):
        plan.step_seconds[t.role] = _step_seconds(cfg, t, n, room, jroom, facts, rates, prompt_tokens)
        plan.run_seconds += plan.step_seconds[t.role] * counts.get(t.role, 0)
    return plan


def _room(cfg: RunConfig, facts: memory.ModelFacts, setup: memory.Setup, prompt_tokens: int) -> float | None:
    """Sequences of the configured length (prompt + completion budget) colocated vLLM's KV cache holds at once."""
    if setup.vllm_mode != "colocate":
        return None
    length = setup.vllm_max_model_length or facts.max_positions or prompt_tokens + cfg.policy_tokens
    full = memory.estimate(facts, setup).vllm_sequences or 0.0  # sequences of vLLM's own max length
    return full * length / (prompt_tokens + cfg.policy_tokens)


def _steps_per_role(cfg: RunConfig) -> dict[str, int]:
    from evolm.training.plan import Plan

    plan, counts = Plan(cfg, ["q"]), {"policy": 0, "rubric": 0}
    for s in range(cfg.total_steps):
        counts[plan.role_phase(s)[0]] += 1
    return counts


def _step_seconds(cfg: RunConfig, t: RoleTokens, n: int, room: float | None, jroom: int, facts: memory.ModelFacts,
                  rates: Rates, prompt_tokens: int) -> float:
    """One step of role ``t.role``: generation in waves, judging in waves, training (the module docstring)."""
    s = cfg.schedule
    per_process = math.ceil(s.prompts_per_step * s.samples_per_prompt / n)
    if t.role == "policy":  # the rubrics written first (coevolve), one per question
        first, first_len = (s.prompts_per_step if s.regime == "coevolve" else 0), cfg.rubric.max_new_tokens
    else:  # the fresh pair answers, one per question
        first, first_len = (0 if cfg.contrast.pairs == "labelled" else s.prompts_per_step), cfg.pair_answer_tokens

    capacity = None if room is None else room * (prompt_tokens + cfg.policy_tokens)  # KV tokens at once

    def generation(sequences: int, budget: int) -> float:
        """Waves of as many sequences of the mean length as the KV cache holds, each ``mean / decode`` long."""
        mean = min(budget, rates.mean_tokens)
        at_once = sequences if capacity is None else max(1, int(capacity // (prompt_tokens + mean)))
        return math.ceil(sequences / at_once) * mean / rates.decode if sequences else 0.0

    decode = generation(per_process, cfg.policy_tokens) + generation(math.ceil(first / n), first_len)
    prefill = t.prompts / n / rates.prefill
    judging = math.ceil(t.judge_requests / max(1, jroom)) * _reply(cfg, rates) / rates.judge \
        if cfg.judge.backend == "openai" else 0.0
    mean_trained = t.trained * (prompt_tokens + min(cfg.policy_tokens, rates.mean_tokens)) / (
        prompt_tokens + cfg.policy_tokens)
    training = mean_trained / n / (rates.train * RATE_MODEL_PARAMETERS / facts.parameters())
    return decode + prefill + judging + training


JUDGE_SHARES = (0.1, 0.15, 0.2, 0.25, 0.3)  # shares of a training GPU tried for a judge server beside the trainer


def candidate_layouts(cfg: RunConfig, gpus: int, judge_share: float | None = None) -> list[Layout]:
    """Every split of ``gpus`` into training processes and judge GPUs, and training on all of them with a judge
    server beside each trainer (``judge_share`` of the GPU, or each of ``JUDGE_SHARES``); a judge in process
    (``judge.backend`` not openai) needs no GPU of its own."""
    if cfg.judge.backend != "openai":
        return [Layout(gpus, 0)]
    shares = JUDGE_SHARES if judge_share is None else (judge_share,)
    return [Layout(t, gpus - t) for t in range(1, gpus)] + [Layout(gpus, 0, f) for f in shares]


def best_layout(plans: list[LayoutPlan], judge_alone: bool = False) -> LayoutPlan | None:
    """The fastest layout that fits, among those with no GPU serving the judge alone (``judge_alone``: among all)."""
    pool = [p for p in plans if p.fits and (judge_alone or not p.layout.judge_gpus)]
    return min(pool, key=lambda p: p.run_seconds) if pool else None


def commands(cfg: RunConfig, config_path: str, layout: Layout, accelerate_config: str | None) -> list[str]:
    """The commands that run ``cfg`` on ``layout`` (judge servers, then the training launch)."""
    port = 8001
    acc = accelerate_config or "configs/accelerate-zero3.yaml"
    devices = ",".join(str(i) for i in range(layout.training))
    think = " --reasoning-parser qwen3" if _thinks(cfg) else ""
    model = cfg.judge.model
    if cfg.judge.backend != "openai":
        servers, urls = [], ""
    elif layout.judge_gpus:
        judge_devices = ",".join(str(i) for i in range(layout.training, layout.gpus))
        servers = [f"CUDA_VISIBLE_DEVICES={judge_devices} vllm serve {model} --port {port} --data-parallel-size "
                   f"{layout.judge_gpus}{think} &"]
        urls = f" judge.base_url=http://127.0.0.1:{port}/v1"
    else:
        servers = [f"for i in $(seq 0 {layout.training - 1}); do CUDA_VISIBLE_DEVICES=$i vllm serve {model} --port "
                   f"$((8001 + i)) --gpu-memory-utilization {layout.judge_share:g}{think} & done"]
        urls = " judge.base_url=" + ",".join(f"http://127.0.0.1:{port + i}/v1" for i in range(layout.training))
    train = (f"CUDA_VISIBLE_DEVICES={devices} accelerate launch --config_file {acc} --num_processes "
             f"{layout.training} -m evolm.cli train --config {config_path}{urls}")
    return [*servers, train]


def _thinks(cfg: RunConfig) -> bool:
    """The judge thinks (Qwen3 with thinking on): its server needs vLLM's reasoning parser (judge.parse reference)."""
    return _generative(cfg) and bool(cfg.judge.chat_template_kwargs.get("enable_thinking")) \
        and "qwen3" in cfg.judge.model.lower()


def with_rates(rates: Rates, **changes: float | None) -> Rates:
    """``rates`` with the given rates that are not None."""
    return replace(rates, **{k: v for k, v in changes.items() if v is not None})
