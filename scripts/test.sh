#!/usr/bin/env bash
# Set up, lint (ruff, the settings in pyproject.toml), then run the whole test suite (no network, no GPU): what CI
# runs. `bash scripts/test.sh --fast` leaves out the tests marked slow (tiny training runs, subprocess launches, real
# models, the browser): the edit-test loop, a few minutes. Other extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
fast=()
if [ "${1:-}" = --fast ]; then
  fast=(-m "not slow and not vllm")
  shift
fi
bash scripts/setup.sh
.venv/bin/ruff check src tests bench scripts examples studies
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
exec .venv/bin/python -m pytest -q --durations=12 --doctest-modules src/evolm tests "${fast[@]}" "$@"
