"""Fuzzing the readers of user files: JSON Lines (inputs, seed sets), JSON (a list of records, a rubric given as
text), YAML (configs and overrides). Whatever the bytes, a reader returns or raises ``InputError`` (one line
through the CLI), never another exception: deep nesting, recursive aliases and invalid text included.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from evolm.config import load_config
from evolm.errors import InputError
from evolm.runs.jsonl import parse_jsonl_lines, read_records
from evolm.training.sft import load_seed

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

_JSONISH = st.text(alphabet=st.sampled_from(list('[]{}:,"\\ud800abc0129.eE-+ntrufls \n')), max_size=300)
_DEEP = st.builds(lambda opener, n: opener * n, st.sampled_from(["[", '{"a":', '"\\u', "- ", "a: {", "&x [*x, "]),
                  st.integers(1, 120_000))
_YAMLISH = st.text(alphabet=st.sampled_from(list("&*ab:[]{}- \n,'\"!|>%@#01.")), max_size=200)


def _only_input_errors(call) -> None:  # noqa: ANN001
    try:
        call()
    except InputError as e:
        assert "\n" not in str(e).strip()


@pytest.mark.slow
@FUZZ
@given(text=st.one_of(_JSONISH, _DEEP, st.text(max_size=200)))
@example(text='{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}")
@example(text='{"prompt": "Q", "rubric": "' + "[" * 100_000 + '"}')
def test_jsonl_and_json_readers_raise_only_input_errors(tmp_path: Path, text: str) -> None:
    _only_input_errors(lambda: parse_jsonl_lines(text.split("\n"), "in.jsonl", required=["prompt"]))
    path = tmp_path / "records.json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _only_input_errors(lambda: read_records(path))


@FUZZ
@given(rubric=st.one_of(_JSONISH, _DEEP))
@example(rubric="[" * 100_000 + "]" * 100_000)
def test_a_seed_rubric_given_as_text_raises_only_input_errors(tmp_path: Path, rubric: str) -> None:
    import json

    seed = tmp_path / "seed.jsonl"
    seed.write_text(json.dumps({"prompt": "Q", "rubric": rubric}) + "\n", encoding="utf-8", errors="surrogatepass")
    _only_input_errors(lambda: load_seed(str(seed)))


@pytest.mark.slow
@FUZZ
@given(text=st.one_of(_YAMLISH, _DEEP, st.text(max_size=200)))
@example(text="loop: &a [*a]\n")
@example(text="judge:\n  chat_template_kwargs: &a\n    x: *a\n")
@example(text="x: " + "[" * 100_000 + "]" * 100_000 + "\n")
def test_yaml_configs_and_overrides_raise_only_input_errors(tmp_path: Path, text: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _only_input_errors(lambda: load_config(path))
    _only_input_errors(lambda: load_config(None, [f"judge.chat_template_kwargs={text}"]))


def test_the_fuzzers_reach_the_readers() -> None:
    """A sanity check on the harness: a good line, config and override are read."""
    assert parse_jsonl_lines(['{"prompt": "p"}'], "in.jsonl", required=["prompt"]) == [{"prompt": "p"}]
    assert load_config(None, ["judge.chat_template_kwargs={a: 1}"]).judge.chat_template_kwargs == {"a": 1}
    with pytest.raises(InputError):
        load_config(None, ["judge.chat_template_kwargs=&a [*a]"])
