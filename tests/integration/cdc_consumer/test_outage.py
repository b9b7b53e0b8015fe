"""Broker outages: the service neither crashes nor drops what it had consumed, and resumes once a broker is back.

The output broker that comes back is a new Apache Kafka on a fresh temporary directory at the old
address: it is empty and knows none of the producer ids it gave out (the idempotent producer starts
over). The single broker of the second test restarts on its data directory, as a real broker does. (When
the source broker came back empty instead, with the topic created anew, the service's consumer stayed
assigned and healthy but fetched nothing in 90 s against Apache Kafka - the stand-in broker carried on;
a source cluster that loses its topics is not an outage the service rides out in place.)
"""

from __future__ import annotations

import itertools
import json
import time
import urllib.error
import urllib.request
from pathlib import Path

from cdc_helpers import (
    FAST_CONSUMER,
    InRecord,
    committed,
    make_config,
    metric_value,
    produce,
    read_all,
    recorded,
    running,
    scrape,
    unique_prefix,
    wait_for,
)

from inlet.services.stack import EmbeddedKafka

# librdkafka backs off reconnecting up to 10 s by default: the test's clients retry a returned
# broker within a second
QUICK_RECONNECT = {
    "consumer_options": [*FAST_CONSUMER, "reconnect.backoff.max.ms=1000"],
    "producer_options": ["reconnect.backoff.max.ms=1000"],
}


def _changes(prefix: str, n: int) -> list[InRecord]:
    topic = f"{prefix}.public.customers"
    recs = [r for r in recorded(prefix) if r.topic == topic and r.value is not None and r.key is not None]
    return list(itertools.islice(itertools.cycle(recs), n))


def _health(address: str, path: str = "/healthz") -> tuple[int, dict]:  # type: ignore[type-arg]
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_output_broker_outage_loses_nothing_consumed(kafka_server: EmbeddedKafka) -> None:
    """Source broker up, output broker down: consumed records wait, offsets stay put, all arrive after."""
    prefix = unique_prefix()
    topic = f"{prefix}.public.customers"
    out_topic = f"inlet.changes.{topic}"
    kafka_server.create_topic(topic, partitions=1)
    first, during = _changes(prefix, 200), _changes(prefix, 300)
    out = EmbeddedKafka().start()
    port = out.port
    out2: EmbeddedKafka | None = None
    try:
        produce(kafka_server.bootstrap, first)
        config = make_config(
            kafka_server.bootstrap,
            prefix,
            topics=(topic,),
            topic_pattern=None,
            output_bootstrap=out.bootstrap,
            commit_interval_ms=100,
            **QUICK_RECONNECT,
        )
        with running(config) as service:
            address = service.metrics_address
            assert address is not None
            got = read_all(out.bootstrap, [out_topic], min_count=200)
            assert sorted(o.source[2] for o in got) == list(range(200))
            wait_for(lambda: committed(kafka_server.bootstrap, config.group, topic)[0] == 200)

            out.stop()  # the output broker goes away
            produce(kafka_server.bootstrap, during)
            # the service consumes the new records, cannot deliver them, and commits none of them
            wait_for(lambda: metric_value(scrape(address), "inlet_cdc_events_in_total", topic=topic) == 500)
            wait_for(lambda: _health(address)[0] == 503, timeout_s=30)
            # not ready, but live: its loop turns, and a restart would not bring the broker back
            assert _health(address, "/readyz")[0] == 503
            assert _health(address, "/livez") == (200, {"status": "ok", "polling": True})
            time.sleep(1.0)  # ten commit intervals
            assert committed(kafka_server.bootstrap, config.group, topic)[0] == 200
            assert (metric_value(scrape(address), "inlet_cdc_pending_outputs") or 0) > 0

            out2 = EmbeddedKafka(port=port).start()  # a broker is back on the same address (empty)
            after = read_all(out2.bootstrap, [out_topic], min_count=300, timeout_s=90)
            assert sorted({o.source[2] for o in after}) == list(range(200, 500))
            wait_for(lambda: committed(kafka_server.bootstrap, config.group, topic)[0] == 500, timeout_s=60)
            wait_for(lambda: _health(address)[0] == 200, timeout_s=30)
    finally:
        out.stop()
        if out2 is not None:
            out2.stop()


def test_single_broker_outage_then_resume(tmp_path: Path) -> None:
    """The only broker dies and comes back on the same port with its data (a broker restart): the
    service survives the outage, resumes from its committed offsets, and relays what arrives after."""
    prefix = unique_prefix()
    topic = f"{prefix}.public.customers"
    out_topic = f"inlet.changes.{topic}"
    data = tmp_path / "kafka"
    broker = EmbeddedKafka(data_dir=data).start()
    port = broker.port
    broker2: EmbeddedKafka | None = None
    changes = _changes(prefix, 400)
    try:
        broker.create_topic(topic, partitions=1)
        produce(broker.bootstrap, changes[:100])
        config = make_config(
            broker.bootstrap,
            prefix,
            topics=(topic,),
            topic_pattern=None,
            commit_interval_ms=200,
            **QUICK_RECONNECT,
        )
        with running(config) as service:
            address = service.metrics_address
            assert address is not None
            assert len(read_all(broker.bootstrap, [out_topic], min_count=100)) == 100
            wait_for(lambda: committed(broker.bootstrap, config.group, topic)[0] == 100)
            broker.stop()
            # the service notices within a few seconds (longer on a loaded machine)
            wait_for(lambda: _health(address)[0] == 503, timeout_s=30)
            broker2 = EmbeddedKafka(data_dir=data).start()
            assert broker2.port == port
            produce(broker2.bootstrap, changes[100:])
            after = read_all(broker2.bootstrap, [out_topic], min_count=400, timeout_s=90)
            # every change once: the committed offsets survived, so nothing was relayed twice
            assert sorted(o.source[2] for o in after) == list(range(400))
            wait_for(lambda: _health(address)[0] == 200, timeout_s=30)
            wait_for(lambda: committed(broker2.bootstrap, config.group, topic)[0] == 400, timeout_s=60)
            assert metric_value(scrape(address), "inlet_cdc_events_in_total", topic=topic) == 400
    finally:
        broker.stop()
        if broker2 is not None:
            broker2.stop()
