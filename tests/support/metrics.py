"""Prometheus helpers the tests share: scrape a service's ``/metrics``, read one sample, and every
metric name the services register (what alert rules and dashboards may refer to)."""

from __future__ import annotations

import re
import urllib.request

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families


def scrape(address: str, path: str = "/metrics") -> str:
    """The body of ``http://<address><path>`` (``address``: ``host:port`` or a full URL)."""
    url = address if address.startswith("http") else f"http://{address}{path}"
    with urllib.request.urlopen(url, timeout=5) as resp:
        body: bytes = resp.read()
    return body.decode()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the sample ``name`` whose labels include ``labels`` (None: no such sample)."""
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


def sample_names(text: str) -> set[str]:
    """Every sample name in a scrape (a histogram's ``_bucket``/``_count``/``_sum`` included)."""
    return {s.name for family in text_string_to_metric_families(text) for s in family.samples}


def exposed_names(text: str) -> set[str]:
    """Every metric name a scrape declares, with or without samples yet (a labelled counter or
    histogram has none until first used): family names, a counter's ``_total``, sample names."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        if family.type == "counter":
            names.add(family.name + "_total")
        if family.type == "histogram":
            names.update(family.name + s for s in ("_bucket", "_count", "_sum"))
        names.update(s.name for s in family.samples)
    return names


def _names(registry: CollectorRegistry) -> set[str]:
    names: set[str] = set()
    for family in registry.collect():
        names.add(family.name)
        if family.type == "counter":  # a labelled counter has no sample until used
            names.add(family.name + "_total")
        if family.type == "histogram":
            names.update(family.name + s for s in ("_bucket", "_count", "_sum"))
        names.update(s.name for s in family.samples)
    return names


def registered_metric_names() -> set[str]:
    """Every sample name an Inlet service can expose: the CDC consumer (its slot monitor
    included), the writer, the coordinator, catalog sync and table services."""
    from inlet.services.catalog_sync.service import Metrics as CatalogMetrics
    from inlet.services.cdc_consumer.metrics import CdcMetrics
    from inlet.services.cdc_consumer.slots import SlotMonitor
    from inlet.services.coordinator.metrics import CoordinatorMetrics
    from inlet.services.table_services.service import Metrics as TableServicesMetrics
    from inlet.services.writer.metrics import WriterMetrics

    cdc = CdcMetrics()
    SlotMonitor("postgresql://unused", cdc.registry)  # registers its gauges; polls only when started
    registries = [
        cdc.registry,
        WriterMetrics().registry,
        CoordinatorMetrics().registry,
        CatalogMetrics().registry,
        TableServicesMetrics().registry,
    ]
    return set().union(*(_names(r) for r in registries))


def promql_words(expr: str) -> set[str]:
    """The identifiers of a PromQL expression outside label matchers, ranges and strings (metric
    names, functions, keywords and the labels of ``by``/``on``)."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # strings (label values)
    bare = re.sub(r"\{[^}]*\}", "", bare)  # label matchers
    bare = re.sub(r"\[[^\]]*\]", "", bare)  # ranges
    return set(re.findall(r"[a-zA-Z_][a-zA-Z0-9_]*", bare))


def promql_metrics(expr: str) -> set[str]:
    """The Inlet metric names a PromQL expression reads."""
    return {w for w in promql_words(expr) if w.startswith("inlet_")}
