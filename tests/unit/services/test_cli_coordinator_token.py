"""``--coordinator-token-file`` (and its variable): a client's bearer token from a file, e.g. a mounted
Secret, so it shows in no process listing; ``--coordinator-token`` still works; both is an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from inlet.services.cli.errors import UsageError
from inlet.services.cli.main import build_parser
from inlet.services.cli.table_services import config_from_args

TOKEN = "file-token-0123456789"


def _config(argv: list[str], environ: dict[str, str] | None = None) -> object:
    args = build_parser().parse_args(
        ["table-services", "run", "--bootstrap", "127.0.0.1:9", "--coordinator", "127.0.0.1:9", *argv]
    )
    return config_from_args(args, environ)[0]


def test_the_token_comes_from_the_file_given_by_flag_or_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")  # `kubectl create secret --from-file` keeps a trailing newline
    assert _config(["--coordinator-token-file", str(path)]).coordinator_token == TOKEN  # type: ignore[attr-defined]
    monkeypatch.setenv("INLET_TABLE_SERVICES_COORDINATOR_TOKEN_FILE", str(path))
    assert _config([]).coordinator_token == TOKEN  # type: ignore[attr-defined]
    monkeypatch.delenv("INLET_TABLE_SERVICES_COORDINATOR_TOKEN_FILE")
    assert _config(["--coordinator-token", "flag-token-0123"]).coordinator_token == "flag-token-0123"  # type: ignore[attr-defined]


def test_bad_token_files_are_one_line_errors(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text(TOKEN)
    with pytest.raises(UsageError, match="not both"):
        _config(["--coordinator-token", "x" * 12, "--coordinator-token-file", str(path)])
    with pytest.raises(UsageError, match=r"--coordinator-token-file: cannot read .*missing"):
        _config(["--coordinator-token-file", str(tmp_path / "missing")])
    for text in ("", "  \n", "one\ntwo\n"):
        path.write_text(text)
        with pytest.raises(UsageError, match="should hold the token alone"):
            _config(["--coordinator-token-file", str(path)])


@pytest.mark.parametrize(
    "command",
    [
        ["writer", "run"],
        ["writer", "load"],
        ["table-services", "run"],
        ["verify"],
        ["write"],
        ["compaction", "run"],
    ],
)
def test_every_coordinator_client_takes_the_token_file(command: list[str]) -> None:
    parser = build_parser()
    sub = parser
    for word in command:
        action = next(a for a in sub._actions if a.__class__.__name__ == "_SubParsersAction")
        sub = action.choices[word]  # type: ignore[attr-defined]
    helps = {flag: a.help or "" for a in sub._actions for flag in a.option_strings}
    assert "--coordinator-token-file" in helps, f"inlet {' '.join(command)} lacks --coordinator-token-file"
    assert "[env: INLET_" in helps["--coordinator-token-file"]
