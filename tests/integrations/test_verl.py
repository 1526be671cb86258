"""evolm.integrations.verl against a live ``evolm serve``, called exactly as verl calls a custom reward.

The call expressions below are copied from volcengine/verl at commit
b178a3cd56f58b2d502255daba591e92833930a7 (verl is not installed here; its managers need torch
tensors and Ray, so only their calls to ``compute_score`` are reproduced, verbatim):

- ``verl/trainer/ppo/reward.py``: ``get_custom_reward_fn`` / ``_call_with_kwargs`` (reward_kwargs merged)
- ``verl/utils/import_utils.py``: ``load_module`` (a file path, or ``pkg://`` module)
- ``verl/workers/reward_manager/naive.py``: ``NaiveRewardManager.__call__``
- ``verl/workers/reward_manager/batch.py``: ``BatchRewardManager.verify``
- ``verl/experimental/reward_loop/reward_manager/naive.py``: ``NaiveRewardManager.run_single``
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import os
from functools import partial
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from reward_server import RUBRIC, FakeJudge, running

from evolm.errors import BackendError, InputError
from evolm.serve.app import create_app

ROOT = Path(__file__).resolve().parents[2]
ANSWERS = ["x" * 20, "x" * 40, "short", "a longer answer " * 3]


# --- verl/trainer/ppo/reward.py (b178a3cd) ---------------------------------------------------------
def _call_with_kwargs(raw_fn, extra_kwargs, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
    merged_kwargs = {**kwargs, **extra_kwargs}
    return raw_fn(*args, **merged_kwargs)


async def _call_with_kwargs_async(raw_fn, extra_kwargs, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
    merged_kwargs = {**kwargs, **extra_kwargs}
    return await raw_fn(*args, **merged_kwargs)


def get_custom_reward_fn(reward_fn_config: dict):  # noqa: ANN201 - config.get("custom_reward_function") in verl
    module_path = reward_fn_config.get("path")
    fn_name = reward_fn_config.get("name")
    raw_fn = getattr(load_module(module_path), fn_name)  # load_extern_object
    reward_kwargs = dict(reward_fn_config.get("reward_kwargs", {}))
    if not inspect.iscoroutinefunction(raw_fn):
        return partial(_call_with_kwargs, raw_fn, reward_kwargs)
    else:
        return partial(_call_with_kwargs_async, raw_fn, reward_kwargs)


# --- verl/utils/import_utils.py load_module (b178a3cd), the two branches ------------------------------
def load_module(module_path: str):  # noqa: ANN201
    if module_path.startswith("pkg://"):
        return importlib.import_module(module_path[len("pkg://") :].replace("/", "."))
    spec = importlib.util.spec_from_file_location(f"custom_module_{hash(os.path.abspath(module_path))}", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """scripts/verl_data.py's output for two prompts, the first with a rubric from an `evolm rubric` file."""
    import json
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    from verl_data import main as verl_data

    tmp = tmp_path_factory.mktemp("verl")
    (tmp / "p.jsonl").write_text('{"prompt": "What is 2+2?"}\n{"prompt": "Name a colour.", "id": 7}\n', encoding="utf-8")
    (tmp / "r.jsonl").write_text(json.dumps({"prompt": "What is 2+2?", "rubric": RUBRIC, "rubric_valid": 1.0}) + "\n"
                                 + json.dumps({"id": 7, "prompt": "Name a colour.", "rubric": None}) + "\n",
                                 encoding="utf-8")
    assert verl_data(["--prompts", str(tmp / "p.jsonl"), "--rubrics", str(tmp / "r.jsonl"),
                      "--output", str(tmp / "train.parquet")]) == 0
    return tmp / "train.parquet"


@pytest.fixture
def dataset(parquet: Path) -> list[dict]:
    """The parquet's rows as verl's RLHFDataset hands them on (fresh per test: the managers mutate extra_info)."""
    rows = pq.read_table(parquet).to_pylist()
    # rollout.n = 2, repeated with interleave=True as verl's ray_trainer does
    return [dict(r, extra_info=dict(r["extra_info"])) for r in rows for _ in range(2)]


def test_verl_data_writes_the_layout_rlhf_dataset_reads(dataset: list[dict]) -> None:
    first, second = dataset[0], dataset[2]
    assert set(first) == {"data_source", "prompt", "ability", "reward_model", "extra_info"}
    assert first["prompt"] == [{"role": "user", "content": "What is 2+2?"}]
    assert first["reward_model"]["style"] == "model" and "criteria" in first["reward_model"]["ground_truth"]
    assert second["reward_model"]["ground_truth"] == ""  # no rubric: the server writes one or judges alone
    assert first["extra_info"] == {"split": "train", "index": 0, "question": "What is 2+2?"}


@pytest.fixture
def server():  # noqa: ANN201
    judge = FakeJudge()
    with running(create_app(judge)) as url:
        yield url, judge


def _expected(row: dict, answer: str) -> float:
    return 0.9 if row["reward_model"]["ground_truth"] else min(1.0, len(answer) / 100)


