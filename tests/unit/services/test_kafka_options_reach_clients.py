"""``--kafka-option KEY=VALUE`` reaches every Kafka client each command makes (issue #22 item 2).

A secured cluster's settings (SASL, TLS) go through ``--kafka-option``; a client that missed them
could not talk to such a cluster. Each command is parsed from its real argv and its service built
as its handler builds it; then the settings of every client it creates (the dicts its client
factories pass to confluent-kafka) must hold the probe setting. The command-specific options of the
CDC consumer (``--consumer-option``, ``--producer-option``) add to it, client by client.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

import pytest

from inlet.services.cli.main import build_parser

PROBE = ("sasl.username", "inlet-probe")  # a security setting: every client needs it on such a cluster
OPT = ["--kafka-option", "=".join(PROBE)]
KAFKA = ["--kafka-bootstrap", "127.0.0.1:9"]


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def has_probe(settings: Mapping[str, Any]) -> bool:
    return settings.get(PROBE[0]) == PROBE[1]


@pytest.fixture(autouse=True)
def _no_inlet_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("INLET_") and name not in ("INLET_LOG_LEVEL",):
            monkeypatch.delenv(name)


def test_cdc_run_every_client() -> None:
    from inlet.services.cdc_consumer.service import CdcConsumerService
    from inlet.services.cdc_consumer.settings import ENV_PREFIX, SETTINGS, CdcConfig
    from inlet.services.runtime import resolve

    args = parse(
        "cdc", "run", *KAFKA, "--topic", "t", *OPT,
        "--consumer-option", "fetch.wait.max.ms=50", "--producer-option", "linger.ms=7",
    )  # fmt: skip
    service = CdcConsumerService(CdcConfig.from_settings(resolve(args, SETTINGS, ENV_PREFIX)))
    clients = {
        "consumer": service._consumer_config(),
        "producer": service._producer_config(),
        "admin": service._admin_config(),
        "source read-back consumer": service._readback_config(),
    }
    assert {name: has_probe(conf) for name, conf in clients.items()} == dict.fromkeys(clients, True)
    # the client-specific options reach their client only
    assert clients["consumer"]["fetch.wait.max.ms"] == "50" and "fetch.wait.max.ms" not in clients["producer"]
    assert clients["producer"]["linger.ms"] == "7" and "linger.ms" not in clients["consumer"]


def test_writer_run_every_client(tmp_path: Any) -> None:
    from inlet.services.cli.writer import config_from_args
    from inlet.services.dead_letters import fetch_settings
    from inlet.services.writer.service import Writer

    args = parse("writer", "run", *KAFKA, "--coordinator", "127.0.0.1:9", "--lake-root", str(tmp_path), *OPT)
    writer = Writer(config_from_args(args, {})[0])
    try:
        consumer = writer._consumer_settings()  # the main consumer, the offset-gap check's consumer
        clients = {
            "consumer": consumer,
            "dead-letter producer and admin": writer._dlq.settings,
            "bad-record read-back consumer": fetch_settings(consumer),
        }
        assert {name: has_probe(conf) for name, conf in clients.items()} == dict.fromkeys(clients, True)
    finally:
        writer.client.close()


@pytest.mark.parametrize("command", ["catalog", "table-services"])
def test_commit_event_followers(command: str) -> None:
    if command == "catalog":
        from inlet.services.catalog_sync.service import CatalogSyncService as Service
        from inlet.services.cli.catalog import config_from_args

        args = parse("catalog", "run", *KAFKA, "--metastore", "thrift://127.0.0.1:9", *OPT)
    else:
        from inlet.services.cli.table_services import config_from_args
        from inlet.services.table_services.service import TableServicesService as Service

        args = parse("table-services", "run", *KAFKA, "--coordinator", "127.0.0.1:9", *OPT)
    config, _ = config_from_args(args)
    service = Service(config)
    assert has_probe(service.events.settings)


def test_coordinator_serve_event_producer() -> None:
    from inlet.services.coordinator.config import CoordinatorConfig

    args = parse("coordinator", "serve", "--kafka-bootstrap", "127.0.0.1:9", *OPT)
    # the outbox's producer and its admin client both start from producer_config()
    assert has_probe(CoordinatorConfig.from_args(args, {}).producer_config())


@pytest.mark.parametrize("command", ["show", "replay"])
def test_dlq_commands(command: str) -> None:
    from inlet.services.cli.dlq import kafka_options

    extra = ["--topic", "t"] if command == "show" else []
    assert has_probe(kafka_options(parse("dlq", command, *KAFKA, *extra, *OPT)))
