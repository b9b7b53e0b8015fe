"""The shared service runtime: settings precedence and errors, stop signals, /metrics and /healthz."""

from __future__ import annotations

import argparse
import json
import os
import signal
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry, Counter

from inlet.services.runtime import (
    Liveness,
    Setting,
    SettingsError,
    StopSignal,
    add_arguments,
    resolve,
    serve_http,
)

SETTINGS = (
    Setting("bootstrap", "--bootstrap", "Kafka bootstrap servers", required=True),
    Setting("batch", "--batch", "records per batch", kind="int", default=1000),
    Setting("topics", "--topic", "topics", kind="list", default=("a",)),
    Setting("dry", "--dry", "dry run", kind="bool", default=False),
    Setting("options", "--option", "KEY=VALUE settings", kind="pairs", default=(), metavar="KEY=VALUE"),
)
PREFIX = "INLET_TEST_"


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p, SETTINGS, PREFIX)
    return p.parse_args(argv)


def test_flag_beats_environment_beats_default() -> None:
    env = {"INLET_TEST_BOOTSTRAP": "env:9092", "INLET_TEST_BATCH": "7", "INLET_TEST_TOPICS": "x, y"}
    assert resolve(parse([]), SETTINGS, PREFIX, env) == {
        "bootstrap": "env:9092",
        "batch": 7,
        "topics": ("x", "y"),
        "dry": False,
        "options": (),
    }
    got = resolve(
        parse(["--bootstrap", "flag:1", "--topic", "p", "--topic", "q,r", "--dry"]), SETTINGS, PREFIX, env
    )
    assert got == {"bootstrap": "flag:1", "batch": 7, "topics": ("p", "q", "r"), "dry": True, "options": ()}
    assert resolve(parse(["--bootstrap", "b"]), SETTINGS, PREFIX, {})["batch"] == 1000


def test_key_value_settings_are_never_split_at_commas() -> None:
    """A KEY=VALUE flag is one setting whatever its value holds; from the environment, one per line
    or a JSON object, and a single line that looks like several pairs is refused, not guessed."""
    args = parse(["--option", "hoodie.datasource.write.recordkey.field=id,tenant", "--option", "p=a,b=c"])
    got = resolve(args, SETTINGS, PREFIX, {"INLET_TEST_BOOTSTRAP": "k"})["options"]
    assert got == ("hoodie.datasource.write.recordkey.field=id,tenant", "p=a,b=c")

    def from_env(value: str) -> tuple[str, ...]:
        env = {"INLET_TEST_BOOTSTRAP": "k", "INLET_TEST_OPTIONS": value}
        return resolve(parse([]), SETTINGS, PREFIX, env)["options"]  # type: ignore[no-any-return]

    assert from_env("ssl.cipher.suites=A,B\nsasl.password=x,y") == (
        "ssl.cipher.suites=A,B",
        "sasl.password=x,y",
    )
    assert from_env('{"a.b": "1,2", "c": 3}') == ("a.b=1,2", "c=3")
    assert from_env("recordkey.field=id,tenant") == ("recordkey.field=id,tenant",)
    with pytest.raises(
        SettingsError, match="INLET_TEST_OPTIONS: 'a=1,b=2' is ambiguous: put one KEY=VALUE per line"
    ):
        from_env("a=1,b=2")
    with pytest.raises(SettingsError, match="INLET_TEST_OPTIONS: not a JSON object"):
        from_env("{broken")


def test_errors_name_the_flag_or_variable() -> None:
    with pytest.raises(SettingsError, match=r"--bootstrap is required \(or set INLET_TEST_BOOTSTRAP\)"):
        resolve(parse([]), SETTINGS, PREFIX, {})
    with pytest.raises(SettingsError, match="INLET_TEST_BATCH: not an integer: 'many'"):
        resolve(parse(["--bootstrap", "b"]), SETTINGS, PREFIX, {"INLET_TEST_BATCH": "many"})
    with pytest.raises(SettingsError, match="--batch: not an integer"):
        resolve(parse(["--bootstrap", "b", "--batch", "x"]), SETTINGS, PREFIX, {})


def test_help_names_variable_and_default() -> None:
    p = argparse.ArgumentParser()
    add_arguments(p, SETTINGS, PREFIX)
    text = " ".join(p.format_help().split())
    assert "[env: INLET_TEST_BATCH]" in text and "(default 1000)" in text


def test_sigterm_sets_the_stop_event_and_handlers_are_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with StopSignal() as stop:
        assert not stop.stopping
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.wait(2.0)
    assert signal.getsignal(signal.SIGTERM) == before


def test_metrics_and_health_endpoints() -> None:
    registry = CollectorRegistry()
    Counter("inlet_test_events", "events", registry=registry).inc(3)
    healthy = {"ok": True}
    endpoint = serve_http("127.0.0.1:0", registry, lambda: (healthy["ok"], {"lag": 5}))
    try:
        base = f"http://{endpoint.address}"
        assert endpoint.address.startswith("127.0.0.1:")
        metrics = urllib.request.urlopen(base + "/metrics").read().decode()
        assert "inlet_test_events_total 3.0" in metrics
        assert json.loads(urllib.request.urlopen(base + "/healthz").read()) == {"status": "ok", "lag": 5}
        assert json.loads(urllib.request.urlopen(base + "/readyz").read())["status"] == "ok"  # = health
        healthy["ok"] = False
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + "/healthz")
        assert err.value.code == 503
    finally:
        endpoint.stop()


def test_readiness_endpoint_runs_its_own_check() -> None:
    stopped: dict[str, str] = {}
    endpoint = serve_http(
        "127.0.0.1:0",
        CollectorRegistry(),
        lambda: (True, {}),
        ready=lambda: (not stopped, {"stopped": dict(stopped)}),
    )
    try:
        base = f"http://{endpoint.address}"
        assert json.loads(urllib.request.urlopen(base + "/readyz").read()) == {"status": "ok", "stopped": {}}
        stopped["db.public.t"] = "bad row at inlet.changes.db.public.t[0]@7: ..."
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + "/readyz")
        assert err.value.code == 503
        assert json.loads(err.value.read()) == {"status": "not ready", "stopped": dict(stopped)}
        assert urllib.request.urlopen(base + "/healthz").status == 200  # still alive: no restart
    finally:
        endpoint.stop()


def test_livez_is_the_loop_turning_and_separate_from_readiness() -> None:
    """``/livez`` fails once the loop stops turning for longer than allowed, whatever ``/readyz``
    says (a dependency's outage is not a reason to restart); ``/readyz`` has its own check."""
    now = [100.0]
    live = Liveness(max_silence_s=30.0, clock=lambda: now[0])
    registry = CollectorRegistry()
    endpoint = serve_http(
        "127.0.0.1:0", registry, lambda: (True, {}), ready=lambda: (False, {"kafka": "down"}), live=live
    )

    def get(path: str) -> tuple[int, dict[str, object]]:
        try:
            with urllib.request.urlopen(f"http://{endpoint.address}{path}", timeout=5) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read())

    try:
        assert get("/livez") == (503, {"status": "not live", "loop": "not started"})
        live.beat()
        now[0] += 29.0
        assert get("/livez")[0] == 200 and get("/readyz") == (503, {"status": "not ready", "kafka": "down"})
        now[0] += 2.0  # 31 s without a turn of the loop: a hung service
        status, body = get("/livez")
        assert status == 503 and body["loop_silent_s"] == 31.0
    finally:
        endpoint.stop()
