"""What every long-running Inlet service shares: declared settings, graceful stop, metrics and health.

Settings
    A service declares each setting once as a :class:`Setting` (flag, ``INLET_<SERVICE>_*`` variable,
    type, default, help). :func:`add_arguments` builds the argparse options from that table and
    :func:`resolve` merges flags over environment variables over defaults into a plain dict, naming
    the flag and the variable in any error. ``--help`` therefore always names the variable.

Graceful stop
    :class:`StopSignal` turns SIGTERM/SIGINT into an event the service's loop polls; a second
    signal is left to the default handler (so a stuck process can still be interrupted).

Metrics and health
    :func:`serve_http` starts one HTTP server on the service's ``--metrics-listen`` address with
    ``/metrics`` (Prometheus text format, the service's registry), ``/healthz`` (200 with a JSON
    body while the service's check passes, 503 otherwise) and ``/readyz`` (the same for the
    service's readiness check: whether it does all its work; the health check when it has none).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from inlet.core.storage import all_request_counts

_deprecation_log = logging.getLogger("inlet.deprecation")


class SettingsError(ValueError):
    """A setting is missing or malformed; the message names its flag and environment variable."""


@dataclass(frozen=True)
class Setting:
    """One setting of a service: flag, environment variable, type, default and help text."""

    name: str  # key in the resolved dict
    flag: str  # e.g. "--kafka-bootstrap"
    help: str
    # str | int | float | bool | list (names: comma-separated or repeated) | pairs (KEY=VALUE: one per
    # flag, never split at commas; from the environment one per line or a JSON object)
    kind: str = "str"
    default: Any = None
    metavar: str | None = None
    required: bool = False
    env_name: str | None = None  # default: the name in upper case
    # old spellings kept for one release: hidden flags and variables (after the prefix) that still
    # work and log a one-line deprecation warning naming the new spelling
    aliases: tuple[str, ...] = ()
    env_aliases: tuple[str, ...] = ()

    def env(self, prefix: str) -> str:
        return prefix + (self.env_name or self.name.upper())


def warn_deprecated(old: str, new: str) -> None:
    """The one-line warning an old spelling of a flag or variable logs when it is used."""
    _deprecation_log.warning("%s is deprecated and will be removed in the next release: use %s", old, new)


class DeprecatedAlias(argparse.Action):
    """A hidden old spelling of an option: stores (or appends, ``append=True``) into the canonical
    option's destination and logs :func:`warn_deprecated`."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str,
        canonical: str = "",
        append: bool = False,
        **kwargs: Any,
    ) -> None:
        kwargs["help"] = argparse.SUPPRESS
        super().__init__(option_strings, dest, **kwargs)
        self.canonical = canonical
        self.append = append

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        warn_deprecated(option_string or self.option_strings[0], self.canonical)
        if self.append:
            items = list(getattr(namespace, self.dest, None) or [])
            items.append(values)
            values = items
        setattr(namespace, self.dest, values)


def add_deprecated_alias(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    old: str,
    canonical: str,
    dest: str,
    *,
    append: bool = False,
    type: Callable[[str], Any] = str,
) -> None:
    """Accept ``old`` (hidden) as a deprecated spelling of the option ``canonical`` (dest ``dest``)."""
    parser.add_argument(
        old,
        dest=dest,
        action=DeprecatedAlias,
        canonical=canonical,
        append=append,
        type=type,
        default=argparse.SUPPRESS,
    )


def env_with_aliases(
    name: str, aliases: Sequence[str] = (), environ: Mapping[str, str] | None = None
) -> str | None:
    """The value of the variable ``name``, else of its first deprecated spelling that is set (with
    the deprecation warning); None when none is set."""
    env = os.environ if environ is None else environ
    if env.get(name):
        return env[name]
    for old in aliases:
        if env.get(old):
            warn_deprecated(old, name)
            return env[old]
    return None


def add_arguments(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, settings: Sequence[Setting], env_prefix: str
) -> None:
    """Add one option per setting; the help names the variable and the default."""
    for s in settings:
        text = s.help
        if s.default not in (None, "", (), False):
            shown = ",".join(s.default) if isinstance(s.default, tuple) else s.default
            text += f" (default {shown})"
        text += f" [env: {s.env(env_prefix)}]"
        kwargs: dict[str, Any] = {"dest": s.name, "default": None, "help": text}
        if s.kind == "bool":
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["metavar"] = s.metavar or s.name.upper()
            if s.kind in ("list", "pairs"):
                kwargs["action"] = "append"
        action = parser.add_argument(s.flag, **kwargs)
        setattr(action, _DECLARED, (s, env_prefix))
        for old in s.aliases:
            add_deprecated_alias(parser, old, s.flag, s.name, append=s.kind in ("list", "pairs"))


