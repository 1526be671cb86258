"""The context guard (evolm.backends.context, Judge.fit_to_context): answers too long for the judge's context are cut
from the middle and said so, or refused with one line; the rubric writer's prompts likewise; short prompts
are untouched. On the tiny model with a 512-token context."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from evolm.backends.context import CUT_MARKER, cut_middle, estimate_tokens, fit_middle, reply_reserve
from evolm.cli import main
from evolm.config import JudgeConfig
from evolm.judge.context_guard import OverlongPrompt
from evolm.judge.judge import Judge, JudgeItem, build_judge
from evolm.judge.prompts import likert_messages, prob_messages, yesno_messages
from evolm.rubrics import parse_rubric
from evolm.scores import scores_of

CONTEXT = 512
LONG = ("The quick brown fox jumps over the lazy dog. " * 700)[:27_000]  # 27k characters, ~10k tiny-model tokens
RUBRIC = '{"criteria": [{"criterion": "Says 4.", "weight": 0.7}, {"criterion": "Is short.", "weight": 0.3}]}'
MARKER_WORDS = "characters cut by evolm: the answer exceeded the judge's context"


@pytest.fixture(scope="module")
def small_dir(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with max_position_embeddings = 512."""
    path = tmp_path_factory.mktemp("tiny-512")
    shutil.copytree(tiny_model_dir, path, dirs_exist_ok=True)
    config = json.loads((path / "config.json").read_text())
    config["max_position_embeddings"] = CONTEXT
    (path / "config.json").write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def small(small_dir: Path):
    from evolm.backends.loading import load_backend

    return load_backend(str(small_dir), device="cpu", dtype="float32", batch_size=4)


class Spy:
    """Records the conversations a backend is sent, and passes them on."""

    def __init__(self, backend) -> None:  # noqa: ANN001
        self.backend, self.sent = backend, []
        self.name = backend.name

    def __getattr__(self, name: str):  # noqa: ANN204 - count_tokens, context_length...
        return getattr(self.backend, name)

    def next_token_logprobs(self, conversations, candidates, **kw):  # noqa: ANN001, ANN201
        self.sent += list(conversations)
        return self.backend.next_token_logprobs(conversations, candidates, **kw)

    def generate(self, conversations, params, **kw):  # noqa: ANN001, ANN201
        self.sent += list(conversations)
        return self.backend.generate(conversations, params, **kw)


def _item(answer: str, question: str = "What is 2 + 2?") -> JudgeItem:
    return JudgeItem(question, answer, parse_rubric(RUBRIC), RUBRIC)


# ----------------------------------------------------------------------------- the pieces


def test_cut_middle_keeps_head_and_tail_and_says_how_much() -> None:
    text = "HEAD" + "x" * 1000 + "TAIL"
    cut = cut_middle(text, 8)
    assert cut.startswith("HEAD") and cut.endswith("TAIL")
    assert CUT_MARKER.format(n="1,000") in cut
    assert cut_middle(text, len(text)) == text


def test_fit_middle_converges_or_says_the_rest_does_not_fit() -> None:
    def tokens(text: str) -> int:  # 100 fixed tokens + one per 3 characters
        return 100 + len(text) // 3

    cut, chars, fixed = fit_middle("y" * 30_000, tokens, 500)
    assert cut is not None and tokens(cut) <= 500 and chars > 0 and MARKER_WORDS in cut
    assert tokens(cut) > 400  # not cut far more than needed
    assert fit_middle("y" * 30_000, lambda t: 600 + len(t), 500)[0] is None  # the rest alone is over budget


def test_reply_reserve_and_estimate() -> None:
    assert reply_reserve(8192, 512) == 512 and reply_reserve(8192, 16384) == 4096
    conv = [{"role": "user", "content": "é" * 300}]  # 600 UTF-8 bytes
    assert estimate_tokens(conv) >= 200


# ----------------------------------------------------------------------------- the judge


@pytest.mark.parametrize("mode", ["prob", "yesno"])
def test_a_27k_character_answer_is_cut_and_scored_quickly(small, mode: str) -> None:
    spy = Spy(small)
    judge = Judge(spy, mode=mode)
    start = time.perf_counter()
    judged = judge.score([_item(LONG), _item("4.")])
    assert time.perf_counter() - start < 20  # unguarded: ~10k tokens per prompt, past the model's positions
    assert all(isinstance(j.score, float) and 0.0 <= j.score <= 1.0 for j in judged)
    assert judged[0].cut > 20_000 and judged[1].cut == 0 and not any(j.unscored for j in judged)
    long_prompts = [c for c in spy.sent if "fox" in c[1]["content"]]
    assert long_prompts and all(MARKER_WORDS in c[1]["content"] for c in long_prompts)
    assert max(small.count_tokens(long_prompts, after_thinking=True)) <= CONTEXT
    body = long_prompts[0][1]["content"]
    assert "The quick brown fox" in body and "lazy dog." in body  # head and tail kept


@pytest.mark.parametrize("mode", ["prob", "yesno"])
def test_short_answers_are_untouched(small, mode: str) -> None:
    """A prompt that fits reaches the backend byte for byte as without the guard."""
    spy = Spy(small)
    items = [_item("4."), _item("It is 4, since 2 + 2 = 4.")]
    judge = Judge(spy, mode=mode)
    judged = judge.score(items)
    if mode == "prob":
        want = [prob_messages(it) for it in items]
    else:
        want = [yesno_messages(it.question, c.criterion, it.answer) for it in items for c in it.rubric.criteria]
    assert spy.sent == want
    assert all(j.cut == 0 and j.unscored is None for j in judged)


