"""deploy/prometheus/alerts.yaml: well-formed rules (each expression parsed by a PromQL parser, as
``promtool check rules`` would) whose every metric and label matcher is one an Inlet service
registers (a renamed metric would otherwise leave an alert that never fires)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.metrics import check_promql, registered_metrics

yaml = pytest.importorskip("yaml", reason="needs PyYAML (comes with the dev dependency kubernetes-validate)")

RULES = Path(__file__).resolve().parents[3] / "deploy" / "prometheus" / "alerts.yaml"
# what issue #22 asks to be alerted on: stalled table, slot lag, WAL budget, outbox age, dead letters
REQUIRED = {
    "InletTableStalled",
    "InletReplicationSlotLag",
    "InletReplicationSlotWalBudget",
    "InletCommitEventsUnpublished",
    "InletDeadLetters",
}


def test_alert_rules_are_well_formed_and_read_registered_metrics() -> None:
    doc = yaml.safe_load(RULES.read_text())
    rules = [r for g in doc["groups"] for r in g["rules"]]
    names = [r["alert"] for r in rules]
    assert set(names) >= REQUIRED and len(names) == len(set(names))
    known = registered_metrics()
    for r in rules:
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r["alert"]
        assert r["labels"]["severity"] in ("warning", "critical"), r["alert"]
        assert r["annotations"]["summary"], r["alert"]
        assert re.fullmatch(r"\d+[smh]", r.get("for", "0s")), r["alert"]
        assert not check_promql(r["expr"], known), f"{r['alert']}: {check_promql(r['expr'], known)}"


def test_the_check_catches_what_would_never_fire() -> None:
    known = registered_metrics()
    # the lag gauges' names before issue #22
    assert check_promql("sum(inlet_writer_kafka_lag) > 0", known) == [
        "inlet_writer_kafka_lag is registered by no service"
    ]
    assert check_promql('inlet_kafka_consumer_lag_records{service="writer"} > 0', known) == [
        "inlet_kafka_consumer_lag_records has no label ['service']"
    ]
    assert check_promql("max by (slot) (inlet_cdc_slot_lag_bytes > 1", known)[0].startswith("does not parse")
    assert check_promql('sum(inlet_kafka_consumer_lag_records{consumer="writer"}) > 0', known) == []