_DECLARED = "inlet_declared_setting"


def declared_setting(action: argparse.Action) -> tuple[Setting, str] | None:
    """The :class:`Setting` and environment prefix an option was added from by :func:`add_arguments`
    (None for an option declared otherwise): what ``docs/settings.md`` is generated from."""
    found: tuple[Setting, str] | None = getattr(action, _DECLARED, None)
    return found


_MORE_PAIRS = re.compile(r",\s*[A-Za-z_][\w.-]*=")


def parse_pairs(raw: Any, source: str) -> tuple[str, ...]:
    """KEY=VALUE pairs: each flag occurrence is one pair, whatever its value holds (commas in
    ``recordkey.field=id,tenant``, passwords, cipher lists); an environment variable holds one
    per line, or a JSON object."""
    if isinstance(raw, list):
        return tuple(str(p).strip() for p in raw if str(p).strip())
    text = str(raw).strip()
    if text.startswith("{"):
        try:
            doc = json.loads(text)
        except ValueError as e:
            raise SettingsError(f"{source}: not a JSON object of settings: {e}") from None
        if not isinstance(doc, dict):
            raise SettingsError(f"{source}: not a JSON object of settings")
        return tuple(f"{k}={v}" for k, v in doc.items())
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) == 1 and _MORE_PAIRS.search(lines[0]):
        raise SettingsError(
            f"{source}: {lines[0]!r} is ambiguous: put one KEY=VALUE per line, or give a JSON object"
        )
    return tuple(lines)


def _parse(setting: Setting, raw: Any, source: str) -> Any:
    if setting.kind == "pairs":
        return parse_pairs(raw, source)
    if setting.kind == "list":
        parts = raw if isinstance(raw, list) else [raw]
        return tuple(p.strip() for part in parts for p in str(part).split(",") if p.strip())
    if not isinstance(raw, str):
        return raw
    if setting.kind == "int":
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(f"{source}: not an integer: {raw!r}") from None
    if setting.kind == "float":
        try:
            return float(raw)
        except ValueError:
            raise SettingsError(f"{source}: not a number: {raw!r}") from None
    if setting.kind == "bool":
        value = raw.strip().lower()
        if value in ("1", "true", "yes", "on"):
            return True
        if value in ("0", "false", "no", "off"):
            return False
        raise SettingsError(f"{source}: not a boolean: {raw!r} (use true or false)")
    return raw


