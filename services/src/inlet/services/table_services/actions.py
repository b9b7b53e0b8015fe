"""The table services run on a table, in order, and what each one did.

Compaction (Merge-on-Read only), as Apache Hudi's async compaction does it:

1. compaction plans requested at least ``STALE_PLAN_S`` ago and never started (their scheduler
   died before executing them: a writer, the CLI or an earlier run of this service) run first,
   oldest first; a younger plan is its scheduler's, which is about to run it. A plan already
   inflight belongs to the process executing it while that one lives (its heartbeat); once it died
   (a service killed mid-compaction: its process is gone, or its heartbeat expired) the attempt is
   rolled back and the plan run again, as Apache Hudi's compactor rolls back inflight compactions
   before running them. The coordinator's janitor rolls back writes only: without this a dead
   runner's compaction stayed inflight for good, and its file groups out of every later plan;
2. then a new plan is scheduled if Hudi's triggers say one is due
   (``hoodie.compact.inline.trigger.strategy``, ``hoodie.compact.inline.max.delta.commits``,
   ``hoodie.compact.inline.max.delta.seconds``, from the service's options and the table's
   properties) and run.

Clustering (opt-in: ``--services compaction,clustering,clean,archive``; not for bucket-index
tables), after compaction as Hudi's inline services run: abandoned plans first, then a new plan when
``hoodie.clustering.inline.max.commits`` writes have completed since the last one (see
:mod:`inlet.core.actions.clustering`).

Where a compaction plan executes is the run's :class:`Engine`: in this process (``local``, the
default), or as a Spark job of the service's session (``spark``: :func:`inlet.core.spark.run_compaction`,
one task per file group, on a ``local[N]`` master or a cluster). Scheduling, the commit through the
coordinator and the rollback of a failed run stay in the service either way. Clustering, clean and
archive always run in this process.

Clean (every table), as Apache Hudi's cleaner does after commits (see :mod:`inlet.core.actions.clean`):
interrupted cleans are finished, failed writes rolled back, and the file slices outside the
retained window (``hoodie.clean.policy``, ``hoodie.clean.commits.retained`` = 10, ...) deleted.
It runs after compaction, so the slices a compaction just replaced become cleanable.

Archive (every table of version 8), as Apache Hudi archives after clean (see
:mod:`inlet.core.actions.archive`): completed instants beyond ``hoodie.keep.max.commits`` move
into the LSM archived timeline down to ``hoodie.keep.min.commits``, never past a pending instant,
a savepoint, or what clean and compaction still need; it runs last, after the clean that
decides what the cleaner still needs.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from inlet.core import HudiTable
from inlet.core.actions import compaction_run
from inlet.core.config import IndexType, TableConfig, TableType
from inlet.core.timeline.instant import Action, State, parse_instant_time

if TYPE_CHECKING:
    from inlet.core import CommitResult

STALE_PLAN_S = 60.0
COMPACTION = "compaction"
CLEAN = "clean"
ARCHIVE = "archive"
CLUSTERING = "clustering"
# what runs unless --services says otherwise; clustering rewrites data files and is opt-in, as
# Hudi's (hoodie.clustering.inline / async are off by default)
ALL_SERVICES = (COMPACTION, CLEAN, ARCHIVE)


@dataclass
class ServiceRun:
    """What the services did to one table in one run."""

    table_id: str
    completed: dict[str, list[str]] = field(default_factory=dict)  # service -> instants completed
    skipped: list[str] = field(default_factory=list)  # why something due was not run

    def add(self, service: str, instant: str) -> None:
        self.completed.setdefault(service, []).append(instant)

    @property
    def instants(self) -> int:
        return sum(len(v) for v in self.completed.values())


CompactionRunner = Callable[[HudiTable, str, dict[str, str]], "CommitResult | None"]
"""Runs the pending compaction ``instant`` of a table (None: it had nothing to run)."""


def _compact_locally(table: HudiTable, instant: str, options: dict[str, str]) -> CommitResult | None:
    return table.run_compaction(instant, options)


@dataclass(frozen=True)
class Engine:
    """Where the services execute compaction plans: ``local`` (this process) unless given."""

    name: str = "local"
    compact: CompactionRunner = _compact_locally


LOCAL = Engine()


def _age_s(instant_time: str) -> float:
    return (dt.datetime.now(dt.UTC) - parse_instant_time(instant_time)).total_seconds()


def run_compaction(
    table: HudiTable, options: Mapping[str, str], run: ServiceRun, stale_plan_s: float, engine: Engine = LOCAL
) -> None:
    if table.table_type is not TableType.MERGE_ON_READ:
        return
    opts = dict(options)
    for info in sorted(table.compactions(), key=lambda c: c.instant_time):
        if info.state is State.REQUESTED and _age_s(info.instant_time) < stale_plan_s:
            run.skipped.append(f"compaction {info.instant_time} was just requested (its scheduler runs it)")
        elif info.state is State.REQUESTED:
            if engine.compact(table, info.instant_time, opts) is not None:
                run.add(COMPACTION, info.instant_time)
        elif info.state is State.INFLIGHT:
            if not compaction_run.runner_gone(table, info.instant_time, opts):
                run.skipped.append(f"compaction {info.instant_time} is inflight (its runner is alive)")
            elif engine.compact(table, info.instant_time, opts) is not None:  # rolled back first, then run
                run.add(COMPACTION, info.instant_time)
    instant = table.schedule_compaction(opts)
    if instant is not None and engine.compact(table, instant, opts) is not None:
        run.add(COMPACTION, instant)


def run_clustering(
    table: HudiTable, options: Mapping[str, str], run: ServiceRun, stale_plan_s: float, engine: Engine = LOCAL
) -> None:
    if TableConfig.INDEX_TYPE.get(table.props) is IndexType.BUCKET:
        return  # a bucket's file group is fixed by its hash: nothing to cluster
    opts = dict(options)
    for pending in table.timeline.pending([Action.CLUSTERING]):
        if pending.state is State.INFLIGHT:
            run.skipped.append(f"clustering {pending.time} is inflight (its runner runs it)")
        elif _age_s(pending.time) < stale_plan_s:
            run.skipped.append(f"clustering {pending.time} was just requested (its scheduler runs it)")
        elif table.run_clustering(pending.time, opts) is not None:
            run.add(CLUSTERING, pending.time)
    planned = table.schedule_clustering(opts)
    if planned is not None and table.run_clustering(planned, opts) is not None:
        run.add(CLUSTERING, planned)


def run_clean(
    table: HudiTable, options: Mapping[str, str], run: ServiceRun, stale_plan_s: float, engine: Engine = LOCAL
) -> None:
    result = table.clean(dict(options))
    for instant in (*result.resumed, *([result.instant] if result.instant else [])):
        run.add(CLEAN, instant)


def run_archive(
    table: HudiTable, options: Mapping[str, str], run: ServiceRun, stale_plan_s: float, engine: Engine = LOCAL
) -> None:
    if table.version != 8:
        run.skipped.append(f"archive: table version {table.version} has no LSM timeline Inlet writes")
        return
    for instant in table.archive(dict(options)).archived:
        run.add(ARCHIVE, instant)


SERVICES: dict[str, Callable[[HudiTable, Mapping[str, str], ServiceRun, float, Engine], None]] = {
    COMPACTION: run_compaction,
    CLUSTERING: run_clustering,
    CLEAN: run_clean,
    ARCHIVE: run_archive,
}


def run_services(
    table: HudiTable,
    table_id: str,
    services: tuple[str, ...],
    options: Mapping[str, str],
    stale_plan_s: float = STALE_PLAN_S,
    engine: Engine = LOCAL,
) -> ServiceRun:
    """Run ``services`` (names of :data:`SERVICES`, in that order) on ``table``; plans requested
    ``stale_plan_s`` ago and never started count as abandoned by their scheduler; compaction plans
    execute on ``engine``."""
    run = ServiceRun(table_id)
    for name in services:
        SERVICES[name](table, options, run, stale_plan_s, engine)
    return run
