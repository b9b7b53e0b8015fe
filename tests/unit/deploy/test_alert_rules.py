"""deploy/prometheus/alerts.yaml: well-formed rules whose every metric is one an Inlet service
exports (a renamed metric would otherwise leave an alert that never fires)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from inlet.services.cdc_consumer.metrics import CdcMetrics
from inlet.services.cdc_consumer.slots import SlotMonitor
from inlet.services.writer.metrics import WriterMetrics

yaml = pytest.importorskip("yaml", reason="needs PyYAML (comes with the dev dependency kubernetes-validate)")

RULES = Path(__file__).resolve().parents[3] / "deploy" / "prometheus" / "alerts.yaml"
# PromQL words that are not metrics
PROMQL = {
    "time",
    "max",
    "sum",
    "by",
    "on",
    "and",
    "or",
    "increase",
    "rate",
    "humanize1024",
    "humanizeDuration",
}


def exported() -> set[str]:
    """Every sample name the CDC consumer (slot monitor included) and the writer expose."""
    names: set[str] = set()
    cdc = CdcMetrics()
    SlotMonitor("postgresql://unused", cdc.registry)
    writer = WriterMetrics()
    for registry in (cdc.registry, writer.registry):
        assert isinstance(registry, CollectorRegistry)
        for family in registry.collect():
            names.add(family.name)
            if family.type == "counter":  # a labelled counter has no sample until used
                names.add(family.name + "_total")
            if family.type == "histogram":
                names.update(family.name + s for s in ("_bucket", "_count", "_sum"))
            names.update(s.name for s in family.samples)
    return names


def test_alert_rules_are_well_formed_and_name_exported_metrics() -> None:
    doc = yaml.safe_load(RULES.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    assert {r["alert"] for r in rules} >= {
        "InletTableStalled",
        "InletReplicationSlotLag",
        "InletReplicationSlotWalBudget",
        "InletDeadLetters",
    }
    known = exported()
    for r in rules:
        assert r["labels"]["severity"] in ("warning", "critical"), r["alert"]
        assert r["annotations"]["summary"], r["alert"]
        assert re.fullmatch(r"\d+[smh]", r.get("for", "0s")), r["alert"]
        words = set(re.findall(r"[a-zA-Z_][a-zA-Z0-9_]*", re.sub(r"\[[^\]]*\]", "", r["expr"])))
        metrics = {w for w in words if w.startswith("inlet_")}
        assert metrics, r["alert"]
        assert metrics <= known, f"{r['alert']}: {sorted(metrics - known)} exported by no service"
        assert not (words - metrics - PROMQL - {"table", "slot"}), f"{r['alert']}: {words - metrics - PROMQL}"
