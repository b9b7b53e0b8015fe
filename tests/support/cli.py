"""Running the ``inlet`` CLI inside the test process."""

from __future__ import annotations

import logging

import pytest

from inlet.services.cli.main import main


def run_inlet(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``inlet <args>`` through the CLI's ``main`` in this process: exit status, stdout, stderr."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    capsys.readouterr()
    try:
        code = main(list(args))
    finally:  # main configures the root logger for the command: put the test's back
        root.handlers[:] = handlers
        root.setLevel(level)
    out, err = capsys.readouterr()
    return code, out, err
