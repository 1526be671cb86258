"""Put the public data sets the docs name into ./data (ignored by git): LLMBar, GSM8K, IFEval, an UltraFeedback sample.

    python scripts/fetch_data.py                    # every set, from GitHub at the commits below
    python scripts/fetch_data.py llmbar gsm8k       # some of them
    python scripts/fetch_data.py --from DIR         # no network here: copy DIR/<set>/<file>, a copy made elsewhere

Each file comes from a public GitHub repository at a pinned commit (raw.githubusercontent.com) and is checked
against the SHA-256 of the copy evolm's documented results used; a file that differs is kept, with a warning (the
numbers in docs/ were measured on the pinned one). Each set's folder gets a SOURCE.md saying where it came from and
its licence. Standard library only: it runs before scripts/setup.sh too. Nothing is downloaded at test time; the
tests that need these files skip without them.
"""

from __future__ import annotations

import argparse
import hashlib
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
    p.add_argument("sets", nargs="*", metavar="SET", help=f"which sets (default: all): {', '.join(SETS)}")
    p.add_argument("--dest", type=Path, default=Path(__file__).resolve().parent.parent / "data",
                   help="where the set folders go (default: data/ in the repository, ignored by git)")
    p.add_argument("--from", dest="source", type=Path, default=None, metavar="DIR",
                   help="copy from DIR/<set>/<file> instead of downloading")
    args = p.parse_args(argv)
    if unknown := [s for s in args.sets if s not in SETS]:
        p.error(f"unknown set {unknown[0]!r} (choose from {', '.join(SETS)})")
    warnings = [w for name in (args.sets or SETS) for w in fetch(name, args.dest, args.source)]
    for w in warnings:
        print(f"fetch_data: warning: {w}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
