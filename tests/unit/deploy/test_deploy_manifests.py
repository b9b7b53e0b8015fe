"""The production deployment files, checked offline: docker-compose.yml, deploy/Dockerfile, deploy/k8s/.

- docker-compose.yml validates against the Compose Specification's JSON schema (compose-spec.json,
  copied beside this file from github.com/compose-spec/compose-spec; see compose-spec.SOURCE.md), and
  its wiring holds (depends_on targets and conditions, healthchecks, volumes, mounted files).
- Every manifest under deploy/k8s/ validates against the Kubernetes OpenAPI-derived JSON schemas that
  the ``kubernetes-validate`` package ships (strict: unknown fields are errors), and kustomization.yaml
  lists exactly those files.
- Kept in step with the CLI: every ``inlet ...`` command line in these files is parsed by the real
  parser (``build_parser().parse_args``), and every ``INLET_*`` variable they set is one that command
  names in its ``--help`` (``[env: INLET_...]``).
- Every image is pinned (a tag other than ``latest``, or a digest).
- The coordinator's compose health check and Kubernetes probes (deploy/scripts/grpc_healthcheck.py) pass
  against a TLS gRPC health server using the certificates deploy/scripts/init-secrets.sh makes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# all three come with the dev dependency kubernetes-validate
yaml = pytest.importorskip("yaml", reason="needs PyYAML (comes with the dev dependency kubernetes-validate)")
jsonschema = pytest.importorskip("jsonschema", reason="needs jsonschema (comes with kubernetes-validate)")
kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="needs the dev dependency kubernetes-validate (Kubernetes JSON schemas)"
)

from inlet.services.cli.main import build_parser  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DEPLOY = ROOT / "deploy"
DOCKERFILE = DEPLOY / "Dockerfile"
K8S = DEPLOY / "k8s"
SCRIPTS = DEPLOY / "scripts"
# the oldest Kubernetes minor the manifests must be valid for (kubernetes-validate picks the newest
# schema set not newer than this)
K8S_VERSION = "1.30.0"
INLET_IMAGE = re.compile(r"^(?:.*/)?inlet(?:-spark)?(?::|@|$)")
ENV_IN_HELP = re.compile(r"\[env: (INLET_[A-Z0-9_]+)\]")


# ------------------------------------------------------------------------------ loading


def load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


_INTERPOLATION = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def interpolate(value: Any, environ: dict[str, str] | None = None) -> Any:
    """Compose's variable interpolation (``${VAR}``, ``${VAR:-default}``, ``$$``) with no variables set."""
    env = environ or {}
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            if m.group(0) == "$$":
                return "$"
            name = m.group(1) or m.group(3)
            return env.get(name) or (m.group(2) or "")

        return _INTERPOLATION.sub(sub, value)
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    return value


def compose() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(doc, dict)
    return doc


def k8s_files() -> list[Path]:
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def k8s_docs() -> list[tuple[Path, dict[str, Any]]]:
    return [(p, d) for p in k8s_files() for d in load_yaml_docs(p)]


def pod_spec(doc: dict[str, Any]) -> dict[str, Any] | None:
    kind = doc.get("kind")
    if kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"):
        return doc["spec"]["template"]["spec"]
    if kind == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    if kind == "Pod":
        return doc["spec"]
    return None


@dataclass
class Dockerfile:
    args: dict[str, str] = field(default_factory=dict)
    from_images: list[str] = field(default_factory=list)  # external images (not earlier stages)
    stages: dict[str, str] = field(default_factory=dict)  # stage name -> its instructions' text
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None


