"""The run directory: its lock and resume point, the records it holds, the JSONL line rule."""
