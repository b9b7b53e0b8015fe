"""Catalog sync to a secured metastore, against the real embedded Hive Metastore 4 (Hive's own server and
settings): TLS
(``hive.metastore.use.SSL``) with SASL PLAIN inside, and Kerberos (``hive.metastore.sasl.enabled``) with a
real MIT KDC; a mismatch of either side ends in one line naming the likely cause, not a hang.

The Kerberos test skips where the KDC binaries (Debian ``krb5-kdc``, ``krb5-admin-server``) or the
``kerberos`` Python bindings are missing; see docs/catalog.md.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from catalog_sync_helpers import metastore_database
from support.kdc import REALM, Kdc
from support.kdc import missing as kdc_missing

from inlet.core import HudiTable
from inlet.services.catalog_sync import MetastoreClient, MetastoreUnavailableError
from inlet.services.catalog_sync.transport import MetastoreSecurity
from inlet.services.cli.main import main
from inlet.services.stack import EmbeddedPostgres
from inlet.services.stack.java import java_tool
from inlet.services.stack.metastore import EmbeddedMetastore

USER, PASSWORD = "inlet", "s3cret pass"
SAN = ["-dname", "CN=localhost", "-ext", "SAN=dns:localhost,ip:127.0.0.1"]


def make_keystore(d: Path) -> tuple[Path, Path]:
    """A self-signed server key in a PKCS12 keystore (for the metastore) and its certificate as PEM
    (the client's CA file): for localhost and 127.0.0.1."""
    keystore, pem = d / "hms.p12", d / "hms-ca.pem"
    keytool = str(java_tool("keytool"))
    common = ["-keystore", str(keystore), "-storepass", "changeit", "-alias", "hms"]
    subprocess.run(
        [keytool, "-genkeypair", *common, "-storetype", "PKCS12", "-keyalg", "RSA", "-validity", "2", *SAN],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [keytool, "-exportcert", "-rfc", *common, "-file", str(pem)], check=True, capture_output=True
    )
    return keystore, pem


@pytest.fixture(scope="module")
def secured(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: EmbeddedPostgres
) -> Iterator[tuple[EmbeddedMetastore, Path]]:
    """One metastore serving TLS with SASL PLAIN (Hive 4's metastore.authentication=CONFIG) inside."""
    d = tmp_path_factory.mktemp("hms-secure")
    keystore, pem = make_keystore(d)
    conf = {
        "hive.metastore.use.SSL": "true",
        "hive.metastore.keystore.path": str(keystore),
        "hive.metastore.keystore.password": "changeit",
        "metastore.authentication": "CONFIG",
        "metastore.authentication.config.username": USER,
        "metastore.authentication.config.password": PASSWORD,
        # Hive 4 refuses password authentication with the clients' set_ugi (its default)
        "metastore.execute.setugi": "false",
    }
    security = MetastoreSecurity(ca=str(pem), sasl="plain", user=USER, password=PASSWORD)
    hms = EmbeddedMetastore(
        d / "data", database_url=metastore_database(postgres_server), conf=conf, security=security
    )
    hms.start()
    try:
        yield hms, pem
    finally:
        hms.stop()


def call(uri: str, security: MetastoreSecurity, timeout_s: float = 3.0) -> list[str]:
    with MetastoreClient(uri, timeout_s, security) as c:
        return list(c.call("get_all_databases"))


def failure(uri: str, security: MetastoreSecurity, timeout_s: float = 2.0) -> str:
    """The one-line error of a call that must fail, and fail within about the timeout (no hang)."""
    started = time.monotonic()
    with pytest.raises(MetastoreUnavailableError) as e:
        call(uri, security, timeout_s)
    assert time.monotonic() - started < timeout_s * 2 + 5
    message = str(e.value)
    assert "\n" not in message
    return message


def test_tls_and_sasl_plain_sync_a_table_from_the_cli(
    tmp_path: Path,
    secured: tuple[EmbeddedMetastore, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    hms, pem = secured
    base = tmp_path / "trips"
    t = HudiTable.create(str(base), name="trips", record_key="id", ordering_field="ts")
    t.write(pa.table({"id": pa.array([1], pa.int64()), "ts": pa.array([1], pa.int64())}), "insert")
    password_file = tmp_path / "password"
    password_file.write_text(PASSWORD + "\n")
    monkeypatch.setenv("INLET_CATALOG_METASTORE_SASL", "plain")  # flags and environment alike
    monkeypatch.setenv("INLET_CATALOG_METASTORE_USER", USER)
    monkeypatch.setenv("INLET_CATALOG_METASTORE_PASSWORD_FILE", str(password_file))
    argv = ["catalog", "sync", str(base), "--metastore", hms.uri, "--database", "secure"]
    assert main([*argv, "--metastore-ca", str(pem), "--timeout", "10"]) == 0
    assert [x["name"] for x in json.loads(capsys.readouterr().out)["tables"]] == ["trips"]
    security = MetastoreSecurity(ca=str(pem), sasl="plain", user=USER, password=PASSWORD)
    with MetastoreClient(hms.uri, 10, security) as c:
        assert c.get_table("secure", "trips").sd.location == f"file:{base}"


def test_a_security_mismatch_is_one_line_naming_its_cause(
    secured: tuple[EmbeddedMetastore, Path], metastore: EmbeddedMetastore, tmp_path: Path
) -> None:
    hms, pem = secured
    tls_plain = MetastoreSecurity(ca=str(pem), sasl="plain", user=USER, password=PASSWORD)
    assert "default" in call(hms.uri, tls_plain)
    wrong = MetastoreSecurity(ca=str(pem), sasl="plain", user=USER, password="wrong")
    message = failure(hms.uri, wrong)
    assert "(SASL plain over TLS)" in message and "with these credentials?" in message, message

    # plaintext client to the TLS server: the server drops what is no TLS record
    message = failure(hms.uri, MetastoreSecurity())
    assert "(plaintext)" in message and "--metastore-tls" in message, message
    # TLS without SASL to the SASL server: the Thrift call is no SASL start
    message = failure(hms.uri, MetastoreSecurity(ca=str(pem)))
    assert "(TLS)" in message and "--metastore-sasl" in message, message
    # a CA that did not sign the server's certificate
    other = tmp_path / "other"
    other.mkdir()
    _, other_pem = make_keystore(other)
    message = failure(hms.uri, MetastoreSecurity(ca=str(other_pem)))
    assert "not trusted" in message and "--metastore-ca" in message, message

    # TLS client to a plaintext metastore: Hive's server drops the ClientHello
    message = failure(metastore.uri, MetastoreSecurity(ca=str(pem)))
    assert "closed the connection in the TLS handshake" in message, message
    assert "hive.metastore.use.SSL=false" in message, message
    # SASL client to a plaintext metastore
    message = failure(metastore.uri, MetastoreSecurity(sasl="plain", user=USER, password=PASSWORD), 1.5)
    assert "no SASL plain handshake" in message and "drop --metastore-sasl" in message, message


def test_a_silent_server_times_out_naming_tls(tmp_path: Path) -> None:
    """A server that never answers (a fault: a proxy or a plaintext server waiting for more bytes) ends
    in the timeout, with the likely cause, not in a hang."""
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts TCP (backlog), never speaks
        uri = f"thrift://127.0.0.1:{silent.getsockname()[1]}"
        message = failure(uri, MetastoreSecurity(tls=True), timeout_s=1.0)
        assert "no TLS handshake within 1s" in message and "hive.metastore.use.SSL=false" in message, message
        message = failure(uri, MetastoreSecurity(), timeout_s=1.0)
        assert "require TLS" in message and "--metastore-sasl kerberos" in message, message


@pytest.fixture(scope="module")
def kerberized(
    tmp_path_factory: pytest.TempPathFactory, postgres_server: EmbeddedPostgres
) -> Iterator[tuple[EmbeddedMetastore, Kdc, Path]]:
    """A KDC and a metastore serving Kerberos SASL as hive/localhost@INLET.TEST; the client's keytab."""
    why = kdc_missing()
    if why:
        pytest.skip(why)
    d = tmp_path_factory.mktemp("hms-kerberos")
    with Kdc(d / "kdc") as kdc:
        server_keytab = kdc.keytab(d / "hive.keytab", "hive/localhost")
        client_keytab = kdc.keytab(d / "inlet.keytab", "inlet")
        conf = {
            "hive.metastore.sasl.enabled": "true",
            "hive.metastore.kerberos.principal": f"hive/localhost@{REALM}",
            "hive.metastore.kerberos.keytab.file": str(server_keytab),
            # Hadoop's own switch (core-site.xml in a Hive install): the server logs in from its keytab
            "hadoop.security.authentication": "kerberos",
        }
        saved = {k: os.environ.get(k) for k in (*kdc.env, "KRB5_CLIENT_KTNAME", "KRB5CCNAME")}
        os.environ.update({**kdc.env, "KRB5_CLIENT_KTNAME": str(client_keytab), "KRB5CCNAME": f"FILE:{d}/cc"})
        hms = EmbeddedMetastore(
            d / "data",
            database_url=metastore_database(postgres_server),
            conf=conf,
            security=MetastoreSecurity(sasl="kerberos", kerberos_host="localhost"),
            jvm_options=[f"-Djava.security.krb5.conf={kdc.krb5_conf}"],
        )
        try:
            hms.start()
            yield hms, kdc, client_keytab
        finally:
            hms.stop()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def test_kerberos_sync_with_a_client_keytab_and_one_line_without_credentials(
    tmp_path: Path,
    kerberized: tuple[EmbeddedMetastore, Kdc, Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    hms, _, _ = kerberized
    base = tmp_path / "orders"
    t = HudiTable.create(str(base), name="orders", record_key="id", ordering_field="ts")
    t.write(pa.table({"id": pa.array([1], pa.int64()), "ts": pa.array([1], pa.int64())}), "insert")
    argv = ["catalog", "sync", str(base), "--metastore", hms.uri, "--database", "krb", "--timeout", "10"]
    argv += ["--metastore-sasl", "kerberos", "--metastore-kerberos-host", "localhost"]
    assert main(argv) == 0  # credentials from KRB5_CLIENT_KTNAME; principal hive/localhost
    assert [x["name"] for x in json.loads(capsys.readouterr().out)["tables"]] == ["orders"]

    monkeypatch.setenv("KRB5_CLIENT_KTNAME", str(tmp_path / "no.keytab"))  # no credentials at all
    monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path}/empty-cc")
    message = failure(hms.uri, MetastoreSecurity(sasl="kerberos", kerberos_host="localhost"))
    assert "(SASL kerberos)" in message and "no SASL kerberos handshake" in message, message
