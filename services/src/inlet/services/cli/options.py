"""Argument helpers: environment-variable defaults, case-insensitive choices, list and key=value values."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence

from inlet.services.cli.errors import UsageError

TABLE_PATH_ENV = "INLET_TABLE_PATH"


def env(name: str, default: str | None = None) -> str | None:
    """``$name`` if set and not empty, else ``default``."""
    value = os.environ.get(name)
    return value if value else default


def env_choice(name: str, choices: Sequence[str], default: str | None = None) -> str | None:
    """``$name`` normalised to one of ``choices`` (else ``default``); a bad value is a usage error."""
    value = env(name)
    if value is None:
        return default
    try:
        return _normalise(value, choices)
    except ValueError as e:
        raise UsageError(f"environment variable {name}: {e}") from None


def env_int(name: str, default: int | None = None, minimum: int = 0) -> int | None:
    value = env(name)
    if value is None:
        return default
    try:
        return int_at_least(minimum)(value)
    except argparse.ArgumentTypeError as e:
        raise UsageError(f"environment variable {name}: {e}") from None


def with_env(text: str, name: str) -> str:
    """Help text that names the environment variable holding the option's default."""
    return f"{text} [env: {name}]"


def _normalise(value: str, choices: Sequence[str]) -> str:
    text = value.strip()
    for c in choices:
        if c.lower() == text.lower():
            return c
    raise ValueError(f"invalid choice {value!r} (choose from {', '.join(choices)})")


def choice(choices: Sequence[str]) -> Callable[[str], str]:
    """An argparse ``type`` accepting one of ``choices`` in any letter case."""

    def parse(value: str) -> str:
        try:
            return _normalise(value, choices)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


def choices_metavar(choices: Sequence[str]) -> str:
    return "{" + ",".join(choices) + "}"


def int_at_least(minimum: int) -> Callable[[str], int]:
    """An argparse ``type`` for integers >= ``minimum``."""

    def parse(value: str) -> int:
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
        if number < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {number}")
        return number

    return parse


def split_list(value: str | None, what: str) -> list[str] | None:
    """``a,b`` -> ``["a", "b"]``; None stays None; an empty list is a usage error."""
    if value is None:
        return None
    items = [p.strip() for p in value.split(",") if p.strip()]
    if not items:
        raise UsageError(f"{what} is empty")
    return items


def options_with_flags(
    args: argparse.Namespace, flags: Mapping[str, tuple[str, str]], upper: bool = False
) -> dict[str, str]:
    """``--option`` pairs plus the flags that stand for Hudi keys (``flags``: attribute ->
    (flag, key)); a flag contradicting an ``--option`` of its key is a usage error. ``upper``:
    string values are enum names (compared and stored upper-case)."""
    opts = parse_key_values(args.option)
    for attr, (flag, key) in flags.items():
        value = getattr(args, attr, None)
        if value is None:
            continue
        text = str(value).upper() if upper and isinstance(value, str) else str(value)
        given = opts.get(key)
        if given is not None and (given.upper() if upper else given) != text:
            raise UsageError(f"{flag} {value} contradicts --option {key}")
        opts[key] = text
    return opts


def parse_key_values(pairs: Sequence[str] | None, what: str = "--option") -> dict[str, str]:
    """``["k=v", ...]`` -> ``{"k": "v"}``; a pair without ``=`` or key is a usage error."""
    out: dict[str, str] = {}
    for pair in pairs or ():
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{what} {pair!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def table_path(path: str | None) -> str:
    """The table path argument, else ``$INLET_TABLE_PATH``."""
    resolved = path or env(TABLE_PATH_ENV)
    if not resolved:
        raise UsageError(f"a table PATH is required (or set {TABLE_PATH_ENV})")
    return resolved
