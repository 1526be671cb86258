#!/usr/bin/env bash
# Set up, lint (ruff, the settings in pyproject.toml), then run the whole test suite (no network, no GPU).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check src tests bench scripts examples studies
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
exec .venv/bin/python -m pytest -q --durations=12 --doctest-modules src/evolm tests "$@"
