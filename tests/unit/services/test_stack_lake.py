"""``inlet stack up --lake``: where the lake goes, kept in config.json, one-line errors (issue #25 item 1).

Only the settings: the pipeline with its lake on S3 runs in tests/e2e/replication/test_pipeline.py."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from inlet.services.cli.errors import UsageError
from inlet.services.cli.stack import ENV_PREFIX, UP_SETTINGS, _config
from inlet.services.runtime import add_arguments
from inlet.services.stack.supervisor import StackConfig


def config(directory: Path, *argv: str) -> StackConfig:
    parser = argparse.ArgumentParser()
    add_arguments(parser, UP_SETTINGS, ENV_PREFIX)
    return _config(parser.parse_args(["--dir", str(directory), *argv]))


def test_lake_roots(tmp_path: Path) -> None:
    assert config(tmp_path).lake_root == str(tmp_path / "lake")
    assert config(tmp_path, "--lake", "s3").lake_root == "s3://lake"
    external = config(tmp_path, "--lake", "s3://tables/prod")
    assert external.lake_root == "s3://tables/prod"
    # the stack runs SeaweedFS only for its own lake bucket (Kafka keeps its data under DIR/kafka)
    assert config(tmp_path, "--lake", "s3").embedded_s3
    assert not config(tmp_path, "--lake", "s3://tables/x").embedded_s3
    assert not config(tmp_path).embedded_s3


def test_lake_is_kept_and_another_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config(tmp_path, "--lake", "s3").save()
    assert config(tmp_path).lake == "s3"  # a later `up` repeats it
    with pytest.raises(UsageError, match="keeps its lake at s3, not local"):
        config(tmp_path, "--lake", "local")
    monkeypatch.setenv("INLET_STACK_LAKE", "s3://other/x")
    with pytest.raises(UsageError, match="keeps its lake at s3, not s3://other/x"):
        config(tmp_path)


@pytest.mark.parametrize("bad", ["disk", "s3://", "/tmp/lake"])
def test_bad_lake_is_one_line(tmp_path: Path, bad: str) -> None:
    with pytest.raises(UsageError) as e:
        config(tmp_path, "--lake", bad)
    assert "\n" not in str(e.value) and ("--lake" in str(e.value) or "bucket" in str(e.value))
