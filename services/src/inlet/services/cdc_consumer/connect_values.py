"""Kafka Connect's text form of a header value (``SimpleHeaderConverter``, Connect's ``Values``), read back.

Debezium puts the old key of a primary-key change in the header ``__debezium.oldkey`` of the new
key's CREATE as a Connect ``Struct``; the default header converter writes it as Connect's ``Values``
text: ``{"id":1,"code":"a\\"b"}``. That is JSON-like but not JSON: strings escape only ``\\`` and
``"`` (a newline stays raw), numbers are Java's ``toString`` (``1.5E-7``), bytes are base64 strings,
and ``java.util.Date`` values (Connect's own Date/Time/Timestamp types) are unquoted ISO text.

:func:`parse` returns Python values for it: ``dict`` (struct or map), ``list``, ``str``, ``int``,
``decimal.Decimal`` (every other number, its digits kept exactly), ``bool`` and ``None``; it raises
``ValueError`` for text that is not in this form.
"""

from __future__ import annotations

import decimal
import re
from typing import Any

_INT = re.compile(r"[+-]?\d+")
_STOP = frozenset(",}]")


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def fail(self, what: str) -> ValueError:
        return ValueError(f"{what} at {self.pos} in {self.text[:80]!r}")

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, ch: str) -> None:
        if self.peek() != ch:
            raise self.fail(f"expected {ch!r}")
        self.pos += 1

    def value(self) -> Any:
        ch = self.peek()
        if ch == '"':
            return self.string()
        if ch == "{":
            return self.struct()
        if ch == "[":
            return self.array()
        return self.scalar()

    def string(self) -> str:
        self.expect('"')
        out: list[str] = []
        text = self.text
        while True:
            if self.pos >= len(text):
                raise self.fail("unterminated string")
            ch = text[self.pos]
            self.pos += 1
            if ch == '"':
                return "".join(out)
            if ch == "\\":
                if self.pos >= len(text) or text[self.pos] not in '\\"':
                    raise self.fail("unknown escape")
                ch = text[self.pos]
                self.pos += 1
            out.append(ch)

    def struct(self) -> dict[Any, Any]:
        self.expect("{")
        out: dict[Any, Any] = {}
        if self.peek() == "}":
            self.pos += 1
            return out
        while True:
            key = self.value()
            self.expect(":")
            out[key] = self.value()
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("}")
            return out

    def array(self) -> list[Any]:
        self.expect("[")
        out: list[Any] = []
        if self.peek() == "]":
            self.pos += 1
            return out
        while True:
            out.append(self.value())
            if self.peek() == ",":
                self.pos += 1
                continue
            self.expect("]")
            return out

    def scalar(self) -> Any:
        start = self.pos
        text = self.text
        while self.pos < len(text) and text[self.pos] not in _STOP:
            self.pos += 1
        token = text[start : self.pos]
        if not token:
            raise self.fail("expected a value")
        if token == "null":
            return None
        if token in ("true", "false"):
            return token == "true"
        if _INT.fullmatch(token):
            return int(token)
        try:
            number = decimal.Decimal(token)
        except decimal.InvalidOperation:
            return token  # a date, time or timestamp Connect wrote unquoted
        if not number.is_finite() and token not in ("NaN", "Infinity", "-Infinity"):
            return token
        return number


def parse(text: str) -> Any:
    """The value Connect's ``Values`` wrote as ``text`` (see the module docstring)."""
    p = _Parser(text)
    value = p.value()
    if p.pos != len(text):
        raise p.fail("unexpected text after the value")
    return value
