"""The table services run on a table, in order, and what each one did.

Compaction (Merge-on-Read only), as Apache Hudi's async compaction does it:

1. compaction plans requested at least ``STALE_PLAN_S`` ago and never started (their scheduler
   died before executing them: a writer, the CLI or an earlier run of this service) run first,
   oldest first; a younger plan is its scheduler's, which is about to run it, and a plan already
   inflight belongs to the process executing it (if that one died, the coordinator's janitor rolls
   it back once its heartbeat expires, and a later run executes it);
2. then a new plan is scheduled if Hudi's triggers say one is due
   (``hoodie.compact.inline.trigger.strategy``, ``hoodie.compact.inline.max.delta.commits``,
   ``hoodie.compact.inline.max.delta.seconds``, from the service's options and the table's
   properties) and run.

Clustering (opt-in: ``--services compaction,clustering,clean,archive``; not for bucket-index
tables), after compaction as Hudi's inline services run: abandoned plans first, then a new plan when
``hoodie.clustering.inline.max.commits`` writes have completed since the last one (see
:mod:`inlet.core.actions.clustering`).

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

from inlet.core import HudiTable
from inlet.core.config import IndexType, TableConfig, TableType
from inlet.core.timeline.instant import Action, State, parse_instant_time

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


def _age_s(instant_time: str) -> float:
    return (dt.datetime.now(dt.UTC) - parse_instant_time(instant_time)).total_seconds()


def run_compaction(
    table: HudiTable, options: Mapping[str, str], run: ServiceRun, stale_plan_s: float
) -> None:
    if table.table_type is not TableType.MERGE_ON_READ:
        return
    opts = dict(options)
    for info in sorted(table.compactions(), key=lambda c: c.instant_time):
        if info.state is State.REQUESTED and _age_s(info.instant_time) < stale_plan_s:
            run.skipped.append(f"compaction {info.instant_time} was just requested (its scheduler runs it)")
        elif info.state is State.REQUESTED:
            if table.run_compaction(info.instant_time, opts) is not None:
                run.add(COMPACTION, info.instant_time)
        elif info.state is State.INFLIGHT:
            run.skipped.append(f"compaction {info.instant_time} is inflight (its writer runs it)")
    instant = table.schedule_compaction(opts)
    if instant is not None and table.run_compaction(instant, opts) is not None:
        run.add(COMPACTION, instant)


def run_clustering(
    table: HudiTable, options: Mapping[str, str], run: ServiceRun, stale_plan_s: float
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


def run_clean(table: HudiTable, options: Mapping[str, str], run: ServiceRun, stale_plan_s: float) -> None:
    result = table.clean(dict(options))
    for instant in (*result.resumed, *([result.instant] if result.instant else [])):
        run.add(CLEAN, instant)


def run_archive(table: HudiTable, options: Mapping[str, str], run: ServiceRun, stale_plan_s: float) -> None:
    if table.version != 8:
        run.skipped.append(f"archive: table version {table.version} has no LSM timeline Inlet writes")
        return
    for instant in table.archive(dict(options)).archived:
        run.add(ARCHIVE, instant)


SERVICES: dict[str, Callable[[HudiTable, Mapping[str, str], ServiceRun, float], None]] = {
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
) -> ServiceRun:
    """Run ``services`` (names of :data:`SERVICES`, in that order) on ``table``; plans requested
    ``stale_plan_s`` ago and never started count as abandoned by their scheduler."""
    run = ServiceRun(table_id)
    for name in services:
        SERVICES[name](table, options, run, stale_plan_s)
    return run
