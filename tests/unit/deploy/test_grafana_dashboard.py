"""deploy/grafana/inlet.json: a Grafana dashboard whose every query reads metrics an Inlet service
registers (the alert rules' check), with panels for what an on-call engineer looks at first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.metrics import check_promql, promql_metrics, registered_metrics

DASHBOARD = Path(__file__).resolve().parents[3] / "deploy" / "grafana" / "inlet.json"
# issue #22: freshness, lag, slot WAL, commit latency, conflicts, outbox, dead letters
SHOWN = {
    "inlet_writer_last_commit_timestamp_seconds",
    "inlet_writer_last_freshness_seconds",
    "inlet_kafka_consumer_lag_records",
    "inlet_cdc_slot_retained_wal_bytes",
    "inlet_cdc_slot_wal_budget_bytes",
    "inlet_coordinator_commit_latency_seconds_bucket",
    "inlet_coordinator_conflicts_total",
    "inlet_coordinator_janitor_rollbacks_total",
    "inlet_coordinator_outbox_pending_events",
    "inlet_coordinator_outbox_oldest_event_age_seconds",
    "inlet_cdc_dead_letters_total",
    "inlet_writer_dead_letters_total",
}


def test_dashboard_panels_query_registered_metrics() -> None:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    assert doc["uid"] and doc["title"]
    panels = [p for p in doc["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in doc["panels"]}) == len(doc["panels"])  # ids unique
    known = registered_metrics()
    used: set[str] = set()
    for p in panels:
        assert p["title"] and p["targets"] and set(p["gridPos"]) == {"h", "w", "x", "y"}, p["title"]
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        for t in p["targets"]:
            problems = check_promql(t["expr"], known)
            assert not problems, f"{p['title']}: {t['expr']}: {problems}"
            used |= promql_metrics(t["expr"])
    assert used >= SHOWN, f"no panel shows {sorted(SHOWN - used)}"
