"""Evaluations (docs/METHOD.md §3): RewardBench 2, pairwise judge accuracy, policy quality."""
