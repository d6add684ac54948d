"""Durable file writes: a file or directory entry is on disk before anything refers to it."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    with path.open("rb") as fh:
        os.fsync(fh.fileno())


@contextmanager
def atomic_writer(path: Path) -> Iterator[BinaryIO]:
    """A file to write `path`'s new content into, streamed (no copy of it in memory), that replaces `path` in
    one step when the block ends without an error: a reader sees the old or the new content, never a part."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with tmp.open("wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    fsync_dir(path.parent)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` in one step: a reader sees the old or the new content, never a part."""
    with atomic_writer(path) as fh:
        fh.write(data)
