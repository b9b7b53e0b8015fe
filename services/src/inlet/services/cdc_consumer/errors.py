"""The one error the decoder raises."""

from __future__ import annotations


class DecodeError(Exception):
    """A Debezium record the decoder cannot read or map; ``reason`` is one line naming the problem
    (what a dead-letter record carries)."""

    def __init__(self, reason: str) -> None:
        self.reason = " ".join(str(reason).split()) or "unknown decode error"
        super().__init__(self.reason)