def test_refuse_is_one_line_naming_the_item(small) -> None:
    judge = Judge(small, mode="prob", overlong="refuse")
    with pytest.raises(OverlongPrompt) as info:
        judge.score([_item("4."), _item(LONG)])
    message = str(info.value)
    assert "\n" not in message and message.startswith("item 2:") and "512-token context" in message
    assert info.value.index == 1


def test_question_and_rubric_alone_too_long_is_unscored_with_a_reason(small) -> None:
    judge = Judge(small, mode="prob")
    judged = judge.score([_item("4.", question="Why? " * 2000), _item("4.")])
    assert judged[0].score is None and isinstance(judged[1].score, float)
    assert "question and rubric alone take" in judged[0].unscored and not any(j.cut for j in judged)


def test_generative_modes_keep_room_for_the_reply(small) -> None:
    """max_new_tokens is reserved in the sampled modes (at most half the context): a ~1,700-token prompt fits a
    2,000-token context beside a 1-token reply, and is cut to fit beside a 600-token one."""
    item = JudgeItem("What is 2 + 2?", "Some words about nothing in particular, said twice. " * 30)
    (n,) = small.count_tokens([likert_messages(item)])
    assert 1400 < n < 1990
    assert Judge(small, mode="likert", max_new_tokens=1, max_context=2000).fit_to_context([item])[1].truncated == []
    items, fit = Judge(small, mode="likert", max_new_tokens=600, max_context=2000).fit_to_context([item])
    assert fit.truncated == [0] and small.count_tokens([likert_messages(items[0])])[0] <= 1400


def test_max_context_overrides_the_model_and_servers_are_estimated() -> None:
    class Server:  # no count_tokens, no context_length: an openai-like backend
        name = "openai"

        def next_token_logprobs(self, conversations, candidates, **kw):  # noqa: ANN001, ANN201
            self.sent = list(conversations)
            return [{"0": 0.0} for _ in conversations]

    server = Server()
    assert scores_of(Judge(server, mode="prob").score([_item(LONG)])) == [0.0]  # context unknown: no guard
    judge = Judge(server, mode="prob", max_context=2000)
    (judged,) = judge.score([_item(LONG)])
    assert judged.score == 0.0 and judged.cut > 0
    assert estimate_tokens(server.sent[0]) <= 2000 - 8 and MARKER_WORDS in server.sent[0][1]["content"]


def test_build_judge_takes_the_settings(small_dir: Path) -> None:
    judge = build_judge(JudgeConfig(model=str(small_dir), mode="prob", max_context=300, overlong="refuse"),
                        device="cpu")
    assert (judge.max_context, judge.overlong) == (300, "refuse")


# ----------------------------------------------------------------------------- the CLI


def _rows(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.slow
def test_cli_judge_marks_cut_rows_and_counts_them(small_dir: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    inp = _rows(tmp_path, [{"prompt": "What is 2 + 2?", "response": LONG, "rubric": RUBRIC},
                           {"prompt": "What is 2 + 2?", "response": "4.", "rubric": RUBRIC}])
    out = tmp_path / "out.jsonl"
    assert main(["judge", "--judge", str(small_dir), "--input", str(inp), "--output", str(out), "--device", "cpu"]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert rows[0]["truncated"] is True and rows[0]["chars_cut"] > 20_000 and rows[0]["response"] == LONG
    assert "truncated" not in rows[1] and all(isinstance(r["score"], float) for r in rows)
    assert "1 answers cut to fit the judge's context" in capsys.readouterr().err


def test_cli_judge_refuse_and_max_context(small_dir: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    inp = _rows(tmp_path, [{"prompt": "What is 2 + 2?", "response": "4."},
                           {"prompt": "What is 2 + 2?", "response": "It is four. " * 10}])  # 366 and 443 tokens (prob)
    out = tmp_path / "out.jsonl"
    assert main(["judge", "--judge", str(small_dir), "--input", str(inp), "--output", str(out), "--device", "cpu",
                 "--mode", "prob", "--overlong", "refuse"]) == 0  # both fit the model's 512 tokens
    capsys.readouterr()
    assert main(["judge", "--judge", str(small_dir), "--input", str(inp), "--output", str(out), "--device", "cpu",
                 "--mode", "prob", "--overlong", "refuse", "--max-context", "420"]) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("evolm")]
    assert len(err) == 1 and err[0].startswith("evolm judge: error: ") and f"{inp}: row 2:" in err[0], err


@pytest.mark.slow
def test_cli_rubric_question_over_the_writers_context(small_dir: Path, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    inp = _rows(tmp_path, [{"prompt": "What is 2 + 2?"}, {"prompt": "Why? " * 2000}])
    out = tmp_path / "out.jsonl"
    assert main(["rubric", "--model", str(small_dir), "--input", str(inp), "--output", str(out), "--device", "cpu",
                 "--max-new-tokens", "8", "--max-context", "4000"]) == 0  # rubric prompts: 1,325 and 9,319 tokens
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert "rubric_overlong" not in rows[0] and isinstance(rows[0]["rubric_text"], str)
    assert rows[1]["rubric"] is None and rows[1]["rubric_valid"] == 0.0 and "tokens" in rows[1]["rubric_overlong"]
    assert "1 questions over the writer's context got none" in capsys.readouterr().err
    assert main(["rubric", "--model", str(small_dir), "--input", str(inp), "--output", str(out), "--device", "cpu",
                 "--max-new-tokens", "8", "--max-context", "4000", "--overlong", "refuse"]) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("evolm")]
    assert len(err) == 1 and f"{inp}: row 2:" in err[0], err
