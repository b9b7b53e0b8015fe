"""The metastore security options of ``inlet catalog sync|run``: a bad combination is one line, before any
connection."""

from __future__ import annotations

from pathlib import Path

import pytest

from inlet.services.cli.main import main


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--metastore-sasl", "gssapi"], "metastore SASL 'gssapi': expected one of none, kerberos, plain"),
        (["--metastore-cert", "c.pem"], "a metastore client certificate needs TLS"),
        (["--metastore-tls", "--metastore-key", "k.pem"], "--metastore-key needs --metastore-cert"),
        (["--metastore-sasl", "plain", "--metastore-user", "u"], "SASL plain needs a user and a password"),
        (["--metastore-user", "u"], "a metastore user and password are for --metastore-sasl plain"),
        (["--metastore-password-file", "/nonexistent/pw"], "--metastore-password-file: cannot read"),
    ],
)
def test_a_bad_security_combination_is_one_line(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["catalog", "sync", str(tmp_path), "--metastore", "thrift://127.0.0.1:1", *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
