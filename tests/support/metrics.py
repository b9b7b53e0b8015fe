"""Prometheus helpers the tests share: scrape a service's ``/metrics``, read one sample, and every
metric name the services register (what alert rules and dashboards may refer to)."""

from __future__ import annotations

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


def _labelled_names(registry: CollectorRegistry) -> dict[str, frozenset[str]]:
    """Every sample name of ``registry`` with the labels its samples carry (declared labels, so a
    labelled metric counts before its first sample)."""
    out: dict[str, frozenset[str]] = {}
    collectors = list(registry._collector_to_names)  # the registry lists its collectors no other way
    for collector in collectors:
        declared = getattr(collector, "_labelnames", None)
        for family in collector.collect():
            labels = frozenset(declared if declared is not None else getattr(family, "_labelnames", ()))
            labels |= {k for s in family.samples for k in s.labels if k != "le"}
            names = {family.name, *(s.name for s in family.samples)}
            if family.type == "counter":
                names.add(family.name + "_total")
            if family.type == "histogram":
                names.update(family.name + x for x in ("_count", "_sum"))
                out[family.name + "_bucket"] = labels | {"le"}
            for n in names:
                out[n] = labels
    return out


def registered_metrics() -> dict[str, frozenset[str]]:
    """Every sample name an Inlet service can expose, with its labels: the CDC consumer (its slot
    monitor included), the writer, the coordinator, catalog sync and table services."""
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
    out: dict[str, frozenset[str]] = {}
    for r in registries:
        for name, labels in _labelled_names(r).items():
            out[name] = out.get(name, frozenset()) | labels
    return out


def registered_metric_names() -> set[str]:
    return set(registered_metrics())


def promql_selectors(expr: str) -> list[tuple[str, set[str]]]:
    """Each series selector of a PromQL expression: its metric name and the labels it matches on.
    Raises ValueError (naming the problem) when the expression does not parse, as promtool would."""
    import promql_parser

    found: list[tuple[str, set[str]]] = []

    def visit(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append((node.name or "", {m.name for m in node.matchers.matchers}))

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def check_promql(expr: str, known: dict[str, frozenset[str]]) -> list[str]:
    """What is wrong with ``expr`` against the registered metrics (empty: nothing): a syntax error,
    a metric no service registers, a label matcher on a label the metric does not carry, or no
    Inlet metric at all."""
    try:
        selectors = promql_selectors(expr)
    except ValueError as e:
        return [f"does not parse: {e}"]
    problems = []
    for name, labels in selectors:
        if name not in known:
            problems.append(f"{name} is registered by no service")
        elif labels - known[name]:
            problems.append(f"{name} has no label {sorted(labels - known[name])}")
    if not any(n.startswith("inlet_") for n, _ in selectors):
        problems.append("reads no Inlet metric")
    return problems


def promql_metrics(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    return {name for name, _ in promql_selectors(expr)}
