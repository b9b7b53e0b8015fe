"""Every Inlet producer is idempotent with ``acks=all``, and the topics Inlet creates carry Kafka's
retention settings from the flags (issue #31).

Each producer's settings are taken from the code that builds them (the dict passed to confluent-kafka),
with options that try to weaken them: ``acks=all`` and ``enable.idempotence=true`` must survive.
"""

from __future__ import annotations

import argparse

import pytest

from inlet.services.cli.main import build_parser
from inlet.services.kafka_topics import PRODUCER_SAFETY, TopicRetention
from inlet.services.runtime import SettingsError, resolve

WEAKEN = ["acks=1", "enable.idempotence=false"]


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


@pytest.fixture(autouse=True)
def _no_inlet_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in list(os.environ):
        if name.startswith("INLET_") and name != "INLET_LOG_LEVEL":
            monkeypatch.delenv(name)


def safe(settings: dict[str, object]) -> bool:
    return settings.get("acks") == "all" and settings.get("enable.idempotence") is True


def test_cdc_consumer_producer_is_idempotent_with_acks_all() -> None:
    from inlet.services.cdc_consumer.service import CdcConsumerService
    from inlet.services.cdc_consumer.settings import ENV_PREFIX, SETTINGS, CdcConfig

    weakening = [a for opt in WEAKEN for a in ("--producer-option", opt)]
    args = parse("cdc", "run", "--kafka-bootstrap", "127.0.0.1:9", "--topic", "t", *weakening)
    service = CdcConsumerService(CdcConfig.from_settings(resolve(args, SETTINGS, ENV_PREFIX)))
    assert safe(service._producer_config())


def test_outbox_publisher_producer_is_idempotent_with_acks_all() -> None:
    from inlet.services.coordinator.outbox import OutboxPublisher

    pub = OutboxPublisher(
        "postgresql://127.0.0.1:9/x",
        "127.0.0.1:9",
        producer_config={"acks": "1", "enable.idempotence": False},
    )
    assert safe(pub.producer_settings())


def test_dead_letter_producer_is_idempotent_with_acks_all() -> None:
    from inlet.services.dead_letters import DeadLetterSink

    sink = DeadLetterSink({"bootstrap.servers": "127.0.0.1:9", "acks": "1", "enable.idempotence": False})
    assert safe(sink.producer_settings())


def test_debezium_producer_is_idempotent_with_acks_all() -> None:
    from inlet.services.stack.debezium import PRODUCER_SETTINGS

    assert PRODUCER_SETTINGS["producer.acks"] == "all"
    assert PRODUCER_SETTINGS["producer.enable.idempotence"] == "true"
    assert (
        int(PRODUCER_SETTINGS["producer.max.in.flight.requests.per.connection"]) <= 5
    )  # idempotence's limit


def test_producer_safety_is_what_the_issue_asks() -> None:
    assert PRODUCER_SAFETY == {"acks": "all", "enable.idempotence": True}


def test_retention_flags_reach_the_topic_configs_of_cdc_and_coordinator() -> None:
    from inlet.services.cdc_consumer.settings import ENV_PREFIX, SETTINGS, CdcConfig
    from inlet.services.coordinator.config import CoordinatorConfig

    flags = ["--topic-retention-ms", "3600000", "--topic-retention-bytes", "1048576"]
    cdc = parse("cdc", "run", "--kafka-bootstrap", "127.0.0.1:9", "--topic", "t", *flags)
    config = CdcConfig.from_settings(resolve(cdc, SETTINGS, ENV_PREFIX))
    want = {"retention.ms": "3600000", "retention.bytes": "1048576", "cleanup.policy": "delete"}
    assert config.retention.configs() == want
    coordinator = parse("coordinator", "serve", "--kafka-bootstrap", "127.0.0.1:9", *flags)
    assert CoordinatorConfig.from_args(coordinator, {}).retention.configs() == want
    # the variables too, one spelling per service prefix
    env = {"INLET_COORDINATOR_TOPIC_CLEANUP_POLICY": "compact"}
    assert CoordinatorConfig.from_args(None, env).retention.configs()["cleanup.policy"] == "compact"


def test_defaults_are_kafkas_week_and_bad_values_are_refused() -> None:
    assert TopicRetention().configs() == {
        "retention.ms": str(7 * 24 * 3600 * 1000),
        "retention.bytes": "-1",
        "cleanup.policy": "delete",
    }
    assert TopicRetention().broker_defaults()["log.retention.ms"] == str(7 * 24 * 3600 * 1000)
    for bad in ({"retention_ms": 0}, {"retention_bytes": -5}, {"cleanup_policy": "forever"}):
        with pytest.raises(ValueError, match="--topic-"):
            TopicRetention(**bad)  # type: ignore[arg-type]
    from inlet.services.cdc_consumer.settings import ENV_PREFIX, SETTINGS, CdcConfig

    args = parse(
        "cdc", "run", "--kafka-bootstrap", "127.0.0.1:9", "--topic", "t", "--topic-retention-ms", "0"
    )
    with pytest.raises(SettingsError, match="--topic-retention-ms"):
        CdcConfig.from_settings(resolve(args, SETTINGS, ENV_PREFIX))
