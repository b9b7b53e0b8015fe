"""A row the writer cannot convert quarantines its table, not the pipeline: the table stops with the
row and the reason on the dead-letter topic while the other tables keep committing; with
``on_bad_row="dead-letter"`` the bad row goes to the dead letters and the batch commits without it."""

from __future__ import annotations

import json
import logging
import os
import urllib.error
import urllib.request
from decimal import Decimal as D
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from writer_helpers import CUSTOMERS, Source, col, commits, produce, read_rows, wait_for

from inlet.proto.changes.v1 import changes_pb2 as pb
from inlet.services.cli.dlq import describe, read_dead_letters
from inlet.services.cli.errors import UsageError
from inlet.services.cli.main import build_parser, main
from inlet.services.cli.writer import config_from_args
from inlet.services.runtime import serve_http
from inlet.services.stack.supervisor import PID_FILE, STATE_FILE
from inlet.services.writer.checkpoint import CHECKPOINT_KEY, parse_checkpoint

PRICED = [*CUSTOMERS, col("price", pb.COLUMN_TYPE_DECIMAL, precision=5, scale=2)]
COLS = [c.name for c in PRICED]


def table_path(lake: Path, src: Source) -> str:
    return str(lake / src.database / src.db_schema / src.table)


def dead_letters(bootstrap: str, topic: str, at_least: int) -> list[Any]:
    def read() -> list[Any]:
        letters = list(read_dead_letters(bootstrap, topic, idle_s=0.5))
        return letters if len(letters) >= at_least else []

    return list(wait_for(read, what=f"{at_least} dead letter(s) on {topic}"))


def assert_shown_stopped(writer: Any, table_id: str, tmp_path: Path, capsys: Any) -> None:
    """``/readyz`` (served as ``inlet writer run`` serves it) and ``inlet stack status`` of a stack
    whose writer is this one name the table stopped, with the reason."""
    endpoint = serve_http("127.0.0.1:0", writer.metrics.registry, writer.health, ready=writer.readiness)
    try:
        base = f"http://{endpoint.address}"
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(base + "/readyz", timeout=10)
        assert err.value.code == 503
        body = json.loads(err.value.read())
        assert body["status"] == "not ready" and "123456.78" in body["stopped"][table_id]
        assert json.loads(urllib.request.urlopen(base + "/healthz", timeout=10).read())["status"] == "ok"
        stack_dir = tmp_path / "stack"
        stack_dir.mkdir()
        (stack_dir / PID_FILE).write_text(str(os.getpid()))  # a live "supervisor"
        writer_component = {"name": "writer", "pid": os.getpid(), "alive": True, "healthy": True}
        writer_component["health"] = base + "/healthz"
        (stack_dir / STATE_FILE).write_text(
            json.dumps({"state": "running", "components": [writer_component]})
        )
        capsys.readouterr()
        root = logging.getLogger()
        handlers, level = list(root.handlers), root.level
        try:
            assert main(["stack", "status", "--dir", str(stack_dir)]) == 0
        finally:  # main configures the root logger for the command: put the test's back
            root.handlers[:] = handlers
            root.setLevel(level)
        out = capsys.readouterr().out
        assert f"table {table_id} stopped: bad row at inlet.changes.{table_id}[0]@1: " in out
        assert "123456.78" in out
    finally:
        endpoint.stop()


def test_a_bad_row_stops_its_table_only(
    start_writer, kafka_server, kafka_bootstrap, lake, prefix, tmp_path, capsys
):
    bad, good = Source(prefix, table="bad", cols=list(PRICED)), Source(prefix, table="good")
    for s in (bad, good):
        kafka_server.create_topic(s.topic, partitions=1)
    dlq = f"inlet.dlq.{prefix}"
    w = start_writer(dlq_topic=dlq)
    bpath, gpath = table_path(lake, bad), table_path(lake, good)
    produce(kafka_bootstrap, bad.topic, [bad.insert(id=1, name="a", note="x", amount=1, price=D("1.50"))])
    wait_for(lambda: read_rows(bpath, COLS, ["id"]) == bad.expected(), what="bad's first row")
    before = bad.expected()
    # offset 1: 123456.78 does not fit decimal(5, 2); offset 2 is fine but follows it
    bad_record = bad.insert(id=2, name="b", note="y", amount=2, price=D("123456.78"))
    produce(
        kafka_bootstrap,
        bad.topic,
        [bad_record, bad.insert(id=3, name="c", note="z", amount=3, price=D("2.00"))],
    )
    [letter] = dead_letters(kafka_bootstrap, dlq, 1)
    d = describe(letter)
    assert letter.value() == bad_record[1].SerializeToString()  # the record's bytes, as consumed
    assert letter.key() == b"2"
    assert (d["source_topic"], d["source_partition"], d["source_offset"]) == (bad.topic, 0, 1)
    assert "'price'" in d["reason"] and "123456.78" in d["reason"]
    assert d["error_class"] == "RowError"
    assert ("inlet-kind", b"change") in (letter.headers() or [])  # the original headers are kept

    # the table is shown stopped with the reason; the writer stays healthy but not ready
    ok, details = w.writer.health()
    assert ok and details["tables"][bad.table_id]["state"] == "stopped"
    assert "123456.78" in details["tables"][bad.table_id]["error"]
    ready, why = w.writer.readiness()
    assert not ready and "123456.78" in why["stopped"][bad.table_id]
    assert_shown_stopped(w.writer, bad.table_id, tmp_path, capsys)

    # the other table keeps committing while the stopped one commits nothing and is not retried
    produce(kafka_bootstrap, good.topic, [good.insert(id=i, name="g", note="", amount=i) for i in range(3)])
    wait_for(
        lambda: read_rows(gpath, ["id", "name", "note", "amount"], ["id"]) == good.expected(), what="good"
    )
    n = len(commits(bpath))
    produce(kafka_bootstrap, good.topic, [good.insert(id=9, name="g", note="", amount=9)])
    wait_for(
        lambda: read_rows(gpath, ["id", "name", "note", "amount"], ["id"]) == good.expected(), what="good 2"
    )
    assert len(commits(bpath)) == n
    assert read_rows(bpath, COLS, ["id"]) == before[:1]
    assert parse_checkpoint(commits(bpath)[-1][2][CHECKPOINT_KEY]) == (bad.topic, {0: 1})
    assert (
        len(list(read_dead_letters(kafka_bootstrap, dlq, idle_s=0.5))) == 1
    )  # one letter, not one per retry
    assert w.writer.health()[1]["tables"][bad.table_id]["state"] == "stopped"


