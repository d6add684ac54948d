"""Fixtures shared by the unit tests of the object store and of what lives on it."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture(params=["local", "s3"])
def uri(request, tmp_path, monkeypatch) -> str:
    """An empty index root: a local directory, or a prefix in a fresh bucket of the session's S3 server."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the S3 cache's default directory
    if request.param == "local":
        (tmp_path / "idx").mkdir()
        return str(tmp_path / "idx")
    server = request.getfixturevalue("s3_env")
    return f"s3://{server.bucket}/{uuid.uuid4().hex[:12]}/index"
