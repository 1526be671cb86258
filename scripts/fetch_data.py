"""Put the public data sets the docs name into ./data (ignored by git): LLMBar, GSM8K, IFEval, an UltraFeedback sample,
and the paper's training prompts (Tulu 3).

    python scripts/fetch_data.py                    # every set, from GitHub at the commits below
    python scripts/fetch_data.py llmbar gsm8k       # some of them
    python scripts/fetch_data.py --from DIR         # no network here: copy DIR/<set>/<file>, a copy made elsewhere
    python scripts/fetch_data.py tulu3              # data/tulu3_prompts.jsonl, the paper config's data.prompts

``tulu3`` is not among the sets fetched by default: it reads the Tulu 3 SFT mixture (``allenai/tulu-3-sft-mixture`` on
the Hugging Face Hub, 939,343 conversations, 1.4 GB of parquet) with ``datasets`` (``pip install datasets``), or with
``--from DIR`` the mixture's rows as JSONL or parquet files in DIR/tulu3/. It keeps each conversation's first user
turn, stripped, drops empty ones and exact duplicates (the first occurrence kept, in the mixture's order), and writes
one ``{"prompt", "source", "id"}`` line per prompt.

Each file comes from a public GitHub repository at a pinned commit (raw.githubusercontent.com) and is checked
against the SHA-256 of the copy evolm's documented results used; a file that differs is kept, with a warning (the
numbers in docs/ were measured on the pinned one). Each set's folder gets a SOURCE.md saying where it came from and
its licence. Standard library only (tulu3 from the Hub or parquet excepted): it runs before scripts/setup.sh too.
Nothing is downloaded at test time; the tests that need these files skip without them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

RAW = "https://raw.githubusercontent.com/{repo}/{commit}/{path}"
TIMEOUT_S = 30


@dataclass(frozen=True)
class DataFile:
    name: str  # the file's name in data/<set>/
    path: str  # its path in the repository
    sha256: str  # of the copy docs/ measured on


@dataclass(frozen=True)
class DataSet:
    repo: str
    commit: str
    licence: str
    about: str
    files: tuple[DataFile, ...]


SETS = {
    "llmbar": DataSet(
        "princeton-nlp/LLMBar", "900616bff90b6c6c8e1681f7d079250637c55992", "MIT (Copyright (c) 2023 Princeton NLP)",
        "LLMBar (Zeng et al. 2023): 419 human-checked preference pairs {input, output_1, output_2, label}; label (1 or "
        "2) names the answer that follows the instruction. `evolm eval pairs` reads them.",
        (DataFile("Natural.json", "Dataset/LLMBar/Natural/dataset.json",
                  "f7127b7aa78104cb8e03a2b1b3ac0077e95b125714dd441a8ee63666145a3375"),
         *(DataFile(f"Adversarial_{k}.json", f"Dataset/LLMBar/Adversarial/{k}/dataset.json", h) for k, h in (
             ("GPTInst", "1002425f73c2cf54b6e6de99bce3f6c60fa2a17d13194772e37d7481c1351d42"),
             ("GPTOut", "1ff56e520d7607750a9866a3be0f5b850392ca4477a1f69d80f32bd3e310f561"),
             ("Manual", "0d9598769a39cdbbd265778c37e49939d41d5f76dcfb17bd75dcfa07516d3837"),
             ("Neighbor", "6712c7eda6342602e0bc7c06c282fa95e2110d4e741a284026a62d937f9780a0"))))),
    "gsm8k": DataSet(
        "openai/grade-school-math", "3101c7d5072418e28b9008a6636bde82a006892c", "MIT (Copyright (c) 2021 OpenAI)",
        "GSM8K (Cobbe et al. 2021): {question, answer}, the answer ending in '#### <number>'. Train 7,473, test 1,319.",
        (DataFile("train.jsonl", "grade_school_math/data/train.jsonl",
                  "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465"),
         DataFile("test.jsonl", "grade_school_math/data/test.jsonl",
                  "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14"))),
    "ifeval": DataSet(
        "google-research/google-research", "19638399cc9e03623c5b9087a1d6fa8813974ce9", "Apache-2.0",
        "IFEval (Zhou et al. 2023): 541 prompts with instruction ids and kwargs. `evolm eval policy --tasks ifeval`.",
        (DataFile("input_data.jsonl", "instruction_following_eval/data/input_data.jsonl",
                  "67ffeee0fcb87c317c5b08a2de85557b4a7e96ada6178aa645b4954fe4b53d49"),)),
    "ultrafeedback_sample": DataSet(
        "kkminions888-ops/ultrafeedback-dpo-noise-study", "859ef0a82f3a27f71cef9136a432f19945f704de",
        "MIT (UltraFeedback, OpenBMB, via trl-lib/ultrafeedback_binarized); the sampling repository has no licence "
        "file",
        "A seeded sample (seed 42) of trl-lib/ultrafeedback_binarized: 1,000 train and 200 eval pairs {prompt, chosen, "
        "rejected, metadata.score_chosen / score_rejected (GPT-4 ratings)}; the configs under configs/study read it.",
        (DataFile("train_clean.jsonl", "data/processed/train_clean.jsonl",
                  "136b0163cbca47cc562ce260e4be38745f638563bce2930771da8cd8c9791c8e"),
         DataFile("eval_clean.jsonl", "data/processed/eval_clean.jsonl",
                  "932ea766ae90386f0a6c0c764162d28321c3ebfd7cd4c534aa5c0589bc9c2e0c"))),
}


TULU3 = "allenai/tulu-3-sft-mixture"
TULU3_LICENCE = ("ODC-BY-1.0 for the collection; its subsets keep their own licences (some are non-commercial) and "
                 "it includes outputs of third-party models under their own terms: see the dataset card")


def first_user_turn(messages: object) -> str:
    """The text of a conversation's first user message, stripped ('' when it has none).

    >>> first_user_turn([{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi? "}])
    'Hi?'
    """
    for m in messages if isinstance(messages, list) else []:
        if isinstance(m, dict) and m.get("role") == "user" and isinstance(m.get("content"), str):
            return m["content"].strip()
    return ""


def tulu3_prompts(rows: object) -> tuple[list[dict], dict[str, int]]:
    """The deduplicated prompts of mixture ``rows`` ({"id", "messages", "source"}), and counts of what was dropped."""
    seen: set[str] = set()
    kept: list[dict] = []
    counts = {"rows": 0, "no user turn": 0, "duplicates": 0}
    for row in rows:  # type: ignore[attr-defined]
        counts["rows"] += 1
        prompt = first_user_turn(row.get("messages"))
        if not prompt:
            counts["no user turn"] += 1
        elif prompt in seen:
            counts["duplicates"] += 1
        else:
            seen.add(prompt)
            kept.append({"prompt": prompt, "source": row.get("source"), "id": row.get("id")})
    return kept, counts


def _tulu3_rows(source: Path | None) -> object:
    """The mixture's rows: from DIR/tulu3/*.jsonl or *.parquet with --from, else from the Hub through ``datasets``."""
    if source is not None:
        folder = source / "tulu3"
        jsonl, parquet = sorted(folder.glob("*.jsonl")), sorted(folder.glob("*.parquet"))
        if jsonl:
            return (json.loads(line) for f in jsonl for line in f.open(encoding="utf-8") if line.strip())
        if not parquet:
            raise SystemExit(f"fetch_data: no *.jsonl or *.parquet files in {folder} (--from needs DIR/tulu3/)")
        files = [str(f) for f in parquet]
    try:
        import datasets
    except ImportError:
        raise SystemExit("fetch_data: tulu3 needs the datasets library: pip install datasets") from None
    try:
        if source is not None:
            return datasets.load_dataset("parquet", data_files=files, split="train")
        return datasets.load_dataset(TULU3, split="train")
    except Exception as e:  # noqa: BLE001 - the hub's and datasets' errors are many; one line names them
        raise SystemExit(f"fetch_data: cannot load {TULU3} ({type(e).__name__}: {e}); on a machine that can, run "
                         "this script and copy data/tulu3_prompts.jsonl over, or give the mixture with --from DIR") \
            from None


def fetch_tulu3(dest: Path, source: Path | None) -> list[str]:
    """Write ``dest/tulu3_prompts.jsonl`` (the paper config's data.prompts) and ``dest/tulu3/SOURCE.md``."""
    prompts, counts = tulu3_prompts(_tulu3_rows(source))
    if not prompts:
        raise SystemExit("fetch_data: the Tulu 3 rows hold no user turn: nothing to write")
    target = dest / "tulu3_prompts.jsonl"
    part = target.with_name(target.name + ".part")
    dest.mkdir(parents=True, exist_ok=True)
    with open(part, "w", encoding="utf-8", newline="\n") as out:
        out.writelines(json.dumps(p, ensure_ascii=False) + "\n" for p in prompts)
    part.replace(target)
    summary = (f"{counts['rows']:,} conversations: {len(prompts):,} prompts kept, {counts['duplicates']:,} duplicates "
               f"and {counts['no user turn']:,} without a user turn dropped")
    (dest / "tulu3").mkdir(exist_ok=True)
    (dest / "tulu3" / "SOURCE.md").write_text(
        f"# tulu3\n\nThe paper's training prompts: the first user turn of each conversation of the Tulu 3 SFT mixture, "
        f"stripped, exact duplicates dropped (first kept).\n\n- Dataset: `{TULU3}` on the Hugging Face Hub"
        f"{' (read from a local copy)' if source is not None else ''}.\n- Licence: {TULU3_LICENCE}.\n"
        f"- {summary}.\n- Written to `{target.name}`.\n", encoding="utf-8")
    print(f"fetch_data: {target}: {summary}")
    return []


def source_text(name: str, ds: DataSet) -> str:
    lines = [f"# {name}", "", ds.about, "", f"- Licence: {ds.licence}.",
             f"- From GitHub `{ds.repo}` at commit `{ds.commit}`:"]
    lines += [f"  - `{f.name}`: `{f.path}` (sha256 `{f.sha256}`)" for f in ds.files]
    return "\n".join(lines) + "\n"


def fetch(name: str, dest: Path, source: Path | None) -> list[str]:
    """Put set ``name`` into ``dest/name``; the warnings (files that differ from the pinned copy)."""
    ds, folder, warnings = SETS[name], dest / name, []
    folder.mkdir(parents=True, exist_ok=True)
    for f in ds.files:
        target, part = folder / f.name, folder / (f.name + ".part")
        if source is not None:
            src = source / name / f.name
            if not src.is_file():
                raise SystemExit(f"fetch_data: {src} not found (--from needs DIR/{name}/{f.name})")
            shutil.copyfile(src, part)
        else:
            url = RAW.format(repo=ds.repo, commit=ds.commit, path=f.path)
            try:
                with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r, open(part, "wb") as out:
                    shutil.copyfileobj(r, out)
            except (urllib.error.URLError, OSError) as e:
                part.unlink(missing_ok=True)
                raise SystemExit(f"fetch_data: cannot download {url} ({e}); on a machine that can, run this script "
                                 "and copy data/ over, or give such a copy with --from DIR") from None
        digest = hashlib.sha256(part.read_bytes()).hexdigest()
        if digest != f.sha256:
            warnings.append(f"{target}: sha256 {digest[:16]}... differs from the copy docs/ measured on "
                            f"({f.sha256[:16]}...): kept, but results may differ")
        part.replace(target)
        print(f"fetch_data: {target} ({target.stat().st_size:,} bytes)")
    (folder / "SOURCE.md").write_text(source_text(name, ds), encoding="utf-8")
    return warnings


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("sets", nargs="*", metavar="SET", help=f"which sets (default: all but tulu3): {', '.join(SETS)}, "
                   "tulu3 (the paper's training prompts, from the Hugging Face Hub)")
    p.add_argument("--dest", type=Path, default=Path(__file__).resolve().parent.parent / "data",
                   help="where the set folders go (default: data/ in the repository, ignored by git)")
    p.add_argument("--from", dest="source", type=Path, default=None, metavar="DIR",
                   help="copy from DIR/<set>/<file> instead of downloading")
    args = p.parse_args(argv)
    if unknown := [s for s in args.sets if s not in SETS and s != "tulu3"]:
        p.error(f"unknown set {unknown[0]!r} (choose from {', '.join(SETS)}, tulu3)")
    warnings = [w for name in (args.sets or SETS) for w in (
        fetch_tulu3(args.dest, args.source) if name == "tulu3" else fetch(name, args.dest, args.source))]
    for w in warnings:
        print(f"fetch_data: warning: {w}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
