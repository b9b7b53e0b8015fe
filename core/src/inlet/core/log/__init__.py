"""Hudi log files: block layout, reading, writing."""
