"""A real SeaweedFS S3 server per test module (``s3_server``), and per test a fresh lake prefix in its
``lake`` bucket (``s3_lake``: ``s3://lake/<test>``) with the AWS environment pointing at the server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from inlet.core.s3 import S3Options
from inlet.services.stack.s3 import EmbeddedS3

BUCKET = "lake"


@pytest.fixture(scope="module")
def s3_server() -> Iterator[EmbeddedS3]:
    with EmbeddedS3() as server:
        server.create_bucket(BUCKET)
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
    return f"s3://{BUCKET}/t{uuid.uuid4().hex[:10]}"


@pytest.fixture
def lake(s3_lake: str) -> str:
    """The lake root of the ``coordinator`` fixture (tests/integration/conftest.py): on S3 here."""
    return s3_lake
