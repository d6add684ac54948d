"""A build's intermediate results on disk: named arrays (.npz) and Arrow tables (.arrow), each written atomically.

What a resumable build keeps between runs (indexing/checkpoint.py): a file is there whole or not at all
(temp file, fsync, rename), so a build killed while writing one finds the stage undone, never a part.
Arrays are read without pickle: only numeric and string arrays are stored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa

from hygraph.errors import StoreError
from hygraph.store.files import atomic_writer


def write_arrays(path: Path, arrays: dict[str, np.ndarray]) -> int:
    """Store `arrays` under their names in one .npz file, streamed to disk (a build's vectors are the largest
    thing it holds: no second copy of them in memory); returns the bytes written."""
    with atomic_writer(path) as fh:
        np.savez(fh, **arrays)
        return fh.tell()


def read_arrays(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except (OSError, ValueError) as exc:
        raise StoreError(f"{path}: not a readable array file ({exc}); rerun with --restart") from None


def write_table(path: Path, table: pa.Table) -> int:
    """Store `table` as one Arrow IPC file, streamed to disk; returns the bytes written."""
    with atomic_writer(path) as fh:
        with pa.ipc.new_file(pa.PythonFile(fh, mode="w"), table.schema) as writer:
            writer.write_table(table)
        return fh.tell()


def read_table(path: Path, columns: Sequence[str] | None = None) -> pa.Table:
    """The table at `path`, or only its `columns` (the file is memory-mapped: the others are never read)."""
    try:
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()
            return table.select(list(columns)) if columns is not None else table
    except (OSError, pa.ArrowInvalid) as exc:
        raise StoreError(f"{path}: not a readable Arrow file ({exc}); rerun with --restart") from None