def test_naive_reward_manager_call(server, dataset, monkeypatch) -> None:  # noqa: ANN001
    url, judge = server
    monkeypatch.setenv("EVOLM_REWARD_URL", url)
    compute_score = get_custom_reward_fn({"path": str(ROOT / "src/evolm/integrations/verl.py"), "name": "compute_score"})
    rewards, reward_extra_info = [], {}
    for data_item, response_str in zip(dataset, ANSWERS, strict=True):
        # verl/workers/reward_manager/naive.py NaiveRewardManager.__call__ (b178a3cd)
        ground_truth = data_item["reward_model"]["ground_truth"]
        data_source = data_item["data_source"]
        extra_info = data_item.get("extra_info", {})
        extra_info["num_turns"] = None
        extra_info["rollout_reward_scores"] = {}
        score = compute_score(
            data_source=data_source,
            solution_str=response_str,
            ground_truth=ground_truth,
            extra_info=extra_info,
        )
        if isinstance(score, dict):
            reward = score["score"]
            for key, value in score.items():
                reward_extra_info.setdefault(key, []).append(value)
        else:
            reward = score
        rewards.append(reward)
    assert rewards == [_expected(r, a) for r, a in zip(dataset, ANSWERS, strict=True)]
    assert reward_extra_info["rubric_from_label"] == [1.0, 1.0, 0.0, 0.0]
    assert [c[0].question for c in judge.calls] == ["What is 2+2?"] * 2 + ["Name a colour."] * 2
    assert [c[0].answer for c in judge.calls] == ANSWERS  # the response, not the query


def test_batch_reward_manager_call(server, dataset) -> None:  # noqa: ANN001
    url, judge = server
    compute_score = get_custom_reward_fn({"path": "pkg://evolm.integrations.verl", "name": "compute_score_batch",
                                          "reward_kwargs": {"evolm_url": url}})
    # verl/workers/reward_manager/batch.py BatchRewardManager.verify (b178a3cd)
    responses_str = list(ANSWERS)
    ground_truths = [item["reward_model"].get("ground_truth", None) for item in dataset]
    data_sources = [item["data_source"] for item in dataset]
    rollout_reward_scores = [{} for _ in range(len(dataset))]
    extras = [item["extra_info"] for item in dataset]
    for i in range(len(dataset)):
        extras[i]["rollout_reward_scores"] = rollout_reward_scores[i]
    scores = compute_score(
        data_sources=data_sources,
        solution_strs=responses_str,
        ground_truths=ground_truths,
        extra_infos=extras,
    )
    assert [s["score"] for s in scores] == [_expected(r, a) for r, a in zip(dataset, ANSWERS, strict=True)]
    assert len(judge.calls) == 1 and sorted(it.answer for it in judge.calls[0]) == sorted(ANSWERS)  # one request


def test_reward_loop_awaits_the_async_variant(server, dataset) -> None:  # noqa: ANN001
    url, judge = server
    compute_score = get_custom_reward_fn({"path": "pkg://evolm.integrations.verl", "name": "compute_score_async"})
    assert inspect.iscoroutinefunction(compute_score.func)  # verl checks the raw function

    async def run_single(data_item: dict, response_str: str) -> dict:
        # verl/experimental/reward_loop/reward_manager/naive.py NaiveRewardManager.run_single (b178a3cd)
        data_source = data_item["data_source"]
        ground_truth = data_item["reward_model"]["ground_truth"]
        extra_info = data_item.get("extra_info", {})
        extra_info["num_turns"] = None
        extra_info["rollout_reward_scores"] = {}
        extra_info["evolm_url"] = url  # the URL from extra_info
        extra_reward_kwargs = {}
        result = await compute_score(
            data_source=data_source,
            solution_str=response_str,
            ground_truth=ground_truth,
            extra_info=extra_info,
            **extra_reward_kwargs,
        )
        return result

    async def batch() -> list[dict]:  # RewardLoopWorker.compute_score_batch: one task per row, gathered
        return await asyncio.gather(*(run_single(r, a) for r, a in zip(dataset, ANSWERS, strict=True)))

    results = asyncio.run(batch())
    assert [r["score"] for r in results] == [_expected(r, a) for r, a in zip(dataset, ANSWERS, strict=True)]
    assert len(judge.calls) < 4  # the concurrent rows were batched by the server


def test_503_is_retried_after_retry_after_and_4xx_is_not(monkeypatch) -> None:
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    from evolm.integrations import verl

    seen = []
    app = FastAPI()

    @app.post("/get_reward")
    async def flaky() -> JSONResponse:
        seen.append(1)
        if len(seen) <= 2:
            return JSONResponse({"error": "busy"}, status_code=503, headers={"Retry-After": "0"})
        if len(seen) == 3:
            return JSONResponse({"error": "bad"}, status_code=422)
        return JSONResponse({"rewards": [0.25], "scores": [0.25], "extra_logs": {"no_rubric": [1.0]}})

    with running(app) as url:
        info = {"question": "Q?", "evolm_url": url}
        with pytest.raises(BackendError, match="HTTP 422: bad"):
            verl.compute_score("evolm", "A", "", info)  # two 503s waited out, then a 422 raised at once
        assert len(seen) == 3
        assert verl.compute_score("evolm", "A", "", info) == {"score": 0.25, "no_rubric": 1.0}
    with pytest.raises(InputError, match="question"):
        verl.compute_score("evolm", "A", "", {"evolm_url": url})
    monkeypatch.delenv("EVOLM_REWARD_URL", raising=False)
    with pytest.raises(InputError, match="EVOLM_REWARD_URL"):
        verl.compute_score("evolm", "A", "", {"question": "Q?"})
    monkeypatch.setattr(verl, "ATTEMPTS", 2)
    monkeypatch.setattr(verl, "MAX_WAIT_S", 0.01)
    with pytest.raises(BackendError, match="no reward after 2 tries"):  # nothing listens there any more
        verl.compute_score("evolm", "A", "", {"question": "Q?", "evolm_url": url})
