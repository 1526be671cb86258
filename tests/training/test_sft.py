"""The rubric writer's warm start (evolm.training.sft, `evolm sft-rubrics`): seed set, exact shared-prefix loss, a tiny run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evolm.backends.constrained import CRITERION_CHARS, LEVEL_CHARS, LEVELS
from evolm.cli import main
from evolm.errors import InputError
from evolm.rubrics import format_validity, parse_rubric
from evolm.training.sft import gsm8k_seed, load_seed, sft_examples


def test_builtin_seed_rubrics_are_what_the_constrained_writer_can_write():
    rows = load_seed("builtin:seed")
    assert len(rows) >= 150 and len({r["prompt"] for r in rows}) == len(rows)
    for r in rows:
        text = json.dumps(r["rubric"])
        assert format_validity(text) == 1.0 and parse_rubric(text) is not None
        for c in r["rubric"]["criteria"]:
            assert len(c["criterion"]) <= CRITERION_CHARS and tuple(c["scoring_levels"]) == LEVELS
            assert all(len(v) <= LEVEL_CHARS for v in c["scoring_levels"].values())
        assert 2 <= len(r["rubric"]["criteria"]) <= 4


def test_gsm8k_train_rows_become_value_rubrics(tmp_path: Path):
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps({"question": "Tom has 3 bags of 4 apples and eats 2. How many are left?",
                                "answer": "3*4 = <<3*4=12>>12 apples.\n12-2 = <<12-2=10>>10\n#### 10"}) + "\n"
                    + json.dumps({"question": "No final line", "answer": "just text"}) + "\n")
    rows = gsm8k_seed(str(path), limit=0)
    assert len(rows) == 1 and rows[0]["source"] == "gsm8k-train"
    criteria = rows[0]["rubric"]["criteria"]
    assert criteria[0]["criterion"] == "Gives the final answer 10." and criteria[0]["weight"] == 0.7
    assert criteria[1]["criterion"] == "Works out 3*4 = 12 along the way."
    assert format_validity(json.dumps(rows[0]["rubric"])) == 1.0


def test_examples_use_the_rubric_roles_own_prompt():
    from evolm.rubrics import rubric_messages

    row = load_seed("builtin:seed")[0]
    (ex,) = sft_examples([row])
    assert ex["prompt"] == rubric_messages(row["prompt"], "v3")
    assert json.loads(ex["completion"][0]["content"]) == row["rubric"]


def test_shared_prefix_loss_and_gradients_equal_the_full_sequences(tiny_model_dir: Path):
    import torch

    from evolm.backends.loading import load_model
    from evolm.training.sft import shared_prefix_loss, tokenize_examples

    model, tok = load_model(str(tiny_model_dir), device="cpu", dtype="float32")
    prefix, data = tokenize_examples(tok, sft_examples(load_seed("builtin:seed")[:3]), 4096)
    assert prefix and all(d["ids"] for d in data)
    model.train()
    shared = shared_prefix_loss(model, prefix, data, tok.pad_token_id)
    shared.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    full = [{"ids": prefix + d["ids"], "labels": [-100] * len(prefix) + d["labels"]} for d in data]
    whole = shared_prefix_loss(model, [], full, tok.pad_token_id)
    whole.backward()
    assert shared.item() == pytest.approx(whole.item(), abs=1e-5)
    assert max(float((a - p.grad).abs().max()) for a, p in zip(grads, model.parameters(), strict=True)) < 1e-5
    assert torch.isfinite(shared)


def test_cli_trains_and_saves_a_loadable_writer(tiny_model_dir: Path, tmp_path: Path, capsys):
    from evolm.backends.loading import load_model

    seed = tmp_path / "seed.jsonl"
    seed.write_text("".join(json.dumps({"prompt": r["prompt"], "rubric": r["rubric"]}) + "\n"
                            for r in load_seed("builtin:seed")[:4]))
    out = tmp_path / "writer"
    assert main(["sft-rubrics", "--model", str(tiny_model_dir), "--output", str(out), "--seed-set", str(seed),
                 "--epochs", "1", "--batch-size", "2", "--max-length", "4096", "--train-layers", "1",
                 "--detach-prefix", "--learning-rate", "1e-2", "--device", "cpu", "--dtype", "float32"]) == 0
    summary = json.loads((out / "sft_rubrics.json").read_text())
    assert summary["examples"] == 4 and summary["steps"] == 2 and len(summary["losses"]) == 2
    trained = dict(load_model(str(out), device="cpu", dtype="float32")[0].named_parameters())
    base = dict(load_model(str(tiny_model_dir), device="cpu", dtype="float32")[0].named_parameters())
    changed = {n for n, p in trained.items() if not (p == base[n]).all()}
    assert changed and all(".layers.1." in n for n in changed)  # --train-layers 1: the last of the 2 layers only


def test_cli_refuses_a_seed_row_without_a_valid_rubric(tiny_model_dir: Path, tmp_path: Path, capsys):
    seed = tmp_path / "seed.jsonl"
    seed.write_text(json.dumps({"prompt": "Q", "rubric": {"criteria": [{"criterion": "a", "weight": 1}]}}) + "\n")
    assert main(["sft-rubrics", "--model", str(tiny_model_dir), "--output", str(tmp_path / "w"),
                 "--seed-set", str(seed)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not format-valid" in err[0]
    assert not (tmp_path / "w").exists()


def test_cli_refuses_an_unusable_output_before_loading_any_model(tiny_model_dir: Path, tmp_path: Path, capsys,
                                                                 monkeypatch):
    """An existing file, or a directory that is not a model, as --output: exit 2 in one line, in seconds, before any
    model loads (the training would have run first, then failed to save)."""
    import time

    import evolm.backends.loading

    def no_load(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(evolm.backends.loading, "load_model", no_load)
    existing = tmp_path / "existing.txt"
    existing.write_text("keep me\n")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.md").write_text("keep me too\n")
    project = tmp_path / "project"  # a config.json does not make a directory a model: its other files would go
    (project / "data").mkdir(parents=True)
    (project / "config.json").write_text("{}")
    (project / "notes.txt").write_text("keep me\n")
    (project / "data" / "important.csv").write_text("a,b\n")
    for output, said in ((existing, "not a directory"), (notes, "no model save writes (todo.md)"),
                         (project, "no model save writes (data, notes.txt)")):
        t0 = time.perf_counter()
        assert main(["sft-rubrics", "--model", str(tiny_model_dir), "--output", str(output)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and said in err[0] and str(output) in err[0] and time.perf_counter() - t0 < 10
    assert existing.read_text() == "keep me\n" and (notes / "todo.md").read_text() == "keep me too\n"
    assert (project / "notes.txt").read_text() == "keep me\n" and (project / "data" / "important.csv").exists()


def test_a_model_directory_is_one_with_only_what_a_save_writes(tmp_path: Path) -> None:
    from evolm.training.sft import check_output_dir

    model = tmp_path / "model"
    (model / "partial").mkdir(parents=True)
    for name in ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "vocab.json",
                 "merges.txt", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                 "sft_rubrics.json", "partial/adapter_model.safetensors", "partial/adapter_config.json"):
        (model / name).write_text("{}")
    assert check_output_dir(model) == model
    (model / "partial" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="partial"):
        check_output_dir(model)


def test_a_save_that_fails_is_one_line_naming_the_path_and_leaves_nothing_behind(tmp_path: Path) -> None:
    """A full disk while saving: one line naming the output, the previous model intact, no .saving- directory."""
    import errno

    from evolm.errors import RunError
    from evolm.training.sft import _save

    out = tmp_path / "w"
    out.mkdir()
    (out / "config.json").write_text('{"old": true}')

    class FullDisk:
        def save_pretrained(self, directory: Path) -> None:
            Path(directory, "config.json").write_text('{"new": true}')
            raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(RunError) as e:
        _save(FullDisk(), None, out, {"step": 1})
    assert str(e.value) == f"could not save the model to {out}: No space left on device (it was left as it was)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["w"] and (out / "config.json").read_text() == '{"old": true}'


def _save_then_die(out: str) -> None:
    """A child process: save over ``out`` with a model whose save is killed (SIGKILL) halfway through its weights."""
    import os
    import signal

    from evolm.training.sft import _save

    class Model:
        def save_pretrained(self, directory: Path) -> None:
            Path(directory, "config.json").write_text('{"new": true}')
            with open(Path(directory, "model.safetensors"), "wb") as f:
                f.write(b"half of the new weights")
                f.flush()
                os.kill(os.getpid(), signal.SIGKILL)

    _save(Model(), None, Path(out), {"step": 2})


def test_a_save_killed_midway_leaves_the_previous_model_intact(tmp_path: Path):
    """--output over an existing model (the --model directory, or partial/): killed while saving, the previous model
    is still there, whole; the next save replaces it whole and leaves nothing beside it."""
    import multiprocessing

    from evolm.training.sft import _save

    out = tmp_path / "writer"
    out.mkdir()
    old = {"config.json": '{"old": true}', "model.safetensors": "the old weights", "sft_rubrics.json": "{}"}
    for name, text in old.items():
        (out / name).write_text(text)
    child = multiprocessing.get_context("fork").Process(target=_save_then_die, args=(str(out),))
    child.start()
    child.join(30)
    assert child.exitcode == -9  # killed mid-save
    assert {p.name: p.read_text() for p in out.iterdir()} == old

    class Model:
        def save_pretrained(self, directory: Path) -> None:
            Path(directory, "config.json").write_text('{"new": true}')
            Path(directory, "model.safetensors").write_text("the new weights")

    class Tokenizer:
        def save_pretrained(self, directory: Path) -> None:
            Path(directory, "tokenizer.json").write_text("{}")

    _save(Model(), Tokenizer(), out, {"step": 3, "loss": float("nan")})
    assert (out / "model.safetensors").read_text() == "the new weights"
    assert json.loads((out / "sft_rubrics.json").read_text()) == {"step": 3, "loss": None}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["writer"]  # the killed save's leftovers removed


@pytest.mark.parametrize("line", ['{"prompt": "Q", "rubric": [{"criterion": "Says 4.", "weight": 1}]}',
                                  '{"prompt": "Q", "rubric": "Here it is: {\\"criteria\\": []} thanks"}',
                                  '{"prompt": "Q", "rubric": 7}'])
def test_a_bad_seed_rubric_is_one_line_naming_file_and_line(tiny_model_dir: Path, tmp_path: Path, capsys, line: str):
    seed = tmp_path / "seed.jsonl"
    good = json.dumps({"prompt": "P", "rubric": load_seed("builtin:seed")[0]["rubric"]})
    seed.write_text(f"{good}\n\n{line}\n")
    assert main(["sft-rubrics", "--model", str(tiny_model_dir), "--output", str(tmp_path / "w"),
                 "--seed-set", str(seed)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{seed}:3" in err[0] and "'rubric'" in err[0]
