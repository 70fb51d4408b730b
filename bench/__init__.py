"""Benchmark: the lakehouse's ``run --once`` against a bare Structured Streaming job on the same files."""
