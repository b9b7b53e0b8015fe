"""TLS (a self-signed certificate made with the openssl CLI), token authentication with table
scopes, health and reflection without a token, ``--insecure`` refused off loopback, and the CLI."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from inlet.core import HudiTable
from inlet.services.cli.coordinator import main as coordinator_main
from inlet.services.coordinator.config import ConfigError, CoordinatorConfig
from inlet.services.coordinator.server import RunningServer
from inlet.services.coordinator_client.client import CoordinatorCallError, CoordinatorClient

REPO_ROOT = Path(__file__).resolve().parents[3]
ADMIN = "admin-token-0123456789"
SALES = "sales-token-0123456789"


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path]:
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
    return cert, key


@pytest.fixture
def tokens_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.json"
    path.write_text(
        json.dumps(
            {
                "tokens": [
                    {"name": "admin", "token": ADMIN, "tables": ["*"]},
                    {"name": "sales", "token": SALES, "tables": ["sales.*"]},
                ]
            }
        )
    )
    return path


@pytest.fixture
def secure(
    start_coordinator: Callable[..., RunningServer], tls_files: tuple[Path, Path], tokens_file: Path
) -> RunningServer:
    cert, key = tls_files
    return start_coordinator(
        insecure=False, tls_cert=str(cert), tls_key=str(key), tokens_file=str(tokens_file)
    )


def test_tls_and_tokens(secure: RunningServer, tls_files: tuple[Path, Path], lake: Path) -> None:
    ca = tls_files[0].read_bytes()
    for name in ("orders", "people"):
        HudiTable.create(str(lake / name), name=name, record_key="id")

    with CoordinatorClient(secure.address, root_certificates=ca, token=ADMIN, retries=0) as admin:
        assert admin.register_table("sales.orders", str(lake / "orders")).table_id == "sales.orders"
        assert admin.register_table("hr.people", str(lake / "people")).table_id == "hr.people"

    with CoordinatorClient(secure.address, root_certificates=ca, token=SALES, retries=0) as sales:
        t = sales.begin_instant("sales.orders", "commit").instant.instant_time
        assert len(t) == 17
        with pytest.raises(CoordinatorCallError) as denied:
            sales.describe_table("hr.people")
        assert denied.value.code == grpc.StatusCode.PERMISSION_DENIED and "hr.people" in denied.value.details

    for token, why in ((None, "missing"), ("not-a-known-token", "unknown")):
        with CoordinatorClient(secure.address, root_certificates=ca, token=token, retries=0) as anon:
            with pytest.raises(CoordinatorCallError) as unauth:
                anon.describe_table("sales.orders")
            assert unauth.value.code == grpc.StatusCode.UNAUTHENTICATED and why in unauth.value.details

    # plaintext to a TLS server: no connection
    with CoordinatorClient(secure.address, token=ADMIN, retries=0, timeout_s=3) as plain:
        with pytest.raises(CoordinatorCallError) as refused:
            plain.describe_table("sales.orders")
        assert refused.value.code == grpc.StatusCode.UNAVAILABLE

    # a client that does not trust the certificate: no connection either
    with CoordinatorClient(secure.address, tls=True, token=ADMIN, retries=0, timeout_s=3) as untrusting:
        with pytest.raises(CoordinatorCallError) as untrusted:
            untrusting.describe_table("sales.orders")
        assert untrusted.value.code == grpc.StatusCode.UNAVAILABLE

    # health and reflection need no token
    channel = grpc.secure_channel(secure.address, grpc.ssl_channel_credentials(root_certificates=ca))
    try:
        status = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=5
        )
        assert status.status == health_pb2.HealthCheckResponse.SERVING
        named = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="inlet.proto.coordinator.v1.CoordinatorService"), timeout=5
        )
        assert named.status == health_pb2.HealthCheckResponse.SERVING
        responses = reflection_pb2_grpc.ServerReflectionStub(channel).ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
        )
        services = {s.name for r in responses for s in r.list_services_response.service}
        assert "inlet.proto.coordinator.v1.CoordinatorService" in services
        assert "grpc.health.v1.Health" in services
    finally:
        channel.close()


def test_insecure_refused_unless_loopback(
    pg_url: str, lake: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = CoordinatorConfig(database_url=pg_url, lake_roots=(str(lake),), insecure=True)
    for host in ("0.0.0.0:0", "10.1.2.3:50551", "[::]:0", "coordinator.example.com:50551"):
        with pytest.raises(ConfigError, match="insecure"):
            base.with_(listen=host).validate()
    for host in ("127.0.0.1:0", "[::1]:0", "localhost:50551", "127.0.0.2:1"):
        base.with_(listen=host).validate()
    with pytest.raises(ConfigError, match="TLS is required"):
        base.with_(insecure=False, listen="0.0.0.0:0").validate()

    code = coordinator_main(
        ["serve", "--insecure", "--listen", "0.0.0.0:0", "--database-url", pg_url, "--lake-root", str(lake)]
    )
    err = capsys.readouterr().err
    assert code == 2 and "inlet: error:" in err and "--insecure is refused on 0.0.0.0:0" in err


def test_config_from_environment(pg_url: str, lake: Path) -> None:
    env = {
        "INLET_COORDINATOR_LISTEN": "127.0.0.1:7001",
        "INLET_COORDINATOR_DATABASE_URL": pg_url,
        "INLET_COORDINATOR_LAKE_ROOT": f"{lake},/other",
        "INLET_COORDINATOR_INSECURE": "true",
        "INLET_COORDINATOR_HEARTBEAT_TIMEOUT_MS": "1234",
    }
    config = CoordinatorConfig.from_env(env)
    assert config.listen == "127.0.0.1:7001" and config.lake_roots == (str(lake), "/other")
    assert config.insecure and config.heartbeat_timeout_ms == 1234 and config.database_url == pg_url
    # a flag wins over its variable
    assert CoordinatorConfig.from_env(env, listen="127.0.0.1:7002").listen == "127.0.0.1:7002"
    with pytest.raises(ConfigError, match="INLET_COORDINATOR_HEARTBEAT_TIMEOUT_MS"):
        CoordinatorConfig.from_env({**env, "INLET_COORDINATOR_HEARTBEAT_TIMEOUT_MS": "soon"})


def test_cli_serve_runs_until_sigterm(pg_url: str, lake: Path) -> None:
    """``serve`` from the environment: prints its address, serves, stops cleanly on SIGTERM."""
    HudiTable.create(str(lake / "t"), name="t", record_key="id")
    env = {
        **os.environ,
        "INLET_COORDINATOR_DATABASE_URL": pg_url,
        "INLET_COORDINATOR_LAKE_ROOT": str(lake),
        "INLET_COORDINATOR_INSECURE": "1",
        "INLET_COORDINATOR_KAFKA_BOOTSTRAP": "",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "inlet.services.cli.coordinator", "serve", "--listen", "127.0.0.1:0"],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line, proc.stderr.read() if proc.stderr else ""
        started = json.loads(line)
        assert started["event"] == "serving" and started["address"].startswith("127.0.0.1:")
        with CoordinatorClient(started["address"], retries=0) as c:
            assert c.register_table("t", str(lake / "t")).table_name == "t"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_help_names_every_flag_and_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        coordinator_main(["serve", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for flag, var in (
        ("--listen", "INLET_COORDINATOR_LISTEN"),
        ("--database-url", "INLET_COORDINATOR_DATABASE_URL"),
        ("--kafka-bootstrap", "INLET_COORDINATOR_KAFKA_BOOTSTRAP"),
        ("--lake-root", "INLET_COORDINATOR_LAKE_ROOT"),
        ("--tls-cert", "INLET_COORDINATOR_TLS_CERT"),
        ("--tls-key", "INLET_COORDINATOR_TLS_KEY"),
        ("--tokens", "INLET_COORDINATOR_TOKENS"),
        ("--insecure", "INLET_COORDINATOR_INSECURE"),
        ("--heartbeat-timeout-ms", "INLET_COORDINATOR_HEARTBEAT_TIMEOUT_MS"),
    ):
        assert flag in out and var in out


def test_a_token_is_never_sent_in_plaintext_off_this_host() -> None:
    """A client with a token refuses a plaintext channel to another host (the token would cross
    the network readable); TLS, or a loopback address, is fine. Nothing connects here."""
    from inlet.core import InletError

    for target in ("10.0.0.2:50551", "coordinator.example:50551", "dns:///coord:443"):
        with pytest.raises(
            InletError, match=f"refusing to send the coordinator token in plaintext to {target}"
        ):
            CoordinatorClient(target, token="secret-token")
    for target, tls in (("coordinator.example:50551", True), ("127.0.0.1:50551", False), ("[::1]:1", False)):
        CoordinatorClient(target, token="secret-token", tls=tls).close()
    CoordinatorClient("10.0.0.2:50551").close()  # no token: nothing to leak


def _write_tokens(path: Path, tokens: dict[str, str] | str) -> None:
    """Replace the tokens file the way Kubernetes updates a mounted Secret: a new file renamed over it."""
    text = (
        tokens
        if isinstance(tokens, str)
        else json.dumps({"tokens": [{"name": n, "token": t, "tables": ["*"]} for n, t in tokens.items()]})
    )
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(text)
    os.replace(tmp, path)


def _accepted(address: str, ca: bytes, token: str) -> bool:
    with CoordinatorClient(address, root_certificates=ca, token=token, retries=0) as c:
        try:
            c.describe_table("sales.orders")
            return True
        except CoordinatorCallError as e:
            assert e.code == grpc.StatusCode.UNAUTHENTICATED, e
            return False


def _eventually(condition: Callable[[], bool], what: str, timeout_s: float = 20.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s}s: {what}"
        time.sleep(0.05)


def test_tokens_file_is_reloaded_when_it_changes(
    secure: RunningServer, tls_files: tuple[Path, Path], tokens_file: Path, lake: Path
) -> None:
    """Tokens added to the file are accepted and removed ones refused, without restarting the
    coordinator; a malformed file keeps the tokens in force."""
    ca = tls_files[0].read_bytes()
    HudiTable.create(str(lake / "orders"), name="orders", record_key="id")
    with CoordinatorClient(secure.address, root_certificates=ca, token=ADMIN, retries=0) as admin:
        admin.register_table("sales.orders", str(lake / "orders"))
    added = "added-token-0123456789"
    assert not _accepted(secure.address, ca, added)

    _write_tokens(tokens_file, {"admin": ADMIN, "added": added})  # sales removed, added added
    _eventually(lambda: _accepted(secure.address, ca, added), "the added token is accepted")
    assert not _accepted(secure.address, ca, SALES), "a token removed from the file is still accepted"
    assert _accepted(secure.address, ca, ADMIN)

    # a broken file (a half-written edit) is reported and ignored: the tokens in force stay
    auth = secure.auth
    assert auth is not None
    _write_tokens(tokens_file, '{"tokens": [')
    # (the file is checked on calls)
    _eventually(
        lambda: _accepted(secure.address, ca, added) and auth.source.last_error is not None,
        "the malformed file is noticed",
    )
    assert "tokens.json" in str(auth.source.last_error)
    assert _accepted(secure.address, ca, added) and not _accepted(secure.address, ca, SALES)
    # ... until it is fixed
    _write_tokens(tokens_file, {"admin": ADMIN})
    _eventually(lambda: not _accepted(secure.address, ca, added), "the fixed file is loaded")
    assert auth.source.last_error is None

    # a mounted Kubernetes Secret: tokens.json -> ..data/tokens.json, and an update swaps the ..data link
    def secret_version(name: str, tokens: dict[str, str]) -> None:
        version = tokens_file.parent / name
        version.mkdir()
        _write_tokens(version / "tokens.json", tokens)
        link = tokens_file.parent / "..data_tmp"
        link.symlink_to(name)
        os.replace(link, tokens_file.parent / "..data")

    secret_version("..v1", {"admin": ADMIN})
    staged = tokens_file.with_name("tokens.json.link")
    staged.symlink_to("..data/tokens.json")
    os.replace(staged, tokens_file)
    secret_version("..v2", {"admin": ADMIN, "rotated": "rotated-token-0123456789"})
    _eventually(
        lambda: _accepted(secure.address, ca, "rotated-token-0123456789"), "the swapped Secret is loaded"
    )
