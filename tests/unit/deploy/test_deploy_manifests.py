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
import shlex
import shutil
import subprocess
import sys
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
INLET_IMAGE = re.compile(r"^(?:.*/)?inlet(?::|@|$)")
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
    from_images: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    entrypoint: list[str] | None = None
    cmd: list[str] | None = None


def parse_dockerfile(path: Path) -> Dockerfile:
    """The few instructions the checks need (ARG defaults, FROM, ENV, ENTRYPOINT, CMD)."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = Dockerfile()
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instr, _, rest = line.partition(" ")
        instr, rest = instr.upper(), rest.strip()
        if instr == "ARG" and "=" in rest:
            k, _, v = rest.partition("=")
            out.args.setdefault(k.strip(), v.strip().strip('"'))
        elif instr == "FROM":
            image = next(w for w in rest.split() if not w.startswith("--"))
            image = re.sub(
                r"\$\{(\w+)\}|\$(\w+)", lambda m: out.args.get(m.group(1) or m.group(2), ""), image
            )
            out.from_images.append(image)
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
    yield CommandLine("deploy/Dockerfile:CMD", tuple(df.cmd or ()), tuple(df.env))


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
                kind, key = (
                    ("ConfigMap", "configMapRef") if "configMapRef" in ref else ("Secret", "secretRef")
                )
                src = (kind, ref[key]["name"])
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


def test_every_inlet_service_is_covered() -> None:
    lines = all_command_lines()
    commands = {tuple(w for w in cl.argv if not w.startswith("-"))[:2] for cl in lines}
    for expected in (("coordinator", "serve"), ("cdc", "run"), ("writer", "run")):
        assert expected in commands, f"no compose or k8s service runs `inlet {' '.join(expected)}`"
    origins = {cl.origin.split(":")[0] for cl in lines}
    assert origins >= {"docker-compose.yml", "deploy/Dockerfile"} and any(
        o.startswith("deploy/k8s/") for o in origins
    )


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
    for side in ("key", "value"):
        assert cfg[f"{side}.converter"] == "org.apache.kafka.connect.json.JsonConverter"
        assert cfg[f"{side}.converter.schemas.enable"] == "true"
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
    # ... with the token that init-secrets.sh puts in the coordinator's tokens file
    token = writer["environment"]["INLET_WRITER_COORDINATOR_TOKEN"]
    assert token == services["inlet-secrets"]["environment"]["WRITER_TOKEN"] and len(token) >= 8
    # the health checks probe the ports the services listen on
    assert _flag(coord["healthcheck"]["test"], "--address").endswith(":" + port)
    for name in ("cdc-consumer", "writer"):
        listen_port = _flag(services[name]["command"], "--metrics-listen").rsplit(":", 1)[1]
        assert f"127.0.0.1:{listen_port}/healthz" in " ".join(services[name]["healthcheck"]["test"])


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
    secrets = {
        d["metadata"]["name"]: d.get("stringData", {}) for _p, d in k8s_docs() if d["kind"] == "Secret"
    }
    tokens = json.loads(secrets["inlet-coordinator-tokens"]["tokens.json"])["tokens"]
    assert secrets["inlet-writer"]["INLET_WRITER_COORDINATOR_TOKEN"] in {t["token"] for t in tokens}


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
    assert {i["name"] for i in k.get("images", [])} == {"inlet"}


def test_k8s_workloads_have_probes_resources_and_scrape_annotations() -> None:
    docs = k8s_docs()
    services = {d["metadata"]["name"]: d for _p, d in docs if d["kind"] == "Service"}
    workloads = [(p, d) for p, d in docs if pod_spec(d) is not None]
    assert {d["metadata"]["name"] for _p, d in workloads} >= {
        "inlet-coordinator",
        "inlet-cdc-consumer",
        "inlet-writer",
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
            if "metrics" in ports:  # an HTTP service: split probes, Prometheus scrape annotations
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
    assert len(df.from_images) >= 2, "multi-stage: a build stage and a runtime stage"
    assert "uv sync --locked" in text and "--no-dev" in text
    assert "openjdk-17-jre-headless" in text  # Spark needs Java 17
    user = re.findall(r"^USER\s+(\S+)", text, flags=re.M)
    assert user and user[-1].split(":")[0] not in ("root", "0"), "the runtime stage runs as a non-root user"
    # what the compose file and manifests expect inside the image
    for path in ("/opt/inlet/scripts/", "/var/lib/inlet/secrets"):
        assert path in text
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert "*" in ignore and "!uv.lock" in ignore


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

    assert load_tokens(str(secrets / "tokens.json"))[0].secret == "test-writer-token-123"

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
    import select
    import time

    secrets = tmp_path / "secrets"
    _make_secrets(secrets)
    coord = interpolate(compose()["services"]["coordinator"])
    address = f"127.0.0.1:{_free_port()}"
    argv = [w.replace("/var/lib/inlet/secrets/", f"{secrets}/") for w in coord["command"]]
    argv[argv.index("--listen") + 1] = address  # tests bind loopback only
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
        deadline = time.monotonic() + 60
        line = ""
        while not line and time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                line = proc.stdout.readline()  # type: ignore[union-attr]
        stderr = proc.stderr.read() if proc.poll() is not None else ""  # type: ignore[union-attr]
        assert line, f"the coordinator did not start: {stderr}"
        assert json.loads(line) == {"event": "serving", "address": address, "tls": True}
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
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