def test_dead_letter_mode_commits_the_batch_without_the_bad_row(
    start_writer, kafka_server, kafka_bootstrap, lake, prefix
):
    src = Source(prefix, cols=list(PRICED))
    kafka_server.create_topic(src.topic, partitions=1)
    dlq = f"inlet.dlq.{prefix}"
    rows = [
        src.insert(id=1, name="a", note="x", amount=1, price=D("1.50")),
        src.change(
            pb.OPERATION_CREATE,
            after={"id": 2, "name": "b", "note": "y", "amount": 2, "price": D("123456.78")},
            apply=False,  # never in the table
        ),
        src.insert(id=3, name="c", note="z", amount=3, price=D("2.00")),
        src.update(id=1, name="a2", note="x", amount=5, price=D("3.25")),
    ]
    produce(kafka_bootstrap, src.topic, rows)
    garbage = b"\xff\xff\xff not a ChangeRecord"  # offset 4: an undecodable record
    p = Producer({"bootstrap.servers": kafka_bootstrap})
    p.produce(src.topic, garbage, b"junk", partition=0)
    assert p.flush(30) == 0
    produce(kafka_bootstrap, src.topic, [src.insert(id=4, name="d", note="", amount=4, price=D("4.00"))])
    w = start_writer(dlq_topic=dlq, on_bad_row="dead-letter")
    path = table_path(lake, src)
    wait_for(lambda: read_rows(path, COLS, ["id"]) == src.expected(), what="the good rows")
    letters = dead_letters(kafka_bootstrap, dlq, 2)
    bad_row, undecodable = sorted(letters, key=lambda m: describe(m)["source_offset"])
    assert bad_row.value() == rows[1][1].SerializeToString()
    assert describe(bad_row)["source_offset"] == 1 and describe(bad_row)["error_class"] == "RowError"
    assert undecodable.value() == garbage and undecodable.key() == b"junk"
    assert (
        describe(undecodable)["source_offset"] == 4 and describe(undecodable)["error_class"] == "DecodeError"
    )
    # the good rows are committed; the checkpoint is past both bad records
    data = [c for c in commits(path) if CHECKPOINT_KEY in c[2]]
    assert parse_checkpoint(data[-1][2][CHECKPOINT_KEY]) == (src.topic, {0: 6})
    ok, details = w.writer.health()
    assert ok and details["tables"][src.table_id]["state"] == "running"
    assert w.writer.readiness()[0]


def test_on_bad_row_setting_by_flag_or_environment(tmp_path: Path) -> None:
    base = [
        "writer",
        "run",
        "--kafka-bootstrap",
        "k:9092",
        "--coordinator",
        "c:50551",
        "--lake-root",
        str(tmp_path),
    ]
    config, _ = config_from_args(build_parser().parse_args(base), environ={})
    assert (config.on_bad_row, config.dlq_topic) == ("stop", "inlet.dlq")
    env = {"INLET_WRITER_ON_BAD_ROW": "dead-letter", "INLET_WRITER_DLQ_TOPIC": "lake.dlq"}
    config, _ = config_from_args(build_parser().parse_args(base), environ=env)
    assert (config.on_bad_row, config.dlq_topic) == ("dead-letter", "lake.dlq")
    with pytest.raises(UsageError, match="--on-bad-row must be stop or dead-letter, not 'skip'"):
        config_from_args(build_parser().parse_args([*base, "--on-bad-row", "skip"]), environ=env)
