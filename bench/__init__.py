"""Benchmarks: each prints the machine, the sizes and the ratios it measured side by side (``python -m bench.NAME``)."""
