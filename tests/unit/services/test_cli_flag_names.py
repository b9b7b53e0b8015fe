"""One name per concept in the whole ``inlet`` command tree (issue #22 item 10).

The test walks every parser of ``inlet`` and checks each visible option (and each ``[env: ...]``
variable its help names) against the canonical spelling of its concept. Old spellings may stay for
one release only as hidden :class:`DeprecatedAlias` options of a parser that also has the canonical
one; using them still works and logs one deprecation warning.
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Iterator

import pytest

from inlet.services.cli.main import build_parser
from inlet.services.runtime import DeprecatedAlias, Setting, add_arguments, resolve

# concept -> (what names the concept, the canonical spellings; more than one only where the
# meaning differs, e.g. the CDC consumer's client-specific options over the shared --kafka-option)
CONCEPTS: dict[str, tuple[re.Pattern[str], frozenset[str]]] = {
    "Kafka bootstrap servers": (
        re.compile(r"bootstrap|brokers?$"),
        frozenset({"--kafka-bootstrap", "--output-kafka-bootstrap"}),
    ),
    "librdkafka settings": (
        re.compile(
            r"^--(kafka|consumer|producer|admin|librdkafka|rdkafka)(-(option|config|conf|setting)s?)?$"
        ),
        frozenset({"--kafka-option", "--consumer-option", "--producer-option"}),
    ),
    "a format": (
        re.compile(r"format$"),
        frozenset(
            {
                "--value-format",  # Debezium value encoding (cdc decode, cdc run)
                "--input-format",  # the input file of inlet write
                "--log-format",
                "--timestamp-input-format",
                "--timestamp-output-format",
            }
        ),
    ),
    "schema registry": (re.compile(r"registry"), frozenset({"--schema-registry"})),
    "commit coordinator": (
        re.compile(r"coordinator"),
        frozenset(
            {
                "--coordinator",
                "--coordinator-token",
                "--coordinator-token-file",
                "--coordinator-ca",
                "--coordinator-tls",
                "--no-coordinator-tls",
            }
        ),
    ),
}
# only these commands take the client-specific Kafka options (their consumer and producer may be
# on different clusters: --kafka-bootstrap and --output-kafka-bootstrap)
CLIENT_SPECIFIC_KAFKA_OPTIONS = {"--consumer-option": {"cdc run"}, "--producer-option": {"cdc run"}}

# every command that commits to a table can commit through the coordinator, TLS included
COMMITTING = (
    "write",
    "rollback",
    "compaction schedule",
    "compaction run",
    "clustering schedule",
    "clustering run",
    "clean run",
    "archive run",
    "savepoint create",
    "savepoint delete",
    "restore",
    "writer run",
    "writer load",
    "table-services run",
)
COORDINATOR_OPTIONS = (
    "--coordinator",
    "--coordinator-token",
    "--coordinator-token-file",
    "--coordinator-ca",
    "--coordinator-tls",
)

# environment variables: one spelling per concept too
ENV_RULES = (
    (re.compile(r"BOOTSTRAP"), re.compile(r"^INLET_\w*KAFKA_BOOTSTRAP$")),
    (re.compile(r"SCHEMA_REGISTRY"), re.compile(r"^INLET_CDC_SCHEMA_REGISTRY$")),
    # Kafka's settings, under any service's prefix (topic retention is INLET_<SERVICE>_TOPIC_*)
    (re.compile(r"KAFKA"), re.compile(r"^INLET_\w*(KAFKA_BOOTSTRAP|KAFKA_OPTIONS)$")),
    (re.compile(r"RETENTION"), re.compile(r"^INLET_\w+_TOPIC_RETENTION_(MS|BYTES)$")),
)
ENV_IN_HELP = re.compile(r"\b(INLET_[A-Z0-9_]+)\b")


def parsers(
    p: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    yield " ".join(path), p
    for a in p._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                yield from parsers(sub, (*path, name))


def options(p: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.Action]]:
    for a in p._actions:
        for o in a.option_strings:
            yield o, a


def test_every_option_is_spelled_the_one_way_of_its_concept() -> None:
    wrong: list[str] = []
    for command, p in parsers(build_parser()):
        visible = {o for o, a in options(p) if not isinstance(a, DeprecatedAlias)}
        for opt, action in options(p):
            for concept, (names, canonical) in CONCEPTS.items():
                if not names.search(opt) or opt in canonical:
                    continue
                if isinstance(action, DeprecatedAlias):
                    if action.canonical not in visible:
                        wrong.append(
                            f"{command}: deprecated {opt} points at {action.canonical}, which it lacks"
                        )
                    continue
                wrong.append(
                    f"{command}: {opt} names the {concept}; spell it {' or '.join(sorted(canonical))}"
                )
            if opt in CLIENT_SPECIFIC_KAFKA_OPTIONS and command not in CLIENT_SPECIFIC_KAFKA_OPTIONS[opt]:
                wrong.append(f"{command}: {opt}; use --kafka-option (every client of the command)")
            if isinstance(action, DeprecatedAlias) and action.help != argparse.SUPPRESS:
                wrong.append(f"{command}: deprecated {opt} is shown in --help")
            for env in ENV_IN_HELP.findall(action.help or ""):
                for concerns, must in ENV_RULES:
                    if concerns.search(env) and not must.match(env):
                        wrong.append(f"{command}: {opt} reads {env}, not the canonical variable name")
    assert wrong == []


def test_every_committing_command_takes_the_coordinator_options() -> None:
    by_command = dict(parsers(build_parser()))
    missing = [
        f"{command}: {opt}"
        for command in COMMITTING
        for opt in COORDINATOR_OPTIONS
        if opt not in {o for o, _ in options(by_command[command])}
    ]
    assert missing == []


def test_a_deprecated_flag_still_works_and_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    p = build_parser()
    with caplog.at_level(logging.WARNING, logger="inlet.deprecation"):
        args = p.parse_args(
            ["writer", "run", "--bootstrap", "k:9092", "--kafka", "a=1", "--kafka-option", "b=2"]
        )
    assert args.bootstrap == "k:9092"
    assert args.kafka == ["a=1", "b=2"]  # the old and the new spelling add up
    warnings = [r.getMessage() for r in caplog.records if r.name == "inlet.deprecation"]
    assert len(warnings) == 2
    assert "--bootstrap is deprecated" in warnings[0] and "--kafka-bootstrap" in warnings[0]
    assert "--kafka is deprecated" in warnings[1] and "--kafka-option" in warnings[1]


def test_a_deprecated_variable_still_works_and_warns(caplog: pytest.LogCaptureFixture) -> None:
    settings = (
        Setting(
            "bootstrap", "--kafka-bootstrap", "b", env_name="KAFKA_BOOTSTRAP", env_aliases=("BOOTSTRAP",)
        ),
    )
    p = argparse.ArgumentParser()
    add_arguments(p, settings, "INLET_X_")
    with caplog.at_level(logging.WARNING, logger="inlet.deprecation"):
        old = resolve(p.parse_args([]), settings, "INLET_X_", {"INLET_X_BOOTSTRAP": "old:1"})
        both = resolve(
            p.parse_args([]),
            settings,
            "INLET_X_",
            {"INLET_X_BOOTSTRAP": "old:1", "INLET_X_KAFKA_BOOTSTRAP": "new:1"},
        )
    assert old["bootstrap"] == "old:1" and both["bootstrap"] == "new:1"
    warnings = [r.getMessage() for r in caplog.records if r.name == "inlet.deprecation"]
    assert warnings == [
        "INLET_X_BOOTSTRAP is deprecated and will be removed in the next release: use INLET_X_KAFKA_BOOTSTRAP"
    ]
