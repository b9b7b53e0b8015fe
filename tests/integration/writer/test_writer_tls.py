"""The writer reaches a coordinator that serves TLS with token authentication (as in docker-compose
and Kubernetes), trusting the coordinator's CA from --coordinator-ca."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from test_writer_exactly_once import table_path
from writer_helpers import Source, produce, read_rows, wait_for

from inlet.services.cli.errors import UsageError
from inlet.services.cli.main import build_parser
from inlet.services.cli.writer import config_from_args
from inlet.services.coordinator.config import CoordinatorConfig
from inlet.services.coordinator.server import serve
from inlet.services.writer.service import WriterConfig

COLS = ["id", "name", "note", "amount"]
TOKEN = "writer-token-0123456789"


@pytest.fixture
def tls_coordinator(pg_url: str, lake: Path, tmp_path: Path):
    if shutil.which("openssl") is None:
        pytest.skip("the openssl CLI is not installed")
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"tokens": [{"name": "writer", "token": TOKEN, "tables": ["*"]}]}))
    server = serve(
        CoordinatorConfig(
            listen="127.0.0.1:0",
            database_url=pg_url,
            lake_roots=(str(lake),),
            tls_cert=str(cert),
            tls_key=str(key),
            tokens_file=str(tokens),
            grace_s=1.0,
        )
    )
    yield server, cert
    server.stop(0)


def test_writer_commits_through_a_tls_coordinator_with_a_token(
    start_writer, tls_coordinator, kafka_server, kafka_bootstrap, lake, prefix
):
    server, ca = tls_coordinator
    src = Source(prefix)
    kafka_server.create_topic(src.topic, partitions=1)
    produce(
        kafka_bootstrap, src.topic, [src.insert(id=i, name=f"n{i}", note="x", amount=i) for i in range(4)]
    )
    start_writer(coordinator=server.address, coordinator_ca=ca.read_bytes(), coordinator_token=TOKEN)
    path = table_path(lake, src)
    wait_for(lambda: read_rows(path, COLS, ["id"]) == src.expected(COLS), what="rows through TLS")


def test_coordinator_ca_flag_reads_the_file_and_names_a_missing_one(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
    base = [
        "writer",
        "run",
        "--kafka-bootstrap",
        "k:9092",
        "--coordinator",
        "c:50551",
        "--lake-root",
        str(tmp_path),
    ]
    config, _ = config_from_args(build_parser().parse_args([*base, "--coordinator-ca", str(ca)]))
    assert isinstance(config, WriterConfig) and config.coordinator_ca == ca.read_bytes()
    with pytest.raises(UsageError, match=r"--coordinator-ca: cannot read .*missing\.pem"):
        config_from_args(
            build_parser().parse_args([*base, "--coordinator-ca", str(tmp_path / "missing.pem")])
        )
