"""Replay: run a trace's op DAG on compute engines, NICs and links; summarize and write results."""
