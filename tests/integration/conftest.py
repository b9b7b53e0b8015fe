"""Fixtures shared by the integration tests: ``lake``, ``coordinator`` and ``slot`` (from
:mod:`support.lake_fixtures`; directories override ``coordinator`` where they need another) and
``events_coordinator`` for services that follow commit events. ``s3_server`` is a real SeaweedFS S3
server per module with a bucket ``lake``; ``s3_lake`` a fresh ``s3://lake/<prefix>`` per test, reached
through the AWS environment variables (set for the test), ``s3_options`` the same explicitly."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.lake_fixtures import coordinator, lake, slot  # noqa: F401 (fixtures)

from inlet.core.s3 import S3Options
from inlet.services.coordinator.config import CoordinatorConfig
from inlet.services.coordinator.server import RunningServer, serve
from inlet.services.stack.s3 import EmbeddedS3


@pytest.fixture
def events_coordinator(
    pg_url: str, tmp_path: Path, kafka_bootstrap: str, kafka_topic: str
) -> Iterator[RunningServer]:
    """A coordinator (insecure, loopback) whose commit events go to ``kafka_topic``; tables under tmp_path."""
    server = serve(
        CoordinatorConfig(
            listen="127.0.0.1:0",
            database_url=pg_url,
            lake_roots=(str(tmp_path),),
            insecure=True,
            kafka_bootstrap=kafka_bootstrap,
            topic=kafka_topic,
            grace_s=1.0,
        )
    )
    try:
        yield server
    finally:
        server.stop(0)


S3_BUCKET = "lake"


@pytest.fixture(scope="module")
def s3_server() -> Iterator[EmbeddedS3]:
    with EmbeddedS3() as server:
        server.create_bucket(S3_BUCKET)
        yield server


@pytest.fixture
def s3_options(s3_server: EmbeddedS3) -> S3Options:
    return S3Options(
        endpoint=s3_server.endpoint,
        region=s3_server.region,
        access_key=s3_server.access_key,
        secret_key=s3_server.secret_key,
    )


@pytest.fixture
def s3_lake(s3_options: S3Options, monkeypatch: pytest.MonkeyPatch) -> str:
    """``s3://lake/<unique>``, reachable through the AWS environment variables of this test."""
    for name in ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in s3_options.to_env().items():
        monkeypatch.setenv(name, value)
    return f"s3://{S3_BUCKET}/t{uuid.uuid4().hex[:10]}"
