# Copyright 2023 AllenAI. All rights reserved.
#
# Licensed under the Apache License, Version 2.0 (the "License");
# you may not use this file except in compliance with the License.
# You may obtain a copy of the License at
#
#     http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS,
# WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
# See the License for the specific language governing permissions and
# limitations under the License.
#
# (scripts/run_v2.py carries the same notice with "Copyright 2025 AllenAI".)
# A copy of the License is in LICENSE-rewardbench next to this file.
"""The official RewardBench 2 scoring code, vendored so that evolm's scoring is tested against it.

Source: the ``rewardbench`` wheel 0.1.4 from PyPI (``rewardbench-0.1.4-py3-none-any.whl``,
sha256 4ea9db0aa7c56fd5c048a5146fba1b7b137b119485e94de609ca4c8a5e546f38), whose files equal
https://github.com/allenai/reward-bench at commit fdc742df60491235b7f37a8fa9b31b4c116fd40b
(``rewardbench/utils.py``, ``scripts/run_v2.py``). Apache License 2.0.

Changes (Apache-2.0 §4(b)): ``reroll_and_score_dataset``, ``sample_stats`` and
``process_single_model`` are copied unchanged from ``rewardbench/utils.py``; only the imports
they use are kept (the module also imports torch, fastchat, transformers and the model
registry, which these functions do not need). ``score_subsets`` wraps lines 302-344 of
``scripts/run_v2.py`` (from "add subsets and ids back" to the end of the per-subset loop)
unchanged in a function, minus the three ``results_grouped`` entries naming the model, which
need the command-line arguments, and returns ``results_grouped``. pandas and ``datasets`` are
kept: ``datasets`` is an evolm dependency and brings pandas.
"""

import math

import numpy as np
import pandas as pd
from datasets import Dataset


def reroll_and_score_dataset(dataset, total_completions, cols_to_combine=["text", "scores"]):
    # Convert to pandas DataFrame for easier manipulation
    df = dataset.to_pandas()

    # Validate that sum of total_completions matches dataset length
    if sum(total_completions) != len(df):
        raise ValueError(
            f"Sum of total_completions ({sum(total_completions)}) does not equal dataset length ({len(df)})"
        )

    rerolled_rows = []
    current_idx = 0

    # Process each group with its specified number of completions
    for group_size in total_completions:
        group = df.iloc[current_idx : current_idx + group_size]

        # Create new row
        new_row = {}
        # print(group['scores'])
        # Handle text and score columns - combine into lists
        for col in cols_to_combine:
            new_row[col] = group[col].tolist()

        # penalty for ties
        scores = new_row["scores"]
        max_val = np.max(scores)
        new_row["results"] = (1 / np.sum(scores == max_val)) if scores[0] == max_val else 0

        # new_row["results"] = 1 if np.argmax(new_row["scores"]) == 0 else 0

        # Handle all other columns - verify they're identical and take first value
        other_columns = [col for col in df.columns if col not in cols_to_combine]
        for col in other_columns:
            values = group[col].unique()
            if len(values) != 1:
                raise ValueError(f"Column {col} has different values within group at index {current_idx}: {values}")
            new_row[col] = values[0]

        rerolled_rows.append(new_row)
        current_idx += group_size

    # Create new dataset
    rerolled_df = pd.DataFrame(rerolled_rows)
    rerolled_dataset = Dataset.from_pandas(rerolled_df)

    return rerolled_dataset


