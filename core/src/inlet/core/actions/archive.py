"""Archive: move old completed instants out of the active timeline into the LSM archived timeline.

Apache Hudi's ``TimelineArchiverV2`` (table version 8), with ``ArchivalUtils``, ``CompactionUtils``,
``ClusteringUtils`` and ``MetadataConversionUtils.createLSMTimelineInstant``:

Which instants (``getCommitInstantsToArchive``): nothing until more than ``hoodie.keep.max.commits``
(30) completed commits (commit, deltacommit, replacecommit) are active; then the oldest of them,
leaving ``hoodie.keep.min.commits`` (20), but none at or after the earliest *instant to retain*,
the earliest of:

1. the last completed commit before the earliest pending write (commit, deltacommit,
   replacecommit, compaction, logcompaction, clustering), or that pending write itself;
2. on a merge-on-read table whose compaction trigger counts delta commits (``NUM_COMMITS`` /
   ``NUM_AND_TIME``): the last completed compaction, or the first deltacommit without one, or
   with ``hoodie.compact.inline.max.delta.commits`` or more deltacommits since, the one that
   leaves that many minus one after it (``getEarliestInstantToRetainForCompaction``);
3. the first replacecommit/clustering at or after the latest completed clean's earliest instant
   to retain (its savepoint if the clean kept files for one; the clean itself if the plan has
   none), or the first replacecommit/clustering without a clean
   (``getEarliestInstantToRetainForClustering``);
4. the earliest instant to retain of the latest clean's plan (Hudi's candidate 6: instants the
   cleaner still needs stay active);

and none at or after the first completed savepoint. ``ArchivalUtils.getMinAndMaxInstantsToKeep``
raises min to the commits after the cleaner's earliest commit to retain plus two (and max by the
same amount) when min is smaller. Completed cleans and rollbacks older than the last commit
archived go with them (``getCleanAndRollbackInstantsToArchive``).

Inlet adds one guard its readers need: they take files older than the first active instant as
committed (archived), so nothing is archived at or after an instant that stays active
regardless: a pending instant of any action, or a completed one that is neither a write, a
clean nor a rollback (savepoint, restore, indexing). For the same reason
``hoodie.archive.beyond.savepoint=true`` is refused, and the metadata-table guards of Hudi
(candidates 4-5 there) do not apply: Inlet does not maintain a metadata table.

How (``archiveIfRequired``), under the table lock: the batch goes into the LSM timeline first
(one layer-0 file, manifest, version; :mod:`inlet.core.timeline.archived`), each record holding
the completed file's bytes as metadata and the requested plan as plan; then the batch's
requested and inflight files are deleted, then its completed files in instant order (so the
active timeline never has a hole); then the LSM timeline is compacted and cleaned. A run that
dies anywhere leaves a table every reader reads the same: an instant both archived and active is
still active. The next run first deletes the active files of instants the archived timeline
already holds, so nothing is archived twice.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from inlet.core import avro, faults
from inlet.core.actions.clean import CleanConfig, CleanPolicy
from inlet.core.commit.locks import table_lock
from inlet.core.commit.markers import marker_dir
from inlet.core.config import (
    ArchivalConfig,
    CompactionConfig,
    CompactionTrigger,
    ConfigKey,
    TableConfig,
    TableType,
    WriteConfig,
    check_options,
    config_keys,
)
from inlet.core.errors import InletError, InvalidOptionError, UnsupportedError
from inlet.core.progress import Progress
from inlet.core.storage import Storage
from inlet.core.table import metadata_table
from inlet.core.table.properties import read_properties
from inlet.core.timeline.active import Timeline
from inlet.core.timeline.archived import ArchivedRecord, ArchivedTimeline, LSMTimeline, history_dir
from inlet.core.timeline.instant import Action, Instant, State, format_instant_time, parse_instant_time

log = logging.getLogger(__name__)

# the actions whose pending instants are on Hudi's write timeline (getWriteTimeline)
PENDING_WRITE_ACTIONS = frozenset(
    {*Action.WRITE_ACTIONS, Action.COMPACTION, Action.LOG_COMPACTION, Action.CLUSTERING}
)
# completed actions Hudi's archiver moves (commits, then cleans and rollbacks behind them)
ARCHIVED_ACTIONS = frozenset({*Action.WRITE_ACTIONS, Action.CLEAN, Action.ROLLBACK})
_COMPACTION_KEYS: list[ConfigKey[Any]] = [
    CompactionConfig.TRIGGER_STRATEGY,
    CompactionConfig.MAX_DELTA_COMMITS,
]


@dataclasses.dataclass(frozen=True)
class ArchiveConfig:
    """The options archiving reads: its own, the cleaner's (``ArchivalUtils`` widens the kept
    window to what the cleaner retains) and the compaction trigger (guard 2)."""

    min_commits: int = 20
    max_commits: int = 30
    compaction_batch_size: int = 10
    clean_policy: CleanPolicy = CleanPolicy.KEEP_LATEST_COMMITS
    clean_commits_retained: int = 10
    clean_hours_retained: int = 24
    compaction_trigger: CompactionTrigger = CompactionTrigger.NUM_COMMITS
    max_delta_commits: int = 5
    table_type: TableType | None = None  # None: read from hoodie.properties when planning
    compression: str = "gzip"  # hoodie.parquet.compression.codec (Hudi's default: gzip)

    @classmethod
    def from_options(
        cls, options: Mapping[str, str] | None = None, table_type: TableType | str | None = None
    ) -> ArchiveConfig:
        opts = {str(k): str(v) for k, v in (options or {}).items()}
        check_options(
            opts,
            [*config_keys(ArchivalConfig, CleanConfig), *_COMPACTION_KEYS, WriteConfig.PARQUET_COMPRESSION],
        )
        lo = ArchivalConfig.MIN_COMMITS_TO_KEEP.require(opts)
        hi = ArchivalConfig.MAX_COMMITS_TO_KEEP.require(opts)
        if hi <= lo:  # HoodieWriteConfig's validation
            raise InvalidOptionError(
                f"invalid option hoodie.keep.max.commits={hi}: must be greater than hoodie.keep.min.commits={lo}"
            )
        if ArchivalConfig.ARCHIVE_BEYOND_SAVEPOINT.require(opts):
            raise UnsupportedError(
                "hoodie.archive.beyond.savepoint=true is not supported: Inlet's readers take every "
                "file older than the first active instant as archived, so nothing after a savepoint "
                "that stays active may be archived"
            )
        compression = WriteConfig.PARQUET_COMPRESSION.require(opts)
        if WriteConfig.PARQUET_COMPRESSION.key not in opts:
            compression = "gzip"
        return cls(
            min_commits=lo,
            max_commits=hi,
            compaction_batch_size=ArchivalConfig.TIMELINE_COMPACTION_BATCH_SIZE.require(opts),
            clean_policy=CleanConfig.POLICY.require(opts),
            clean_commits_retained=CleanConfig.COMMITS_RETAINED.require(opts),
            clean_hours_retained=CleanConfig.HOURS_RETAINED.require(opts),
            compaction_trigger=CompactionConfig.TRIGGER_STRATEGY.require(opts),
            max_delta_commits=CompactionConfig.MAX_DELTA_COMMITS.require(opts),
            table_type=TableType.parse(table_type) if isinstance(table_type, str) else table_type,
            compression=compression,
        )


# ------------------------------------------------------------------------------------ planning


def _cleaner_earliest_commit_to_retain(timeline: Timeline, cfg: ArchiveConfig) -> Instant | None:
    """``CleanerUtils.getEarliestCommitToRetain`` as ``ArchivalUtils`` calls it (the latest
    commit's time stands in for "now" under ``KEEP_LATEST_BY_HOURS``)."""
    commits = timeline.completed_writes()
    if cfg.clean_policy is CleanPolicy.KEEP_LATEST_COMMITS:
        if len(commits) <= cfg.clean_commits_retained:
            return None
        nth = commits[len(commits) - cfg.clean_commits_retained]
        pending = timeline.pending(PENDING_WRITE_ACTIONS)
        if pending and nth.time > pending[0].time:
            before = [c for c in commits if c.time < pending[0].time]
            return before[-1] if before else None
        return nth
    if cfg.clean_policy is CleanPolicy.KEEP_LATEST_BY_HOURS and commits:
        cutoff = parse_instant_time(commits[-1].time) - dt.timedelta(hours=cfg.clean_hours_retained)
        cut = format_instant_time(cutoff.replace(tzinfo=None))
        return next((c for c in commits if c.time >= cut), None)
    return None


def keep_bounds(timeline: Timeline, cfg: ArchiveConfig) -> tuple[int, int]:
    """``ArchivalUtils.getMinAndMaxInstantsToKeep``: (min, max) completed commits to keep."""
    earliest = _cleaner_earliest_commit_to_retain(timeline, cfg)
    if earliest is not None:
        by_cleaning = sum(1 for c in timeline.completed_writes() if c.time > earliest.time) + 2
        if cfg.min_commits < by_cleaning:
            return by_cleaning, by_cleaning + cfg.max_commits - cfg.min_commits
    return cfg.min_commits, cfg.max_commits


def _earliest_for_compaction(timeline: Timeline) -> tuple[list[Instant], Instant] | None:
    """``CompactionUtils.getDeltaCommitsSinceLatestCompaction``."""
    compactions = timeline.completed([Action.COMMIT])
    deltas = [i for i in timeline.instants if i.action == Action.DELTA_COMMIT]
    if compactions:
        last = compactions[-1]
        return [d for d in deltas if d.time > last.time], last
    if deltas:
        return deltas, deltas[0]
    return None


def earliest_to_retain_for_compaction(timeline: Timeline, max_delta_commits: int) -> Instant | None:
    """``CompactionUtils.getEarliestInstantToRetainForCompaction``."""
    info = _earliest_for_compaction(timeline)
    if info is None:
        return None
    deltas, anchor = info
    if len(deltas) < max_delta_commits:
        return anchor
    return deltas[len(deltas) - max_delta_commits]


def _read_plan(storage: Storage, timeline: Timeline, inst: Instant) -> dict[str, Any] | None:
    """The Avro record of a clean plan (``<t>.clean.requested``), or None if it is gone."""
    path = timeline.path_of(Instant(inst.time, Action.CLEAN, State.REQUESTED))
    if not storage.exists(path):
        return None
    data = storage.read_bytes(path)
    return avro.decode(data, f"clean plan {inst.time}") if data else None


def _clean_retain_bound(storage: Storage, timeline: Timeline, inst: Instant) -> tuple[str | None, str | None]:
    """(earliest instant to retain, earliest savepoint kept) of a clean's plan; a completed clean
    whose plan file is gone falls back to its metadata's ``earliestCommitToRetain``."""
    plan = _read_plan(storage, timeline, inst)
    if plan is not None:
        e = plan.get("earliestInstantToRetain") or {}
        saved = ((plan.get("extraMetadata") or {}).get("savepointed_timestamps") or "").split(",")
        saved = sorted(s for s in saved if s)
        return (e.get("timestamp") or None), (saved[0] if saved else None)
    if inst.is_completed:
        md = avro.decode(timeline.read_bytes(inst), f"clean {inst.time}")
        return (md.get("earliestCommitToRetain") or None), None
    return None, None


def earliest_to_retain_for_clustering(
    storage: Storage, timeline: Timeline, cfg: ArchiveConfig
) -> Instant | None:
    """``ClusteringUtils.getEarliestInstantToRetainForClustering`` (with
    ``getEarliestReplacedSavepointInClean``)."""
    replaces = [i for i in timeline.instants if i.action in (Action.REPLACE_COMMIT, Action.CLUSTERING)]
    if not replaces:
        return None
    cleans = timeline.completed([Action.CLEAN])
    if not cleans:
        return replaces[0]
    clean = cleans[-1]
    earliest, savepoint = _clean_retain_bound(storage, timeline, clean)
    bound = clean.time
    if (
        savepoint
        and earliest
        and cfg.clean_policy is not CleanPolicy.KEEP_LATEST_FILE_VERSIONS
        and earliest > savepoint
        and any(savepoint <= r.time <= earliest for r in timeline.completed([Action.REPLACE_COMMIT]))
    ):
        bound = savepoint
    elif earliest:
        bound = earliest
    return next((r for r in replaces if r.time >= bound), None)


def earliest_to_retain_for_cleaning(storage: Storage, timeline: Timeline) -> Instant | None:
    """Hudi's candidate 6: the earliest instant to retain in the latest clean's plan."""
    cleans = [i for i in timeline.instants if i.action == Action.CLEAN]
    if not cleans:
        return None
    earliest, _ = _clean_retain_bound(storage, timeline, cleans[-1])
    return Instant(earliest, Action.COMMIT, State.COMPLETED) if earliest else None


def _earliest_pending_write_bound(timeline: Timeline) -> Instant | None:
    """Candidate 1: the last completed commit before the earliest pending write, else that write."""
    pending = timeline.pending(PENDING_WRITE_ACTIONS)
    if not pending:
        return None
    before = [c for c in timeline.completed_writes() if c.time < pending[0].time]
    return before[-1] if before else pending[0]


def _inlet_reader_bound(timeline: Timeline) -> Instant | None:
    """The first instant that stays active whatever is archived: pending, or not archivable."""
    return next(
        (i for i in timeline.instants if not i.is_completed or i.action not in ARCHIVED_ACTIONS), None
    )


def earliest_instant_to_retain(storage: Storage, timeline: Timeline, cfg: ArchiveConfig) -> Instant | None:
    """The smallest of the archiver's candidates (see the module docstring)."""
    table_type = cfg.table_type or TableConfig.TYPE.require(read_properties(storage))
    candidates = [
        _earliest_pending_write_bound(timeline),
        earliest_to_retain_for_compaction(timeline, cfg.max_delta_commits)
        if table_type is TableType.MERGE_ON_READ
        and cfg.compaction_trigger in (CompactionTrigger.NUM_COMMITS, CompactionTrigger.NUM_AND_TIME)
        else None,
        earliest_to_retain_for_clustering(storage, timeline, cfg),
        earliest_to_retain_for_cleaning(storage, timeline),
        _inlet_reader_bound(timeline),
    ]
    present = [c for c in candidates if c is not None]
    return min(present, key=lambda i: i.time) if present else None


def plan_archive(storage: Storage, timeline: Timeline, config: ArchiveConfig) -> list[Instant]:
    """The completed instants an archive would move now, by requested time (nothing is written)."""
    commits = timeline.completed_writes()
    lo, hi = keep_bounds(timeline, config)
    if len(commits) <= hi:
        return []
    retain = earliest_instant_to_retain(storage, timeline, config)
    savepoints = timeline.completed([Action.SAVEPOINT])
    eligible = [
        c
        for c in commits
        if (not savepoints or c.time < savepoints[0].time) and (retain is None or c.time < retain.time)
    ]
    chosen = eligible[: max(0, len(commits) - lo)]
    if not chosen:
        return []
    last = chosen[-1].time
    chosen += [i for i in timeline.completed([Action.CLEAN, Action.ROLLBACK]) if i.time < last]
    return sorted(chosen, key=lambda i: i.time)


# ----------------------------------------------------------------------------------- execution


@dataclasses.dataclass
class ActiveAction:
    """``ActiveAction``: the requested, inflight and completed files of one instant time."""

    time: str
    requested: Instant | None = None
    inflight: Instant | None = None
    completed: Instant | None = None

    @property
    def pending(self) -> list[Instant]:
        return [i for i in (self.requested, self.inflight) if i is not None]


def active_actions(storage: Storage, timeline: Timeline, times: Sequence[str]) -> list[ActiveAction]:
    """Every state file of each of ``times`` on the active timeline (listing it once)."""
    wanted = set(times)
    out: dict[str, ActiveAction] = {}
    for info in storage.list_files(timeline.dir):
        inst = Instant.parse_file_name(posixpath.basename(info.path))
        if inst is None or inst.time not in wanted:
            continue
        act = out.setdefault(inst.time, ActiveAction(inst.time))
        if inst.state is State.REQUESTED:
            act.requested = inst
        elif inst.state is State.INFLIGHT:
            act.inflight = inst
        else:
            act.completed = inst
    return [out[t] for t in sorted(out)]


def _read_optional(storage: Storage, timeline: Timeline, inst: Instant | None) -> bytes | None:
    if inst is None:
        return None
    path = timeline.path_of(inst)
    data = storage.read_bytes(path) if storage.exists(path) else b""
    return data or None


def lsm_record(storage: Storage, timeline: Timeline, act: ActiveAction) -> ArchivedRecord:
    """``MetadataConversionUtils.createLSMTimelineInstant``: metadata = the completed file, plan
    by the pending action (clean plan; replace/clustering requested metadata, replaced by the
    inflight file's when that is not empty; compaction plan)."""
    done = act.completed
    if done is None:
        raise InletError(f"instant {act.time} has no completed file to archive")
    pending = act.requested or act.inflight
    plan: bytes | None = None
    if pending is None:
        log.warning("instant %s has no requested or inflight file; archived without its plan", act.time)
    elif pending.action == Action.CLEAN:
        plan = _read_optional(storage, timeline, pending)
    elif pending.action in (Action.REPLACE_COMMIT, Action.CLUSTERING):
        plan = _read_optional(storage, timeline, act.requested)
        plan = _read_optional(storage, timeline, act.inflight) or plan
    elif pending.action in (Action.COMPACTION, Action.LOG_COMPACTION):
        plan = _read_optional(storage, timeline, Instant(act.time, pending.action, State.REQUESTED))
    return ArchivedRecord(
        done.time,
        done.completion_time,
        done.action,
        _read_optional(storage, timeline, done),
        plan,
    )


def _delete_actions(storage: Storage, timeline: Timeline, acts: Sequence[ActiveAction]) -> None:
    """``deleteArchivedActions``: requested and inflight files first, then completed files in
    instant order (a completed file deleted first would make its action look pending again)."""
    for act in acts:
        for inst in act.pending:
            storage.delete(timeline.path_of(inst))
    done = [a.completed for a in acts if a.completed is not None]
    for n, inst in enumerate(done):
        if n == len(done) // 2:
            faults.crash_point(faults.ARCHIVE_MID_DELETE)
        storage.delete(timeline.path_of(inst))


@dataclasses.dataclass(frozen=True)
class ArchiveResult:
    archived: tuple[str, ...]  # instant times this run moved to the archived timeline
    file: str | None = None  # the layer-0 file written (None: nothing, or already committed)
    compacted: tuple[str, ...] = ()  # compacted files written into deeper layers
    repaired: tuple[str, ...] = ()  # instants an interrupted run had archived, now off the active timeline

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _finish_interrupted(storage: Storage, timeline: Timeline, lsm: LSMTimeline) -> list[ActiveAction]:
    """Delete the active files of instants the archived timeline already holds."""
    active = timeline.instants
    if not active:
        return []
    archived = ArchivedTimeline(storage, lsm.dir, start=active[0].time)
    held = archived.times()
    leftovers = [i.time for i in active if i.is_completed and i.time in held]
    if not leftovers:
        return []
    acts = active_actions(storage, timeline, leftovers)
    log.info("finishing an interrupted archive: %d instant(s) are archived and still active", len(acts))
    _delete_actions(storage, timeline, acts)
    return acts


def archive(
    storage: Storage,
    layout_version: int,
    timeline_path: str = "timeline",
    options: Mapping[str, str] | None = None,
) -> ArchiveResult:
    """Archive what :func:`plan_archive` names, under the table lock; then compact the LSM
    timeline if a layer is full. Finishes an interrupted archive first."""
    props = read_properties(storage)
    version = TableConfig.VERSION.require(props)
    if version != 8 or layout_version < 2:
        raise UnsupportedError(
            f"Inlet archives table version 8 (the LSM timeline); this table is version {version}"
        )
    cfg = ArchiveConfig.from_options(options, TableConfig.TYPE.require(props))
    history = TableConfig.TIMELINE_HISTORY_PATH.require(props)
    with table_lock(storage):
        timeline = Timeline.load(storage, layout_version, timeline_path)
        lsm = LSMTimeline(storage, history_dir(timeline.dir, history), cfg.compression)
        repaired = _finish_interrupted(storage, timeline, lsm)
        if repaired:
            timeline = Timeline.load(storage, layout_version, timeline_path)
        instants = plan_archive(storage, timeline, cfg)
        acts = [a for a in active_actions(storage, timeline, [i.time for i in instants]) if a.completed]
        written = None
        if acts:
            # Apache Hudi archives only what its metadata table has compacted; Inlet cannot tell
            metadata_table.turn_off(storage)
            progress = Progress(
                f"archive {acts[0].time}..{acts[-1].time}",
                "instants read",
                total=len(acts),
                table=storage.base_uri,
            )
            records = []
            for act in acts:
                storage.delete_dir(marker_dir(act.time))  # deleteAnyLeftOverMarkers
                records.append(lsm_record(storage, timeline, act))
                progress.advance()
            progress.finish()
            written = lsm.write(records)
            faults.crash_point(faults.ARCHIVE_AFTER_WRITE)
            _delete_actions(storage, timeline, acts)
        # Hudi compacts only after archiving a batch; Inlet checks on every run, so a run that
        # died before (or during) its compaction is completed by the next one
        compacted = lsm.compact_and_clean(cfg.compaction_batch_size)
    if not acts:
        log.info("nothing to archive")
        return ArchiveResult((), None, tuple(compacted), tuple(a.time for a in repaired))
    log.info("archived %d instant(s) %s..%s into %s", len(acts), acts[0].time, acts[-1].time, written)
    return ArchiveResult(
        tuple(a.time for a in acts), written, tuple(compacted), tuple(a.time for a in repaired)
    )
