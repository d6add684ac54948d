"""The vector store Protocol: named collections of (id, vector, kind, layer, version) rows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, Sequence

import numpy as np

Metric = Literal["IP", "L2"]

# One collection per record kind (ARCHITECTURE.md §3); `hyperbolic` holds Lorentz/L2 vectors.
KINDS = ("chunks", "entities", "relations", "hyperedges", "summaries", "hyperbolic")


@dataclass(frozen=True)
class Hit:
    id: str
    score: float  # similarity for IP, squared distance for L2 (lower is nearer)
    layer: int = 0


class VectorStore(Protocol):
    def create(self, name: str, dim: int, metric: Metric) -> None:
        """Create an empty collection (dropping any leftover of the same name)."""
        ...

    def upsert(self, name: str, ids: Sequence[str], vectors: np.ndarray, version: int,
               layers: Sequence[int] | None = None) -> None: ...

    def fill(self, name: str, ids: Sequence[str], vectors: np.ndarray, version: int,
             layers: Sequence[int] | None = None) -> None:
        """Write the rows of a collection `create` just made (an upsert that need not replace older rows)."""
        ...

    def delete(self, name: str, ids: Sequence[str]) -> None: ...

    def persist(self, *names: str) -> None:
        """Make this process's writes to the `names` collections durable and visible to other processes."""
        ...

    def seal(self, name: str) -> None:
        """Make the rows written so far durable and build the vector index over them; `open` then makes the
        collection searchable (it may already be, in this process)."""
        ...

    def reopen(self, name: str, dim: int, metric: Metric) -> set[str] | None:
        """The ids held by a collection that `create(name, dim, metric)` made and a writer that was cut off
        partly filled, for `fill` to add only the others before `seal`; None where the store cannot tell
        (or it is not such a collection): then it is created and written again."""
        ...

    def open(self, name: str) -> None:
        """Make an existing collection searchable in this process (load it after a server restart)."""
        ...

    def release(self, name: str) -> None:
        """Free what holds `name` in memory for search (a build's collections, which only their readers search:
        each reader's `open` loads it again)."""
        ...

    def search(self, name: str, queries: np.ndarray, k: int,
               layer: int | None = None) -> list[list[Hit]]: ...

    def fetch(self, name: str, ids: Sequence[str], fresh: bool = False) -> np.ndarray:
        """The stored vectors of `ids`, in that order (float32); StoreError names an id that is absent.
        `fresh`: as every write persisted before the call left them (otherwise a row may be a few seconds old)."""
        ...

    def drop(self, name: str) -> None: ...

    def exists(self, name: str) -> bool: ...

    def ping(self) -> None:
        """Raise StoreUnavailable when the store cannot be reached."""
        ...

    def close(self) -> None: ...