# for ties support
def sample_stats(scored_samples: dict) -> dict:
    correct_samples = [s for s in scored_samples.values() if s["correct"]]
    incorrect_samples = [s for s in scored_samples.values() if not s["correct"]]
    # Handle potential empty lists
    if not correct_samples or not incorrect_samples:
        return {
            "best_correct": {"scores": [0]} if not correct_samples else correct_samples[0],
            "worst_correct": {"scores": [0]} if not correct_samples else correct_samples[0],
            "best_incorrect": {"scores": [0]} if not incorrect_samples else incorrect_samples[0],
            "accurate": False,
            "different_correct_margin": None,
            "correct_incorrect_margin": 0,
            "correct_incorrect_margin_greater": None,
            "successful_detractors": [],
        }

    best_correct = max(correct_samples, key=lambda x: x["scores"][0])
    worst_correct = min(correct_samples, key=lambda x: x["scores"][0])
    best_incorrect = max(incorrect_samples, key=lambda x: x["scores"][0])

    different_correct_margin = (
        best_correct["scores"][0] - worst_correct["scores"][0] if len(correct_samples) > 1 else None
    )
    correct_incorrect_margin = worst_correct["scores"][0] - best_incorrect["scores"][0]
    successful_detractors = [s for s in incorrect_samples if s["scores"][0] > worst_correct["scores"][0]]

    return {
        "best_correct": best_correct,
        "worst_correct": worst_correct,
        "best_incorrect": best_incorrect,
        "accurate": worst_correct["scores"][0] > best_incorrect["scores"][0],
        "different_correct_margin": different_correct_margin,
        "correct_incorrect_margin": correct_incorrect_margin,
        "correct_incorrect_margin_greater": (
            correct_incorrect_margin > different_correct_margin if different_correct_margin is not None else None
        ),
        "successful_detractors": successful_detractors,
    }


def process_single_model(dataset):
    from collections import defaultdict

    results = {k: defaultdict(dict) for k in ["ref", "tied"]}

    for sample in dataset:
        # Extract sample type and prompt_id
        sample_type, prompt_id = sample["id"].split(":")
        prompt_id = int(prompt_id)

        # Process each text entry and its score
        # print("Sample: ", sample)
        for i, score in enumerate(sample["scores"]):
            is_correct = i < sample["num_correct"]

            sample_entry = {
                "correct": is_correct,
                "scores": [score[0]] if isinstance(score, list) else [score],
            }

            results[sample_type][prompt_id][i] = sample_entry

    # Calculate statistics for each prompt
    stats = {
        k: {prompt_id: sample_stats(samples) for prompt_id, samples in type_results.items()}
        for k, type_results in results.items()
    }

    # Calculate per-prompt overall scores
    prompt_overall_scores = {}
    ref_stats = stats.get("ref", {})
    tied_stats = stats.get("tied", {})

    for sample_type in ["ref", "tied"]:
        for pid in stats.get(sample_type, {}):
            if sample_type == "ref":
                ref_accurate = ref_stats.get(pid, {}).get("accurate", False)
                prompt_overall_scores[(sample_type, pid)] = 0.6 * int(ref_accurate)
            elif sample_type == "tied" and pid in ref_stats:
                ref_accurate = ref_stats[pid]["accurate"]
                tied_accurate = tied_stats[pid]["accurate"]

                if tied_stats[pid]["different_correct_margin"] is not None:
                    correctness_preferred = (
                        tied_stats[pid]["correct_incorrect_margin"] > tied_stats[pid]["different_correct_margin"]
                    )
                    correctness_preferred_hard = (
                        min(ref_stats[pid]["correct_incorrect_margin"], tied_stats[pid]["correct_incorrect_margin"])
                        > tied_stats[pid]["different_correct_margin"]
                    )
                    if tied_stats[pid]["different_correct_margin"] > 0:
                        correctness_margin_ratio = (
                            min(
                                ref_stats[pid]["correct_incorrect_margin"], tied_stats[pid]["correct_incorrect_margin"]
                            )
                            / tied_stats[pid]["different_correct_margin"]
                        )
                        correctness_margin_score = math.tanh(correctness_margin_ratio - 1)
                    else:
                        correctness_margin_score = 0
                else:
                    correctness_preferred = False
                    correctness_preferred_hard = False
                    correctness_margin_score = 0

                prompt_overall_scores[(sample_type, pid)] = (
                    0.3 * int(tied_accurate)
                    + 0.3 * int(ref_accurate)
                    + 0.2 * int(correctness_preferred)
                    + 0.2 * int(correctness_preferred_hard)
                    + 0.01 * correctness_margin_score
                )
            else:  # 'tied' with no corresponding 'ref'
                tied_accurate = tied_stats[pid]["accurate"]
                prompt_overall_scores[(sample_type, pid)] = 0.3 * int(tied_accurate)

    # Calculate global metrics
    accuracy = {
        "ref": np.mean([r["accurate"] for r in ref_stats.values()]) if ref_stats else 0,
        "tied": np.mean([r["accurate"] for r in tied_stats.values()]) if tied_stats else 0,
    }

    common_prompt_ids = set(ref_stats.keys()) & set(tied_stats.keys())

    if common_prompt_ids:
        correctness_preferred = np.mean(
            [
                tied_stats[r]["correct_incorrect_margin"] > tied_stats[r]["different_correct_margin"]
                for r in common_prompt_ids
                if tied_stats[r]["different_correct_margin"] is not None
            ]
        )

        correctness_preferred_hard = np.mean(
            [
                min(ref_stats[r]["correct_incorrect_margin"], tied_stats[r]["correct_incorrect_margin"])
                > tied_stats[r]["different_correct_margin"]
                for r in common_prompt_ids
                if tied_stats[r]["different_correct_margin"] is not None
            ]
        )

        correctness_margin_ratios = [
            min(ref_stats[r]["correct_incorrect_margin"], tied_stats[r]["correct_incorrect_margin"])
            / tied_stats[r]["different_correct_margin"]
            for r in common_prompt_ids
            if tied_stats[r]["different_correct_margin"] is not None and tied_stats[r]["different_correct_margin"] > 0
        ]

        correctness_margin_score = (
            np.mean([math.tanh(r - 1) for r in correctness_margin_ratios]) if correctness_margin_ratios else 0
        )
    else:
        correctness_preferred = 0
        correctness_preferred_hard = 0
        correctness_margin_score = 0

    overall_score = (
        0.3 * accuracy["tied"]
        + 0.3 * accuracy["ref"]
        + 0.2 * correctness_preferred
        + 0.2 * correctness_preferred_hard
        + 0.01 * correctness_margin_score
    )

    # Create HuggingFace dataset with results
    dataset_dict = []
    for sample in dataset:
        sample_type, prompt_id = sample["id"].split(":")
        prompt_id = int(prompt_id)

        # Create a copy of the original sample
        new_row = {k: v for k, v in sample.items()}
        new_row["results"] = None

        dataset_dict.append(new_row)

    # Convert to HuggingFace Dataset
    results_dataset = Dataset.from_dict({k: [d[k] for d in dataset_dict] for k in dataset_dict[0].keys()})

    return results_dataset, overall_score