def resolve(
    args: argparse.Namespace | None,
    settings: Sequence[Setting],
    env_prefix: str,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Flag, else environment variable, else default, for every setting; checks required ones."""
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for s in settings:
        given = getattr(args, s.name, None) if args is not None else None
        name = s.env(env_prefix)
        from_env = (
            None
            if given is not None
            else env_with_aliases(name, [env_prefix + a for a in s.env_aliases], env)
        )
        if given is not None:
            value = _parse(s, given, s.flag)
        elif from_env is not None:
            value = _parse(s, from_env, name)
        else:
            value = s.default
        if s.required and value in (None, "", ()):
            raise SettingsError(f"{s.flag} is required (or set {name})")
        out[s.name] = value
    return out


class StopSignal:
    """SIGTERM/SIGINT -> :attr:`event`; restores the previous handlers on :meth:`close`."""

    def __init__(self, signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT)) -> None:
        self.event = threading.Event()
        self._previous: dict[signal.Signals, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in signals:
                self._previous[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.event.set()
        # a second signal gets the default behaviour (a stuck stop can still be interrupted)
        signal.signal(signum, signal.SIG_DFL)

    @property
    def stopping(self) -> bool:
        return self.event.is_set()

    def wait(self, timeout_s: float) -> bool:
        return self.event.wait(timeout_s)

    def close(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def __enter__(self) -> StopSignal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


HealthCheck = Callable[[], tuple[bool, Mapping[str, Any]]]


class HttpEndpoint:
    """A running ``/metrics`` + ``/healthz`` server; :attr:`address` is ``host:port``."""

    def __init__(self, server: ThreadingHTTPServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def address(self) -> str:
        host, port = self._server.server_address[:2]
        return f"{host!s}:{port}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def split_listen(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise SettingsError(f"invalid listen address {address!r}: expected HOST:PORT")
    return host.strip("[]"), int(port)


class Liveness:
    """``/livez``: the service's main loop turned within ``max_silence_s`` (:meth:`beat` each turn).

    Liveness is the loop only, never a dependency: a Kafka or coordinator outage makes a service
    not ready (``/readyz``), and a restart would not cure it; a loop that stopped turning (a hung
    call, a deadlock) is what a restart cures."""

    def __init__(self, max_silence_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_silence_s = max_silence_s
        self.clock = clock
        self.last_beat: float | None = None

    def beat(self) -> None:
        self.last_beat = self.clock()

    def __call__(self) -> tuple[bool, Mapping[str, Any]]:
        if self.last_beat is None:
            return False, {"loop": "not started"}
        silent = self.clock() - self.last_beat
        return silent <= self.max_silence_s, {
            "loop_silent_s": round(silent, 1),
            "max_silence_s": self.max_silence_s,
        }


class ObjectStoreRequests(Collector):
    """``inlet_object_store_requests_total{bucket, kind}``: this process's requests to S3 buckets."""

    def collect(self) -> Any:
        family = CounterMetricFamily(
            "inlet_object_store_requests",
            "requests to S3-compatible stores by this process (LIST, HEAD, GET, PUT, DELETE, COPY)",
            labels=["bucket", "kind"],
        )
        for (_, bucket), counts in sorted(all_request_counts().items()):
            for kind, n in counts.snapshot().items():
                family.add_metric([bucket, kind], n)
        yield family


CONSUMER_LAG = "inlet_kafka_consumer_lag_records"


class ConsumerLag:
    """``inlet_kafka_consumer_lag_records{consumer, topic, partition}``: records between a Kafka
    consumer's position and the partition's high watermark. One name for every Inlet service that
    consumes (``consumer`` names it: ``cdc_consumer``, ``writer``), so one query or alert covers all."""

    def __init__(self, registry: CollectorRegistry, consumer: str) -> None:
        self.consumer = consumer
        self.gauge = Gauge(
            CONSUMER_LAG,
            "records behind the partition's high watermark (as the broker reports it), by consuming "
            "service, topic and partition",
            ["consumer", "topic", "partition"],
            registry=registry,
        )

    def labels(self, topic: str, partition: str) -> Gauge:
        return self.gauge.labels(self.consumer, topic, partition)

    def remove(self, topic: str, partition: str) -> None:
        self.gauge.remove(self.consumer, topic, partition)


def serve_http(
    listen: str,
    registry: CollectorRegistry,
    health: HealthCheck,
    ready: HealthCheck | None = None,
    live: HealthCheck | None = None,
) -> HttpEndpoint:
    """Serve ``/metrics`` (with :class:`ObjectStoreRequests`), ``/healthz``, ``/readyz`` and ``/livez`` on ``listen`` (``HOST:PORT``;
    port 0 picks a free one); ``/readyz`` runs ``ready`` and ``/livez`` runs ``live`` (default:
    ``health``; a Kubernetes liveness probe belongs on ``/livez``, readiness on ``/readyz``)."""
    host, port = split_listen(listen)
    if not getattr(registry, "inlet_object_store_requests", False):  # once per registry
        registry.register(ObjectStoreRequests())
        registry.inlet_object_store_requests = True  # type: ignore[attr-defined]

    def check(fn: HealthCheck, bad: str) -> tuple[bytes, int]:
        try:
            ok, details = fn()
        except Exception as e:  # a failing check is unhealthy, not a crashed endpoint
            ok, details = False, {"error": str(e)}
        return json.dumps({"status": "ok" if ok else bad, **details}).encode(), (200 if ok else 503)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.startswith("/metrics"):
                body, status, ctype = generate_latest(registry), 200, CONTENT_TYPE_LATEST
            elif self.path.startswith("/healthz"):
                body, status = check(health, "unhealthy")
                ctype = "application/json"
            elif self.path.startswith("/readyz"):
                body, status = check(ready or health, "not ready")
                ctype = "application/json"
            elif self.path.startswith("/livez"):
                body, status = check(live or health, "not live")
                ctype = "application/json"
            else:
                body, status, ctype = b"not found\n", 404, "text/plain"
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # no access log on stderr
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="inlet-http", daemon=True)
    thread.start()
    return HttpEndpoint(server, thread)


def announce(**fields: Any) -> None:
    """Print the one JSON line a service writes on stdout once it serves (supervisors read it)."""
    print(json.dumps({"event": "serving", **fields}), flush=True)


def run_until_stopped(
    run: Callable[[threading.Event], int],
    metrics_listen: str | None,
    registry: CollectorRegistry,
    health: HealthCheck,
    **announced: Any,
) -> int:
    """A service's main: ``/metrics`` + ``/healthz`` on ``metrics_listen`` (empty: none), the serving
    line on stdout (``announced`` plus the endpoint's address), then ``run(stop)`` until
    SIGTERM/SIGINT sets ``stop``; the endpoint is stopped on the way out."""
    endpoint = serve_http(metrics_listen, registry, health) if metrics_listen else None
    try:
        with StopSignal() as stop:
            announce(**announced, metrics=endpoint.address if endpoint else None)
            return run(stop.event)
    finally:
        if endpoint is not None:
            endpoint.stop()
