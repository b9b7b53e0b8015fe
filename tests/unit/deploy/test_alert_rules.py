"""deploy/prometheus/alerts.yaml: well-formed rules whose every metric is one an Inlet service
registers (a renamed metric would otherwise leave an alert that never fires)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.metrics import promql_metrics, promql_words, registered_metric_names

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
# what issue #22 asks to be alerted on: stalled table, slot lag, WAL budget, outbox age, dead letters
REQUIRED = {
    "InletTableStalled",
    "InletReplicationSlotLag",
    "InletReplicationSlotWalBudget",
    "InletCommitEventsUnpublished",
    "InletDeadLetters",
}


def test_alert_rules_are_well_formed_and_name_registered_metrics() -> None:
    doc = yaml.safe_load(RULES.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    names = [r["alert"] for r in rules]
    assert set(names) >= REQUIRED and len(names) == len(set(names))
    known = registered_metric_names()
    for r in rules:
        assert r["labels"]["severity"] in ("warning", "critical"), r["alert"]
        assert r["annotations"]["summary"], r["alert"]
        assert re.fullmatch(r"\d+[smh]", r.get("for", "0s")), r["alert"]
        metrics = promql_metrics(r["expr"])
        assert metrics, r["alert"]
        assert metrics <= known, f"{r['alert']}: {sorted(metrics - known)} registered by no service"
        words = promql_words(r["expr"])
        assert not (words - metrics - PROMQL - {"table", "slot"}), f"{r['alert']}: {words - metrics - PROMQL}"


def test_the_check_catches_an_unknown_metric() -> None:
    """The lag gauges were renamed (issue #22): the old names are no longer registered."""
    known = registered_metric_names()
    assert not promql_metrics('sum(inlet_writer_kafka_lag{topic="x"}) + inlet_cdc_consumer_lag') <= known
    assert promql_metrics('sum(inlet_kafka_consumer_lag_records{consumer="writer"})') <= known