def parse_dockerfile(path: Path) -> Dockerfile:
    """The few instructions the checks need (ARG defaults, FROM, ENV, ENTRYPOINT, CMD)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = Dockerfile()
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instr, _, rest = line.partition(" ")
        instr, rest = instr.upper(), rest.strip()
        if out.stages and instr != "FROM":
            out.stages[current] += line + "\n"
        if instr == "ARG" and "=" in rest:
            k, _, v = rest.partition("=")
            out.args.setdefault(k.strip(), v.strip().strip('"'))
        elif instr == "FROM":
            words = [w for w in rest.split() if not w.startswith("--")]
            image = re.sub(
                r"\$\{(\w+)\}|\$(\w+)", lambda m: out.args.get(m.group(1) or m.group(2), ""), words[0]
            )
            if image not in out.stages:
                out.from_images.append(image)
            stage = words[2] if len(words) >= 3 and words[1].upper() == "AS" else f"#{len(out.stages)}"
            out.stages[stage] = ""
            current = stage
        elif instr == "ENV":
            for word in shlex.split(rest):
                k, _, v = word.partition("=")
                out.env[k] = v
        elif instr in ("ENTRYPOINT", "CMD"):
            value = json.loads(rest)  # exec form only: a shell form would hide the command
            assert isinstance(value, list), f"{instr} must use the exec (JSON) form"
            if instr == "ENTRYPOINT":
                out.entrypoint = value
            else:
                out.cmd = value
    return out


# ------------------------------------------------------------------------------ command lines


@dataclass(frozen=True)
class CommandLine:
    origin: str
    argv: tuple[str, ...]
    env: tuple[str, ...]  # names of the variables the process gets from the file


def compose_command_lines() -> Iterator[CommandLine]:
    for name, svc in compose()["services"].items():
        image = svc.get("image", "")
        if not INLET_IMAGE.match(image) or "entrypoint" in svc:
            continue  # not an Inlet process, or the image's ENTRYPOINT ["inlet"] is replaced
        command = svc.get("command")
        assert isinstance(command, list), f"compose service {name}: give `command` as a list"
        env = svc.get("environment") or {}
        names = env.keys() if isinstance(env, dict) else [e.partition("=")[0] for e in env]
        yield CommandLine(f"docker-compose.yml:{name}", tuple(interpolate(command)), tuple(names))


def dockerfile_command_lines() -> Iterator[CommandLine]:
    df = parse_dockerfile(DOCKERFILE)
    assert df.entrypoint == ["inlet"], (
        f'deploy/Dockerfile: ENTRYPOINT should be ["inlet"], is {df.entrypoint}'
    )
    # the variables the images' processes get: ENV of the runtime stages (not of the build stages)
    runtime_env = [
        word.partition("=")[0]
        for stage, text in df.stages.items()
        if not stage.startswith("build")
        for line in text.splitlines()
        if line.startswith("ENV ")
        for word in shlex.split(line[4:])
    ]
    assert runtime_env, "deploy/Dockerfile: no ENV in the runtime stages"
    yield CommandLine("deploy/Dockerfile:CMD", tuple(df.cmd or ()), tuple(runtime_env))


def k8s_env_sources() -> dict[tuple[str, str], list[str]]:
    """(kind, name) of every ConfigMap and Secret in deploy/k8s -> its keys."""
    out: dict[tuple[str, str], list[str]] = {}
    for _path, doc in k8s_docs():
        if doc.get("kind") in ("ConfigMap", "Secret"):
            keys = [*(doc.get("data") or {}), *(doc.get("stringData") or {})]
            out[(doc["kind"], doc["metadata"]["name"])] = keys
    return out


def k8s_command_lines() -> Iterator[CommandLine]:
    sources = k8s_env_sources()
    for path, doc in k8s_docs():
        spec = pod_spec(doc)
        if spec is None:
            continue
        for c in [*spec.get("initContainers", []), *spec["containers"]]:
            if not INLET_IMAGE.match(c["image"]) or "command" in c:
                continue
            names = [e["name"] for e in c.get("env", [])]
            for ref in c.get("envFrom", []):
                # a Secret's keys are the user's (not in deploy/k8s): name each variable (env valueFrom)
                assert "configMapRef" in ref, (
                    f"{path.name}: {c['name']}: envFrom a Secret hides its variables"
                )
                src = ("ConfigMap", ref["configMapRef"]["name"])
                assert src in sources, f"{path.name}: {c['name']} takes envFrom {src}, which deploy/k8s lacks"
                prefix = ref.get("prefix", "")
                names += [prefix + k for k in sources[src]]
            origin = f"deploy/k8s/{path.name}:{doc['metadata']['name']}/{c['name']}"
            yield CommandLine(origin, tuple(c.get("args", [])), tuple(names))


def all_command_lines() -> list[CommandLine]:
    return [*compose_command_lines(), *dockerfile_command_lines(), *k8s_command_lines()]


def subparser_chain(argv: tuple[str, ...]) -> list[argparse.ArgumentParser]:
    """The root parser and each sub-command parser that ``argv`` selects."""
    chain: list[argparse.ArgumentParser] = [build_parser()]
    words = [w for w in argv if not w.startswith("-")]
    while True:
        subs = [a for a in chain[-1]._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or not words:
            return chain
        word = words.pop(0)
        if word not in subs[0].choices:
            return chain
        chain.append(subs[0].choices[word])


def variables_read_by(argv: tuple[str, ...]) -> set[str]:
    """The INLET_* variables the selected command (and the global options) name in their help."""
    names: set[str] = set()
    for parser in subparser_chain(argv):
        for action in parser._actions:
            names.update(ENV_IN_HELP.findall(action.help or ""))
    return names


def command_missing(argv: tuple[str, ...]) -> bool:
    """True if ``argv`` names a sub-command this CLI does not have (yet)."""
    words = [w for w in argv if not w.startswith("-")]
    chain = subparser_chain(argv)
    has_subcommands = any(isinstance(a, argparse._SubParsersAction) for a in chain[-1]._actions)
    # the chain stops early when a command word is unknown to a parser that has sub-commands
    return has_subcommands and len(words) >= len(chain)


# Commands written while these files were (``inlet cdc run``, ``inlet writer run``): a line that
# runs one of them is skipped, not failed, on a tree that does not have it yet. Any other unknown
# command (a typo) fails.
IN_PROGRESS = {("cdc", "run"), ("writer", "run")}
# every long-running Inlet service, each deployed by compose and by the Kubernetes manifests
SERVICE_COMMANDS = (
    ("coordinator", "serve"),
    ("cdc", "run"),
    ("writer", "run"),
    ("table-services", "run"),
    ("catalog", "run"),
)


def command_params() -> list[Any]:
    params = []
    for cl in all_command_lines():
        missing = cl.argv[:2] in IN_PROGRESS and command_missing(cl.argv)
        params.append(
            pytest.param(
                cl,
                id=cl.origin,
                marks=pytest.mark.skipif(
                    missing, reason=f"`inlet {' '.join(cl.argv[:2])}` does not exist in this CLI yet"
                ),
            )
        )
    return params


@pytest.mark.parametrize("line", command_params())
def test_command_line_parses_with_the_real_cli(line: CommandLine) -> None:
    parser = build_parser()
    if "--help" in line.argv or "-h" in line.argv:
        with pytest.raises(SystemExit) as e:
            parser.parse_args(list(line.argv))
        assert e.value.code == 0
        return
    try:
        args = parser.parse_args(list(line.argv))
    except SystemExit as e:  # pragma: no cover - argparse exits only on --help/--version
        pytest.fail(f"{line.origin}: `inlet {shlex.join(line.argv)}` exited {e.code}")
    except Exception as e:
        pytest.fail(f"{line.origin}: `inlet {shlex.join(line.argv)}` is rejected by the CLI: {e}")
    assert callable(getattr(args, "handler", None)), f"{line.origin}: {line.argv} names no runnable command"


@pytest.mark.parametrize("line", command_params())
def test_inlet_variables_are_read_by_their_command(line: CommandLine) -> None:
    known = variables_read_by(line.argv)
    unknown = sorted(n for n in line.env if n.startswith("INLET_") and n not in known)
    assert not unknown, (
        f"{line.origin}: `inlet {' '.join(line.argv[:2])}` reads none of {unknown}; it reads {sorted(known)}"
    )


# variables an Inlet process reads through the libraries it runs, not through its own settings
THIRD_PARTY_VARIABLES = {
    "AWS_EC2_METADATA_DISABLED": "the AWS SDK inside pyarrow (no instance-metadata lookups off EC2)",
    "JAVA_HOME": "PySpark starts its JVM from it",
    "PYSPARK_PYTHON": "PySpark's Python workers",
    "SPARK_LOCAL_DIRS": "Spark's scratch space",
    "PYTHONUNBUFFERED": "Python",
    "PATH": "the shell",
}


def s3_variables() -> set[str]:
    """The variables inlet.core.s3 reads (S3 settings of every process that opens s3:// tables)."""
    from inlet.core.s3 import S3Config

    keys = [v for v in vars(S3Config).values() if hasattr(v, "key") and hasattr(v, "alternatives")]
    assert len(keys) >= 5
    return {name for k in keys for name in (k.key, *k.alternatives)}


@pytest.mark.parametrize("line", command_params())
def test_other_variables_are_read_by_the_process(line: CommandLine) -> None:
    """Every variable that is not an INLET_* setting is one Inlet's S3 settings or a library it runs read."""
    known = s3_variables() | set(THIRD_PARTY_VARIABLES)
    unknown = sorted(n for n in line.env if not n.startswith("INLET_") and n not in known)
    assert not unknown, f"{line.origin}: nothing in `inlet {' '.join(line.argv[:2])}` reads {unknown}"


def test_every_inlet_service_is_covered() -> None:
    lines = all_command_lines()
    commands = {tuple(w for w in cl.argv if not w.startswith("-"))[:2] for cl in lines}
    for expected in SERVICE_COMMANDS:
        assert expected in commands, f"no compose or k8s service runs `inlet {' '.join(expected)}`"
    origins = {cl.origin.split(":")[0] for cl in lines}
    assert origins >= {"docker-compose.yml", "deploy/Dockerfile"} and any(
        o.startswith("deploy/k8s/") for o in origins
    )
    # compose and Kubernetes each run every service (the tables are maintained and catalogued in both)
    for where, found in (
        ("docker-compose.yml", compose_command_lines()),
        ("deploy/k8s", k8s_command_lines()),
    ):
        runs = {cl.argv[:2] for cl in found}
        missing = [" ".join(c) for c in SERVICE_COMMANDS if c not in runs]
        assert not missing, f"{where} runs no `inlet {'`, `inlet '.join(missing)}`"


# ------------------------------------------------------------------------------ compose


def compose_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((Path(__file__).parent / "compose-spec.json").read_text())
    return schema


def schema_errors(schema: dict[str, Any], instance: Any) -> list[str]:
    meta = str(schema.get("$schema", ""))
    if "draft-07" in meta:
        cls: Any = jsonschema.Draft7Validator
    elif "2020-12" in meta:
        cls = jsonschema.Draft202012Validator
    else:
        cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    validator = cls(schema, format_checker=cls.FORMAT_CHECKER)
    return [
        f"{'/'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
        for e in sorted(validator.iter_errors(instance), key=lambda e: list(map(str, e.absolute_path)))
    ]


def test_compose_file_matches_the_compose_specification() -> None:
    errors = schema_errors(compose_schema(), interpolate(compose()))
    assert not errors, "docker-compose.yml does not follow the Compose Specification:\n" + "\n".join(errors)


def test_compose_schema_catches_mistakes() -> None:
    """The schema really checks services (a typo'd key and a bad depends_on condition fail)."""
    doc = interpolate(compose())
    doc["services"]["kafka"]["helthcheck"] = {}
    doc["services"]["writer"]["depends_on"]["kafka"]["condition"] = "service_ready"
    errors = schema_errors(compose_schema(), doc)
    assert any("helthcheck" in e for e in errors) and any("service_ready" in e for e in errors), errors


def test_compose_wiring() -> None:
    doc = interpolate(compose())
    services: dict[str, dict[str, Any]] = doc["services"]
    declared_volumes = set(doc.get("volumes") or {})
    declared_secrets = doc.get("secrets") or {}
    for name, svc in services.items():
        one_shot = svc.get("restart") == "no"
        if not one_shot:
            assert "healthcheck" in svc, f"long-running service {name} has no healthcheck"
            assert svc.get("restart") in ("unless-stopped", "always", "on-failure"), name
        deps = svc.get("depends_on") or {}
        assert isinstance(deps, dict), f"{name}: depends_on should name a condition for each service"
        for dep, spec in deps.items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            condition = spec.get("condition")
            if condition == "service_healthy":
                assert "healthcheck" in services[dep], (
                    f"{name} waits for {dep} to be healthy; it has no check"
                )
            elif condition == "service_completed_successfully":
                assert services[dep].get("restart") == "no", (
                    f"{name} waits for one-shot {dep}, which restarts"
                )
            else:
                pytest.fail(f"{name} depends on {dep} with condition {condition!r}")
        for vol in svc.get("volumes", []):
            source = vol.split(":")[0] if isinstance(vol, str) else vol.get("source")
            if isinstance(vol, dict) and vol.get("type") == "bind" and source.startswith("${"):
                continue  # a host file the operator's environment names (the metastore's JDBC driver)
            if source.startswith("."):
                assert (ROOT / source).exists(), f"{name} mounts {source}, which does not exist"
            else:
                assert source in declared_volumes, (
                    f"{name} uses volume {source}, not declared at the top level"
                )
        for sec in svc.get("secrets", []):
            src = sec if isinstance(sec, str) else sec["source"]
            assert src in declared_secrets, f"{name} uses undeclared secret {src}"
    for name, sec in declared_secrets.items():
        if "file" in sec:
            assert (ROOT / sec["file"]).is_file(), f"secret {name}: {sec['file']} does not exist"
    # the image Inlet's services share is built from deploy/Dockerfile
    builds = {s["build"]["dockerfile"] for s in services.values() if "build" in s}
    assert builds == {"deploy/Dockerfile"}
    # the source database is set up for logical decoding
    pg = services["postgres"]
    assert "wal_level=logical" in pg["command"]


def test_connector_config_and_cdc_consumer_agree() -> None:
    connector = json.loads((DEPLOY / "connect" / "postgres-connector.json").read_text())
    cfg = connector["config"]
    assert connector["name"]
    assert cfg["connector.class"] == "io.debezium.connector.postgresql.PostgresConnector"
    assert cfg["plugin.name"] == "pgoutput"
    assert cfg["provide.transaction.metadata"] == "true"
    assert int(cfg["heartbeat.interval.ms"]) > 0
    from inlet.services.stack.debezium import (
        PRODUCER_SETTINGS,
        STACK_CONNECTOR_SETTINGS,
        STACK_SCHEMAS_ENABLE,
    )

    for side in ("key", "value"):
        assert cfg[f"{side}.converter"] == "org.apache.kafka.connect.json.JsonConverter"
        assert cfg[f"{side}.converter.schemas.enable"] == str(STACK_SCHEMAS_ENABLE).lower()
    # Debezium's batching and the producer's compression as `inlet stack up` runs them (issue #23)
    assert STACK_CONNECTOR_SETTINGS.items() <= cfg.items()
    connect_env = interpolate(compose())["services"]["connect"]["environment"]
    for key in (
        "producer.enable.idempotence",
        "producer.acks",
        "producer.compression.type",
        "producer.linger.ms",
        "producer.batch.size",
    ):
        env = "CONNECT_" + key.upper().replace(".", "_")
        assert str(connect_env.get(env)) == PRODUCER_SETTINGS[key], env
    assert cfg["slot.name"] and cfg["publication.name"]
    # Debezium skips TRUNCATE unless told otherwise (its default is "t"): the lake would keep the rows
    assert "t" not in cfg["skipped.operations"].split(","), "the connector skips TRUNCATE"
    cdc = next(cl for cl in compose_command_lines() if cl.argv[:2] == ("cdc", "run"))
    argv = list(cdc.argv)
    assert argv[argv.index("--topic-prefix") + 1] == cfg["topic.prefix"]
    pattern = re.compile(argv[argv.index("--topic-pattern") + 1])
    prefix = cfg["topic.prefix"]
    for topic in (f"{prefix}.public.customers", f"{prefix}.transaction"):
        assert pattern.search(topic), f"--topic-pattern {pattern.pattern} misses Debezium's {topic}"
    # the heartbeat action writes the table the init script creates
    init_sql = (DEPLOY / "postgres" / "initdb" / "01-inlet.sql").read_text()
    table = re.search(r"INSERT INTO ([\w.]+)", cfg["heartbeat.action.query"]).group(1)  # type: ignore[union-attr]
    assert f"CREATE TABLE IF NOT EXISTS {table}" in init_sql
    # Debezium and the CDC consumer connect as the least-privilege role of deploy/sql/replication-role.sql
    # (made by the compose initdb script, with the publication the connector then uses as it is), not as
    # the superuser POSTGRES_USER
    pg = interpolate(compose())["services"]["postgres"]
    assert cfg["database.user"] != pg["environment"]["POSTGRES_USER"]
    role_script = (DEPLOY / "postgres" / "initdb" / "02-replication-role.sh").read_text()
    assert "/inlet-sql/replication-role.sql" in role_script and "./deploy/sql:/inlet-sql:ro" in pg["volumes"]
    assert f"role={cfg['database.user']}" in role_script
    assert f"publication={cfg['publication.name']}" in role_script
    assert cfg["publication.autocreate.mode"] == "disabled"  # the role may not create nor alter it
    cdc_url = interpolate(compose())["services"]["cdc-consumer"]["environment"]["INLET_CDC_DATABASE_URL"]
    assert cdc_url.startswith(f"postgresql://{cfg['database.user']}:")
    props = (DEPLOY / "connect" / "postgres.properties").read_text()
    assert f"password={pg['environment']['REPLICATION_PASSWORD']}" in props.splitlines()
    # inlet backfill (issue #24): the signal table the init script creates and the CDC consumer drops
    # (its default --signal-table), notifications where `inlet backfill --topic-prefix` reads them
    from inlet.services import backfill
    from inlet.services.cdc_consumer.settings import DEFAULT_SIGNAL_TABLE

    assert "--signal-table" not in argv and cfg["signal.data.collection"] == DEFAULT_SIGNAL_TABLE
    assert f"CREATE TABLE IF NOT EXISTS {cfg['signal.data.collection']}" in init_sql
    assert backfill.connector_settings(prefix).items() <= cfg.items()
    # the coordinator's database exists
    coord_url = compose()["services"]["coordinator"]["environment"]["INLET_COORDINATOR_DATABASE_URL"]
    assert f"CREATE DATABASE {coord_url.rsplit('/', 1)[1]}" in init_sql


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_compose_services_agree_with_each_other() -> None:
    services = interpolate(compose())["services"]
    coord, writer = services["coordinator"], services["writer"]
    # the writer commits under the coordinator's lake root, at the address it listens on
    assert _flag(writer["command"], "--lake-root") == _flag(coord["command"], "--lake-root")
    host, port = _flag(writer["command"], "--coordinator").rsplit(":", 1)
    assert host == "coordinator" and port == _flag(coord["command"], "--listen").rsplit(":", 1)[1]
    # ... with the token file that init-secrets.sh writes beside the coordinator's tokens file
    secrets_volume = "inlet-secrets:/var/lib/inlet/secrets:ro"
    assert (
        writer["environment"]["INLET_WRITER_COORDINATOR_TOKEN_FILE"] == "/var/lib/inlet/secrets/writer.token"
    )
    assert (
        secrets_volume in writer["volumes"] and "INLET_WRITER_COORDINATOR_TOKEN" not in writer["environment"]
    )
    # the table services commit through the same coordinator, with the token init-secrets.sh makes
    ts = services["table-services"]
    assert _flag(ts["command"], "--coordinator") == _flag(writer["command"], "--coordinator")
    ts_token = ts["environment"]["INLET_TABLE_SERVICES_COORDINATOR_TOKEN_FILE"]
    assert ts_token == "/var/lib/inlet/secrets/table-services.token" and secrets_volume in ts["volumes"]
    assert ts["environment"]["INLET_TABLE_SERVICES_COORDINATOR_CA"].startswith("/var/lib/inlet/secrets/")
    assert "coordinator" in ts["depends_on"]
    # catalog sync talks to the compose metastore, on the port it serves
    catalog, hms = services["catalog-sync"], services["hive-metastore"]
    host, hms_port = _flag(catalog["command"], "--metastore").removeprefix("thrift://").rsplit(":", 1)
    assert host == "hive-metastore" and f"/{hms_port}" in " ".join(hms["healthcheck"]["test"])
    assert "hive-metastore" in catalog["depends_on"]
    # every service that follows Kafka uses the same bootstrap servers
    bootstrap = _flag(coord["command"], "--kafka-bootstrap")
    for name in ("cdc-consumer", "writer", "table-services", "catalog-sync"):
        assert _flag(services[name]["command"], "--kafka-bootstrap") == bootstrap, name
    # the health checks probe the ports the services listen on
    assert _flag(coord["healthcheck"]["test"], "--address").endswith(":" + port)
    for name in ("cdc-consumer", "writer", "table-services", "catalog-sync"):
        listen_port = _flag(services[name]["command"], "--metrics-listen").rsplit(":", 1)[1]
        assert f"127.0.0.1:{listen_port}/healthz" in " ".join(services[name]["healthcheck"]["test"])
        published = [p.rsplit(":", 1)[1] for p in services[name]["ports"]]
        assert published == [listen_port], f"{name} publishes {published}, serves {listen_port}"


def test_k8s_services_agree_with_each_other() -> None:
    maps = {d["metadata"]["name"]: d.get("data", {}) for _p, d in k8s_docs() if d["kind"] == "ConfigMap"}
    coord, writer = maps["inlet-coordinator"], maps["inlet-writer"]
    assert writer["INLET_WRITER_LAKE_ROOT"] in coord["INLET_COORDINATOR_LAKE_ROOT"].split(",")
    service = next(
        d for _p, d in k8s_docs() if d["kind"] == "Service" and d["metadata"]["name"] == "inlet-coordinator"
    )
    host, port = writer["INLET_WRITER_COORDINATOR"].rsplit(":", 1)
    assert host == service["metadata"]["name"] and int(port) == service["spec"]["ports"][0]["port"]
    assert coord["INLET_COORDINATOR_LISTEN"].endswith(":" + port)
    # the writer and the table services commit through the same coordinator, trusting its CA, each
    # with a token of its own read from a file mounted from its Secret
    ts = maps["inlet-table-services"]
    assert ts["INLET_TABLE_SERVICES_COORDINATOR"] == writer["INLET_WRITER_COORDINATOR"]
    assert ts["INLET_TABLE_SERVICES_COORDINATOR_CA"] == writer["INLET_WRITER_COORDINATOR_CA"]
    token_secrets = {
        name: mounted_secret(deployment(name), maps[name][f"{prefix}COORDINATOR_TOKEN_FILE"])
        for name, prefix in (
            ("inlet-writer", "INLET_WRITER_"),
            ("inlet-table-services", "INLET_TABLE_SERVICES_"),
        )
    }
    assert len(set(token_secrets.values())) == 2, token_secrets
    for name, prefix in (
        ("inlet-writer", "INLET_WRITER_"),
        ("inlet-table-services", "INLET_TABLE_SERVICES_"),
    ):
        assert mounted_secret(deployment(name), maps[name][f"{prefix}COORDINATOR_CA"]) == (
            "inlet-coordinator-tls",
            "ca.crt",
        )
    # the coordinator's tokens file is a whole mounted Secret (no subPath: updates reach the pod)
    assert mounted_secret(deployment("inlet-coordinator"), coord["INLET_COORDINATOR_TOKENS"]) == (
        "inlet-coordinator-tokens",
        "tokens.json",
    )
    # every service that follows Kafka uses the coordinator's brokers
    bootstrap = coord["INLET_COORDINATOR_KAFKA_BOOTSTRAP"]
    for name, key in (
        ("inlet-cdc-consumer", "INLET_CDC_KAFKA_BOOTSTRAP"),
        ("inlet-writer", "INLET_WRITER_KAFKA_BOOTSTRAP"),
        ("inlet-table-services", "INLET_TABLE_SERVICES_KAFKA_BOOTSTRAP"),
        ("inlet-catalog-sync", "INLET_CATALOG_KAFKA_BOOTSTRAP"),
    ):
        assert maps[name][key] == bootstrap, name
    assert maps["inlet-catalog-sync"]["INLET_CATALOG_METASTORE"].startswith("thrift://")


def deployment(name: str) -> dict[str, Any]:
    return next(d for _p, d in k8s_docs() if d["kind"] == "Deployment" and d["metadata"]["name"] == name)


def mounted_secret(doc: dict[str, Any], path: str) -> tuple[str, str]:
    """(Secret name, key) of the file ``path`` in the Deployment's container, from its volume mounts."""
    spec = pod_spec(doc)
    assert spec is not None
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for c in spec["containers"]:
        for m in c.get("volumeMounts", []):
            prefix = m["mountPath"].rstrip("/") + "/"
            if not path.startswith(prefix):
                continue
            assert "subPath" not in m, (
                f"{doc['metadata']['name']}: {path} is mounted by subPath (never updated)"
            )
            secret = volumes[m["name"]].get("secret")
            assert secret, f"{doc['metadata']['name']}: {path} is not in a Secret volume"
            file = path[len(prefix) :]
            items = {i["path"]: i["key"] for i in secret.get("items", [])}
            return secret["secretName"], items.get(file, file) if items else file
    raise AssertionError(f"{doc['metadata']['name']}: nothing mounts {path}")


def test_writer_table_config_is_valid_and_the_same_everywhere() -> None:
    from inlet.services.writer import tables

    path = DEPLOY / "config" / "tables.json"
    assert tables.load_rules(str(path))
    k8s_copy = next(
        d
        for _p, d in k8s_docs()
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "inlet-writer-tables"
    )
    assert json.loads(k8s_copy["data"]["tables.json"]) == json.loads(path.read_text())


# ------------------------------------------------------------------------------ Kubernetes


@pytest.mark.parametrize("path", k8s_files(), ids=lambda p: p.name)
def test_k8s_manifest_matches_the_kubernetes_schemas(path: Path) -> None:
    docs = load_yaml_docs(path)
    assert docs, f"{path.name} is empty"
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            where = "/".join(str(p) for p in e.caught.path)
            pytest.fail(
                f"{path.name}: {doc.get('kind')} {doc['metadata'].get('name')}: {where}: {e.caught.message}"
            )


def test_k8s_schemas_catch_mistakes() -> None:
    _path, deployment = next((p, d) for p, d in k8s_docs() if d["kind"] == "Deployment")
    bad = json.loads(json.dumps(deployment))
    bad["spec"]["template"]["spec"]["containers"][0]["livenessprobe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_kustomization_lists_every_manifest() -> None:
    k = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert k["apiVersion"] == "kustomize.config.k8s.io/v1beta1" and k["kind"] == "Kustomization"
    assert sorted(k["resources"]) == sorted(p.name for p in k8s_files())
    assert {i["name"] for i in k.get("images", [])} == {"inlet", "inlet-spark"}


def test_k8s_workloads_have_probes_resources_and_scrape_annotations() -> None:
    docs = k8s_docs()
    services = {d["metadata"]["name"]: d for _p, d in docs if d["kind"] == "Service"}
    workloads = [(p, d) for p, d in docs if pod_spec(d) is not None]
    assert {d["metadata"]["name"] for _p, d in workloads} >= {
        "inlet-coordinator",
        "inlet-cdc-consumer",
        "inlet-writer",
        "inlet-table-services",
        "inlet-catalog-sync",
    }
    for path, doc in workloads:
        spec = pod_spec(doc)
        assert spec is not None
        where = f"{path.name}:{doc['metadata']['name']}"
        assert spec["securityContext"]["runAsNonRoot"] is True, where
        for c in spec["containers"]:
            for probe in ("livenessProbe", "readinessProbe"):
                assert probe in c, f"{where}/{c['name']} has no {probe}"
            res = c["resources"]
            assert {"cpu", "memory"} <= set(res["requests"]) and {"cpu", "memory"} <= set(res["limits"]), (
                where
            )
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
            if "metrics" in ports:  # Prometheus scrape annotations
                if "grpc" not in ports:  # an HTTP service: split probes
                    # restarted only when its loop stopped turning (/livez), never for a dependency's
                    # outage, which only makes it not ready (/readyz)
                    assert c["livenessProbe"]["httpGet"]["path"] == "/livez", where
                    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz", where
                ann = doc["spec"]["template"]["metadata"].get("annotations", {})
                assert ann.get("prometheus.io/scrape") == "true", where
                assert ann.get("prometheus.io/port") == str(ports["metrics"]), where
                assert ann.get("prometheus.io/path") == "/metrics", where
            if "grpc" in ports:  # the coordinator: gRPC health checks, a Service in front
                for probe in ("livenessProbe", "readinessProbe"):
                    cmd = c[probe]["exec"]["command"]
                    assert cmd[:2] == ["python", "/opt/inlet/scripts/grpc_healthcheck.py"], where
                svc = services[doc["metadata"]["name"]]
                assert (
                    svc["spec"]["selector"].items() <= doc["spec"]["template"]["metadata"]["labels"].items()
                )
                assert svc["spec"]["ports"][0]["targetPort"] == "grpc"


def k8s_container_env(container: dict[str, Any]) -> dict[str, str]:
    """The values a container's ``env``/``envFrom`` give it from the ConfigMaps in deploy/k8s (Secrets'
    values are the user's: left out)."""
    maps = {d["metadata"]["name"]: d.get("data", {}) for _p, d in k8s_docs() if d["kind"] == "ConfigMap"}
    env: dict[str, str] = {}
    for ref in container.get("envFrom", []):
        if "configMapRef" in ref:
            env.update({ref.get("prefix", "") + k: v for k, v in maps[ref["configMapRef"]["name"]].items()})
    env.update({e["name"]: e["value"] for e in container.get("env", []) if "value" in e})
    return env


def http_probed_containers() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path, doc in k8s_docs():
        for c in (pod_spec(doc) or {}).get("containers", []):
            if any("httpGet" in c.get(p, {}) for p in PROBES):
                out.append((f"{path.name}:{c['name']}", c))
    return out


PROBES = ("startupProbe", "readinessProbe", "livenessProbe")


def metrics_listen_port(container: dict[str, Any]) -> int:
    """The port the container's Inlet process serves /metrics and its health paths on."""
    listen = [v for k, v in k8s_container_env(container).items() if k.endswith("_METRICS_LISTEN")]
    assert len(listen) == 1, f"{container['name']}: set the service's *_METRICS_LISTEN once, found {listen}"
    return int(listen[0].rsplit(":", 1)[1])


@pytest.mark.parametrize(
    "where,container", http_probed_containers(), ids=lambda v: v if isinstance(v, str) else ""
)
def test_k8s_http_probes_target_the_port_the_service_listens_on(
    where: str, container: dict[str, Any]
) -> None:
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    serves = metrics_listen_port(container)
    for probe in PROBES:
        target = container[probe]["httpGet"]["port"]
        number = ports[target] if isinstance(target, str) else target
        assert number == serves, f"{where}: {probe} probes port {number}; the service listens on {serves}"


# services whose real process serves its HTTP endpoint here in a second without Kafka (the writer
# starts Spark first; the cdc consumer announces itself once Kafka answers)
LIGHT_SERVICES = {("table-services", "run"), ("catalog", "run")}


@pytest.mark.parametrize(
    "where,container",
    [(w, c) for w, c in http_probed_containers() if tuple(c["args"][:2]) in LIGHT_SERVICES],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_k8s_http_probe_paths_are_served_by_the_real_service(
    where: str, container: dict[str, Any], tmp_path: Path
) -> None:
    """The container's command, with its ConfigMap's settings, started for real: every path its probes
    ask for is answered (200 or 503 while Kafka, here unreachable, is missing), none is a 404."""
    import urllib.error
    import urllib.request

    env = {k: v for k, v in os.environ.items() if not k.startswith(("INLET_", "AWS_"))}
    for k, v in k8s_container_env(container).items():
        if k.endswith(("_BOOTSTRAP", "_COORDINATOR")):
            v = "127.0.0.1:9"  # nothing listens: the service runs (and reports) without it
        elif k.endswith("_METRICS_LISTEN"):
            v = "127.0.0.1:0"
        elif k.endswith("_METASTORE"):
            v = "thrift://127.0.0.1:9"
        elif k.endswith(("_CA", "_TOKEN", "_TOKEN_FILE", "_DATABASE_URL")) or v.startswith("/etc/"):
            continue  # files and secrets of the pod
        env[k] = v
    inlet = Path(sys.executable).with_name("inlet")
    log = tmp_path / "stderr.log"  # a file: librdkafka's retries would fill a pipe
    with log.open("w") as err:
        proc = subprocess.Popen(
            [str(inlet), *container["args"]],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    try:
        line = _first_line(proc)
        assert line, (
            f"{where}: `inlet {' '.join(container['args'])}` did not start: {log.read_text()[-2000:]}"
        )
        address = json.loads(line)["metrics"]
        for probe in PROBES:
            path = container[probe]["httpGet"]["path"]
            try:
                with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as reply:
                    status = reply.status
            except urllib.error.HTTPError as e:
                status = e.code
            assert status in (200, 503), f"{where}: {probe} asks for {path}; the service answers {status}"
    finally:
        _stop(proc)


# ------------------------------------------------------------------------------ Kubernetes secrets

DOCS = ROOT / "docs" / "deployment.md"
# what a value someone forgot to replace looks like
PLACEHOLDER = re.compile(r"change[-_ ]?me|placeholder|replace[-_ ]?me|todo|xxx|<[^>]*>|\.\.\.|^$", re.I)


def kustomized(kustomization: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The documents a kustomization's resources hold (following nested kustomizations) and its
    secretGenerator entries."""
    k = yaml.safe_load(kustomization.read_text())
    docs: list[dict[str, Any]] = []
    generators: list[dict[str, Any]] = list(k.get("secretGenerator") or [])
    for entry in [*(k.get("resources") or []), *(k.get("components") or [])]:
        target = kustomization.parent / entry
        if target.is_dir():
            inner_docs, inner_generators = kustomized(target / "kustomization.yaml")
            docs += inner_docs
            generators += inner_generators
        else:
            docs += load_yaml_docs(target)
    return docs, generators


def placeholder_secrets(docs: list[dict[str, Any]], generators: list[dict[str, Any]]) -> list[str]:
    """Secrets (and generated ones) holding a value that looks like a placeholder."""
    import base64

    found = []
    for d in docs:
        if d.get("kind") != "Secret":
            continue
        values = {**(d.get("stringData") or {})}
        values.update(
            {k: base64.b64decode(v).decode(errors="replace") for k, v in (d.get("data") or {}).items()}
        )
        found += [
            f"Secret {d['metadata']['name']}: {k}" for k, v in values.items() if PLACEHOLDER.search(str(v))
        ]
    for g in generators:
        for literal in g.get("literals") or []:
            k, _, v = literal.partition("=")
            if PLACEHOLDER.search(v):
                found.append(f"secretGenerator {g.get('name')}: {k}")
    return found


def test_kubectl_apply_k_deploys_no_placeholder_secret() -> None:
    docs, generators = kustomized(K8S / "kustomization.yaml")
    assert {d["kind"] for d in docs} >= {"Deployment", "ConfigMap"}
    assert not placeholder_secrets(docs, generators), placeholder_secrets(docs, generators)
    # the check finds what the old secrets.yaml shipped
    old = [{"kind": "Secret", "metadata": {"name": "w"}, "stringData": {"T": "CHANGE-ME-writer-token"}}]
    assert placeholder_secrets(old, []) == ["Secret w: T"]
    assert placeholder_secrets([], [{"name": "g", "literals": ["URL=postgresql://u:<password>@db/app"]}])


def documented_secrets() -> dict[str, set[str]]:
    """Secret name -> keys, from the `kubectl ... create secret generic NAME --from-...=KEY=...` lines
    of docs/deployment.md."""
    text = re.sub(r"\\\n\s*", " ", DOCS.read_text())
    out: dict[str, set[str]] = {}
    for m in re.finditer(r"kubectl (?:-n \S+ )?create secret generic (\S+)([^\n]*)", text):
        keys = set(re.findall(r"--from-(?:literal|file)=([A-Za-z0-9_.-]+)=", m.group(2)))
        out.setdefault(m.group(1), set()).update(keys)
    return out


def referenced_secrets() -> dict[tuple[str, str], str]:
    """(Secret name, key) -> where, for every Secret a workload under deploy/k8s names."""
    refs: dict[tuple[str, str], str] = {}
    for path, doc in k8s_docs():
        spec = pod_spec(doc)
        if spec is None:
            continue
        where = f"{path.name}:{doc['metadata']['name']}"
        for c in spec["containers"]:
            for e in c.get("env", []):
                ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                if ref:
                    refs[(ref["name"], ref["key"])] = f"{where} env {e['name']}"
        for v in spec.get("volumes", []):
            if "secret" in v:
                items = v["secret"].get("items")
                assert items, f"{where}: volume {v['name']} should list the Secret's keys it mounts"
                for i in items:
                    refs[(v["secret"]["secretName"], i["key"])] = f"{where} volume {v['name']}"
    return refs


def test_every_secret_the_manifests_name_is_created_by_the_documented_commands() -> None:
    documented = documented_secrets()
    refs = referenced_secrets()
    assert len(refs) >= 8
    missing = [
        f"{w}: Secret {n} key {k}" for (n, k), w in sorted(refs.items()) if k not in documented.get(n, set())
    ]
    assert not missing, "docs/deployment.md does not create:\n" + "\n".join(missing)
    unused = sorted(set(documented) - {n for n, _k in refs})
    assert not unused, f"docs/deployment.md creates Secrets no manifest uses: {unused}"


# ------------------------------------------------------------------------------ images


def image_is_pinned(image: str) -> bool:
    if "@sha256:" in image:
        return True
    last = image.rsplit("/", 1)[-1]
    if ":" not in last:
        return False
    tag = last.rsplit(":", 1)[1]
    return bool(tag) and tag != "latest" and "$" not in tag


def all_images() -> list[tuple[str, str]]:
    out = [(f"docker-compose.yml:{n}", s["image"]) for n, s in interpolate(compose())["services"].items()]
    out += [(f"deploy/Dockerfile:FROM {i}", i) for i in parse_dockerfile(DOCKERFILE).from_images]
    for path, doc in k8s_docs():
        spec = pod_spec(doc)
        for c in [*(spec or {}).get("initContainers", []), *(spec or {}).get("containers", [])]:
            out.append((f"deploy/k8s/{path.name}:{c['name']}", c["image"]))
    return out


def test_every_image_is_pinned() -> None:
    images = all_images()
    assert len(images) >= 10
    loose = [f"{where}: {image}" for where, image in images if not image_is_pinned(image)]
    assert not loose, "images without a pinned tag:\n" + "\n".join(loose)
    assert not image_is_pinned("minio/minio:latest") and not image_is_pinned("postgres")
    assert image_is_pinned("registry:5000/inlet:0.1.0") and not image_is_pinned("registry:5000/inlet")


def test_dockerfile_shape() -> None:
    df = parse_dockerfile(DOCKERFILE)
    text = DOCKERFILE.read_text()
    assert len(df.stages) >= 2, "multi-stage: build stages and runtime stages"
    assert "uv sync --locked" in text and "--no-dev" in text
    user = re.findall(r"^USER\s+(\S+)", text, flags=re.M)
    assert user and user[-1].split(":")[0] not in ("root", "0"), "the runtime stage runs as a non-root user"
    # what the compose file and manifests expect inside the image
    for path in ("/opt/inlet/scripts/", "/var/lib/inlet/secrets"):
        assert path in text
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert "*" in ignore and "!uv.lock" in ignore


def stage_chain(df: Dockerfile, stage: str) -> str:
    """The instructions of ``stage`` and of the stages it is built FROM and COPYs --from."""
    text = df.stages[stage]
    for parent in re.findall(r"COPY --from=(\S+)", text):
        if parent in df.stages:
            text += stage_chain(df, parent)
    return text


def test_service_images_carry_only_what_they_run() -> None:
    """slim: inlet-services alone, no Java, no PySpark; spark: [spark] and Java 17; neither the
    embedded stack ([stack], or the whole workspace, whose root asks for it)."""
    df = parse_dockerfile(DOCKERFILE)
    text = DOCKERFILE.read_text()
    assert list(df.stages)[-1] == "slim", "slim is the default target (the last stage)"
    slim, spark = stage_chain(df, "slim"), stage_chain(df, "spark")
    assert (
        "--package inlet-services" in slim
        and "--extra" not in slim
        and "openjdk" not in text.split("AS slim")[1]
    )
    assert "openjdk-17-jre-headless" in df.stages["spark"] and "--extra spark" in spark
    assert "--all-packages" not in text and "--extra stack" not in text and "--all-extras" not in text


def test_every_manifest_names_a_parametrised_image() -> None:
    """The images are kustomize parameters (`images:`): every container names one of them, with its
    tag; the writer (--engine spark) runs the spark image, every other service the slim one; compose
    builds each from its target."""
    k = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    params = {i["name"]: i for i in k["images"]}
    for i in params.values():
        assert i.get("newName") and i.get("newTag"), (
            f"kustomization.yaml: set newName and newTag of {i['name']}"
        )
    maps = {d["metadata"]["name"]: d.get("data", {}) for _p, d in k8s_docs() if d["kind"] == "ConfigMap"}
    for path, doc in k8s_docs():
        for c in (pod_spec(doc) or {}).get("containers", []):
            name, _, tag = c["image"].partition(":")
            assert name in params, (
                f"{path.name}: {c['name']} runs {c['image']}, not an image of kustomization.yaml"
            )
            assert tag == params[name]["newTag"], f"{path.name}: {c['image']}"
            engines = {v for ref in c.get("envFrom", []) for k2, v in maps[ref["configMapRef"]["name"]].items()
                       if k2.endswith("_ENGINE")}  # fmt: skip
            assert name == ("inlet-spark" if "spark" in engines else "inlet"), f"{path.name}: {c['name']}"
    targets = {"inlet": "slim", "inlet-spark": "spark"}
    for svc_name, svc in interpolate(compose())["services"].items():
        if "build" not in svc:
            continue
        name, _, tag = svc["image"].partition(":")
        assert name in params and tag == params[name]["newTag"], svc_name
        assert (
            svc["build"]["target"] == targets[name] and targets[name] in parse_dockerfile(DOCKERFILE).stages
        )
        spark = "--engine" in svc.get("command", []) and _flag(svc["command"], "--engine") == "spark"
        assert (name == "inlet-spark") == spark, f"docker-compose.yml: {svc_name} runs {svc['image']}"


# ------------------------------------------------------------------------------ coordinator TLS health


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_init_secrets_and_grpc_health_check_work_together(tmp_path: Path) -> None:
    from concurrent import futures

    import grpc
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    secrets = tmp_path / "secrets"
    _make_secrets(secrets)
    tokens = json.loads((secrets / "tokens.json").read_text())
    assert tokens["tokens"][0]["token"] == "test-writer-token-123"
    # a second run keeps what is there
    before = (secrets / "coordinator.pem").read_bytes()
    _make_secrets(secrets)
    assert (secrets / "coordinator.pem").read_bytes() == before

    # the coordinator's compose command and health check name files the script made
    coord = compose()["services"]["coordinator"]
    mounted = "/var/lib/inlet/secrets/"
    named = [w for w in [*coord["command"], *coord["healthcheck"]["test"]] if w.startswith(mounted)]
    assert len(named) >= 4
    for w in named:
        assert (secrets / w[len(mounted) :]).is_file(), w

    # the tokens file is one the coordinator accepts
    from inlet.services.coordinator.auth import load_tokens

    accepted = {t.secret for t in load_tokens(str(secrets / "tokens.json"))}
    assert "test-writer-token-123" in accepted
    # every token file a compose client reads was written, and holds a token the coordinator accepts
    from inlet.services.cli.commit import coordinator_token

    services = compose()["services"]
    token_files = [
        v for svc in services.values() for k, v in (svc.get("environment") or {}).items()
        if k.endswith("_COORDINATOR_TOKEN_FILE")
    ]  # fmt: skip
    assert len(token_files) == 2
    for path in token_files:
        local = str(secrets / path[len(mounted) :])
        assert coordinator_token({"coordinator_token_file": local}) in accepted, path

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    creds = grpc.ssl_server_credentials(
        [((secrets / "coordinator.key").read_bytes(), (secrets / "coordinator.pem").read_bytes())]
    )
    port = server.add_secure_port(f"127.0.0.1:{_free_port()}", creds)
    server.start()
    try:
        test = [w.replace(mounted, f"{secrets}/") for w in coord["healthcheck"]["test"][1:]]
        assert test[0] == "python"
        test = [sys.executable, *test[1:]]
        test = [
            str(SCRIPTS / "grpc_healthcheck.py") if w == "/opt/inlet/scripts/grpc_healthcheck.py" else w
            for w in test
        ]
        test[test.index("--address") + 1] = f"127.0.0.1:{port}"

        def run() -> subprocess.CompletedProcess[str]:
            return subprocess.run(test, capture_output=True, text=True, timeout=60)

        servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        assert run().returncode == 1
        servicer.set("", health_pb2.HealthCheckResponse.SERVING)
        done = run()
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "SERVING"
        # a name the certificate does not carry fails verification
        wrong = [*test]
        wrong[wrong.index("--server-name") + 1] = "somebody-else"
        assert subprocess.run(wrong, capture_output=True, text=True, timeout=60).returncode == 1
    finally:
        server.stop(0)


def _make_secrets(directory: Path) -> None:
    env = {**os.environ, "WRITER_TOKEN": "test-writer-token-123"}
    subprocess.run(["sh", str(SCRIPTS / "init-secrets.sh"), str(directory)], check=True, env=env, timeout=60)


def _healthcheck_argv(test: list[str], secrets: Path, address: str) -> list[str]:
    """A compose/k8s health check command, run here: this Python, the repository's script and files."""
    argv = [w.replace("/var/lib/inlet/secrets/", f"{secrets}/") for w in test]
    assert argv[:2] == ["python", "/opt/inlet/scripts/grpc_healthcheck.py"], argv
    argv[:2] = [sys.executable, str(SCRIPTS / "grpc_healthcheck.py")]
    argv[argv.index("--address") + 1] = address
    return argv


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_compose_coordinator_serves_tls_and_passes_its_health_checks(tmp_path: Path, pg_url: str) -> None:
    """The real ``inlet coordinator serve`` with compose's arguments and init-secrets.sh's files."""

    secrets = tmp_path / "secrets"
    _make_secrets(secrets)
    coord = interpolate(compose()["services"]["coordinator"])
    address = f"127.0.0.1:{_free_port()}"
    argv = [w.replace("/var/lib/inlet/secrets/", f"{secrets}/") for w in coord["command"]]
    argv[argv.index("--listen") + 1] = address  # tests bind loopback only
    argv[argv.index("--metrics-listen") + 1] = "127.0.0.1:0"
    i = argv.index("--kafka-bootstrap")
    del argv[i : i + 2]  # no broker here: commit events stay in the outbox
    env = {k: v for k, v in os.environ.items() if not k.startswith("INLET_")}
    env.update({k: str(v) for k, v in coord["environment"].items() if k.startswith("INLET_")})
    env["INLET_COORDINATOR_DATABASE_URL"] = pg_url
    inlet = Path(sys.executable).with_name("inlet")
    proc = subprocess.Popen(
        [str(inlet), *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = _first_line(proc)
        stderr = proc.stderr.read() if proc.poll() is not None else ""  # type: ignore[union-attr]
        assert line, f"the coordinator did not start: {stderr}"
        serving = json.loads(line)
        assert serving.pop("metrics").startswith("127.0.0.1:")
        assert serving == {"event": "serving", "address": address, "tls": True}
        compose_check = _healthcheck_argv(coord["healthcheck"]["test"][1:], secrets, address)
        done = subprocess.run(compose_check, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout.strip() == "SERVING", done.stderr
        # the Kubernetes readiness probe asks for the coordinator service by name
        deployment = next(
            d
            for _p, d in k8s_docs()
            if d["kind"] == "Deployment" and d["metadata"]["name"] == "inlet-coordinator"
        )
        probe = deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["exec"]["command"]
        k8s_check = _healthcheck_argv(probe, secrets, address)
        k8s_check[k8s_check.index("--ca") + 1] = str(secrets / "ca.pem")
        k8s_check[k8s_check.index("--server-name") + 1] = "coordinator"  # init-secrets.sh's SAN
        done = subprocess.run(k8s_check, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0 and done.stdout.strip() == "SERVING", done.stderr
    finally:
        _stop(proc)


def test_init_script_puts_the_heartbeat_and_signal_tables_in_the_connectors_publication(pg_url: str) -> None:
    """The source database part of the init script, run on a real PostgreSQL: the connector's
    publication (used as it is) holds the heartbeat table its heartbeat.action.query writes, so an
    idle source still advances the slot (shown with Debezium in tests/integration/stack/test_debezium.py),
    and the signal table, whose incremental-snapshot watermarks `inlet backfill` needs in the stream."""
    import psycopg

    cfg = json.loads((DEPLOY / "connect" / "postgres-connector.json").read_text())["config"]
    assert cfg["publication.autocreate.mode"] == "disabled"  # Debezium would reset a filtered one
    script = (DEPLOY / "postgres" / "initdb" / "01-inlet.sql").read_text().split("\\connect app", 1)[1]
    code = "\n".join(line for line in script.splitlines() if not line.lstrip().startswith("--"))
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for statement in filter(None, (s.strip() for s in code.split(";"))):
            conn.execute(statement)  # type: ignore[arg-type]  # the repository's own script
        conn.execute(cfg["heartbeat.action.query"])
        published = conn.execute(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = %s ORDER BY 1",
            (cfg["publication.name"],),
        ).fetchall()
        [(via_root,)] = conn.execute(
            "SELECT pubviaroot FROM pg_publication WHERE pubname = %s", (cfg["publication.name"],)
        ).fetchall()
    assert via_root  # a partitioned table's changes come under its root's name: one table (#32)
    table = re.search(r"INSERT INTO ([\w.]+)", cfg["heartbeat.action.query"]).group(1)  # type: ignore[union-attr]
    assert [r[0] for r in published] == sorted([table, cfg["signal.data.collection"], "public.customers"])


def _first_line(proc: subprocess.Popen[str], timeout_s: float = 60) -> str:
    """The first line a started service prints on stdout ("" if it printed none in time or exited)."""
    deadline = time.monotonic() + timeout_s
    line = ""
    while not line and time.monotonic() < deadline and proc.poll() is None:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()  # type: ignore[union-attr]
    return line


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
