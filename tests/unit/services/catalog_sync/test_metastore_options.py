"""The metastore security options of ``inlet catalog sync|run``: a bad combination is one line, before any
connection."""

from __future__ import annotations

from pathlib import Path

import pytest
from puresasl.mechanisms import have_kerberos

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


def test_catalog_run_passes_the_security_settings_to_the_service(tmp_path: Path) -> None:
    from inlet.services.catalog_sync.transport import MetastoreSecurity
    from inlet.services.cli.catalog import config_from_args
    from inlet.services.cli.main import build_parser

    password = tmp_path / "pw"
    password.write_text("secret\n")
    argv = ["catalog", "run", "--kafka-bootstrap", "127.0.0.1:1", "--metastore", "thrift://h:9083"]
    argv += ["--metastore-ca", "ca.pem", "--metastore-sasl", "PLAIN", "--metastore-user", "u"]
    config, _ = config_from_args(
        build_parser().parse_args([*argv, "--metastore-password-file", str(password)])
    )
    assert config.metastore_security == MetastoreSecurity(
        ca="ca.pem", sasl="plain", user="u", password="secret"
    )


@pytest.mark.skipif(have_kerberos, reason="the kerberos bindings are installed here")
def test_kerberos_without_its_bindings_is_one_line() -> None:
    from inlet.services.catalog_sync import CatalogSyncError, MetastoreClient
    from inlet.services.catalog_sync.transport import MetastoreSecurity

    with pytest.raises(CatalogSyncError, match="needs the Python package 'kerberos'"):  # before connecting
        MetastoreClient("thrift://127.0.0.1:1", 1.0, MetastoreSecurity(sasl="kerberos")).call(
            "get_all_databases"
        )
