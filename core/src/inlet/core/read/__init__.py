"""Queries: snapshot and read-optimized reads, incremental (change) reads."""
