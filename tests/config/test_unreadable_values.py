"""A value YAML reads but Python cannot build or print (a 5,000-digit ``seed``, a date like ``2024-13-45``)
is one error line naming its key, in a config file and in a ``key=value`` override, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from evolm.cli import main
from evolm.config import load_config
from evolm.errors import InputError

DIGITS = "1" * 5000  # over Python's 4,300-digit limit for reading a decimal integer


def _train(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    try:
        code = main(["train", *argv])
    except SystemExit as e:  # argparse's usage errors
        code = int(e.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("where", ["config", "override"])
def test_a_5000_digit_seed_is_one_line_naming_it_through_the_cli(where: str, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"output_dir: {tmp_path}/run\n" + (f"seed: {DIGITS}\n" if where == "config" else ""))
    override = [f"seed={DIGITS}"] if where == "override" else []
    code, err = _train(["--config", str(config), "--dry-run", *override], capsys)
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "'seed'" in err and "5,000 digits" in err and len(err) < 300, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("text", "message"), [
    (f"seed: {DIGITS}\n", "'seed': a number of 5,000 digits"),
    (f"judge:\n  extra_models: [a, {DIGITS}]\n", "'judge.extra_models[1]': a number of 5,000 digits"),
    ("seed: 0x" + "f" * 5000 + "\n", "'seed': a number of over 4,300 digits"),  # read, but not printable
    ("seed: 2024-13-45\n", "'seed': '2024-13-45' is not a timestamp (month must be in 1..12)"),
    (f"a: &x {{b: {DIGITS}}}\nc: *x\n", "'a.b': a number of 5,000 digits"),
])
def test_a_file_value_python_cannot_build_names_its_key(text: str, message: str, tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}: {message}") and "\n" not in str(e.value)


@pytest.mark.parametrize(("override", "message"), [
    (f"seed={DIGITS}", "override 'seed': a number of 5,000 digits"),
    ("seed=0x" + "f" * 5000, "override 'seed': a number of over 4,300 digits"),
    (f"grpo.x=[1, {{a: {DIGITS}}}]", "override 'grpo.x': '[1].a': a number of 5,000 digits"),
    ("schedule.cycles=2024-13-45", "override 'schedule.cycles': '2024-13-45' is not a timestamp"),
])
def test_an_override_python_cannot_build_names_its_key(override: str, message: str) -> None:
    with pytest.raises(InputError) as e:
        load_config(None, [override])
    assert str(e.value).startswith(message) and len(str(e.value)) < 200


def test_a_text_setting_keeps_such_a_value_as_typed() -> None:
    assert load_config(None, [f"model.name={DIGITS}"]).model.name == DIGITS
    assert load_config(None, ["model.name=2024-13-45"]).model.name == "2024-13-45"