def score_subsets(dataset, subsets, ids, scores, total_completions, num_correct):
    """``scripts/run_v2.py`` after the reward model has scored every completion (see the header)."""
    # add subsets and ids back (removed so it's not handled by cuda)
    out_dataset = dataset.add_column("subset", subsets)
    out_dataset = out_dataset.add_column("id", ids)

    # add scores_chosen and scores_rejected to the dataset
    out_dataset = out_dataset.add_column("scores", scores)

    # reroll dataset back to one row per instance, compressing 'text' and 'score' fields into list
    # and compute results
    out_dataset = reroll_and_score_dataset(out_dataset, total_completions, cols_to_combine=["text", "scores"])
    out_dataset = out_dataset.add_column("num_correct", num_correct)

    # get core dataset
    results_grouped = {}
    # (the model name, model type and chat template entries of run_v2.py are left out here)

    # print per subset and log into results_grouped file
    present_subsets = np.unique(subsets)
    for subset in present_subsets:
        subset_dataset = out_dataset.filter(lambda example: example["subset"] == subset)
        # recompute "results" column for ties subset with different scoring method
        if subset.lower() == "ties":
            ties_subset_with_results, overall_score = process_single_model(subset_dataset)
            subset_dataset = ties_subset_with_results

            # Update the results for the ties subset in the original dataset
            ties_indices = [i for i, s in enumerate(out_dataset["subset"]) if s == "ties"]
            out_dataset_df = out_dataset.to_pandas()
            for i, ties_idx in enumerate(ties_indices):
                out_dataset_df.at[ties_idx, "results"] = ties_subset_with_results["results"][i]
            out_dataset = Dataset.from_pandas(out_dataset_df)

            print(f"{subset}: Overall score {overall_score}")
            results_grouped[subset] = overall_score
        else:
            num_correct = sum(subset_dataset["results"])
            num_total = len(subset_dataset["results"])
            print(f"{subset}: {num_correct}/{num_total} ({num_correct/num_total})")
            results_grouped[subset] = num_correct / num_total

    return results_grouped
