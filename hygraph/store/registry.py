"""The named indexes one service hosts, beside its default index.

Layout, under the service's root (the default index's directory, `--index-dir`):
- `indexes/<name>/`: one index directory each (`store/versions.py`), its own journal, versions and
  vector collections (named after its uid, so two indexes never share a collection), and its quota
  (`quota.json`, when an admin set one: the limits that replace the service's default for it);
- `indexes/.deleting-<uuid>/`: an index being removed. Deleting renames the directory first, so the
  name is gone (404, and free to create again) at once, and the slow part (dropping collections,
  removing files) cannot leave a half-deleted index under the name.

Names are checked (`check_name`) before they touch a path: 1-64 of `[a-z0-9-]`, starting with a
letter, so a name is never a path, a key prefix or a glob.
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from hygraph.errors import InputError, StoreError
from hygraph.store.files import write_atomic
from hygraph.store.objects import is_remote, local_dir_of
from hygraph.store.versions import IndexStore

NAME_PATTERN = r"^[a-z][a-z0-9-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)
# The service's own index (the routes without `/v1/indexes/{name}`) is listed and granted under this name.
DEFAULT_INDEX = "default"
_DELETING = ".deleting-"
QUOTA_FILE = "quota.json"


class IndexExists(InputError):
    """POST /v1/indexes with a name that is taken (HTTP 409)."""


def check_name(name: str, field: str = "name") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InputError(f"{field}: an index name is 1-64 of a-z, 0-9 and '-', starting with a letter")
    return name


@dataclass(frozen=True)
class IndexInfo:
    name: str
    documents: int
    index_version: int  # 0 before the first version is published
    bytes: int | None  # the index's files (versions, segments, journal), not its vectors; None: not measured


class IndexRegistry:
    def __init__(self, root: str | os.PathLike[str], cache_dir: str = "") -> None:
        """`cache_dir`: `store.cache_dir`, where this node's directory for an index on object storage is."""
        self.uri = str(root)
        # Named indexes live in the service's own directory; a default index on object storage has none
        # yet (reserve refuses), so its root is only this node's directory for it, which holds no `indexes/`.
        self.remote = is_remote(self.uri)
        self.root = local_dir_of(self.uri, cache_dir) if self.remote else Path(root)
        self.dir = self.root / "indexes"
        self._quota_lock = threading.Lock()  # two writes of one quota file from this process: one at a time

    def path(self, name: str) -> Path:
        """The directory of index `name` (the default index: the root itself); the name is checked first."""
        if name == DEFAULT_INDEX:
            return self.root
        return self.dir / check_name(name)

    def location(self, name: str) -> str:
        """Index `name` as `IndexStore` and the updater's name take it: the service's own URI for the default
        index (an s3:// one stays one, not this node's directory for it), the directory of a named one."""
        return self.uri if name == DEFAULT_INDEX else str(self.path(name))

    def exists(self, name: str) -> bool:
        if name == DEFAULT_INDEX:
            return True
        return _NAME.fullmatch(name) is not None and (self.dir / name / "index.json").is_file()

    def names(self) -> list[str]:
        """Every index, the default first, then the named ones in name order."""
        named = sorted(p.name for p in self.dir.iterdir() if _NAME.fullmatch(p.name)
                       and (p / "index.json").is_file()) if self.dir.is_dir() else []
        return [DEFAULT_INDEX, *named]

    def reserve(self, name: str) -> Path:
        """Create index `name`'s directory and identity; IndexExists when the name is taken. The caller
        then writes its first (empty) version."""
        check_name(name)
        if name == DEFAULT_INDEX:
            raise IndexExists(f"name: an index named '{name}' exists")
        if self.remote:
            raise InputError(f"name: named indexes are not on object storage yet (this service's index is "
                             f"{self.uri}); serve a local --index-dir to host them")
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / name
        try:
            path.mkdir()  # exclusive: of two concurrent creates, one gets the 409
        except FileExistsError:
            raise IndexExists(f"name: an index named '{name}' exists") from None
        IndexStore(path, create=True)
        return path

    def info(self, name: str, size: bool = True) -> IndexInfo:
        """Documents and version from the manifest; with `size`, the bytes of its files too (a walk over them,
        which listings skip)."""
        path = self.path(name)
        store = IndexStore(self.location(name))
        current = store.current_version()
        documents = store.manifest(current).counts.get("documents", 0) if current is not None else 0
        # The index's own files; the vector store's data (one server for every index) is not counted.
        skip = {self.dir, self.root / "milvus"} if name == DEFAULT_INDEX else set()
        # An index on object storage is not walked: its size is its bucket's to report.
        total = sum(f.stat().st_size for f in _files(path, skip)) if size and not self.remote else None
        return IndexInfo(name, documents, current or 0, total)

    def quota(self, name: str) -> dict[str, Any] | None:
        """The limits an admin set on index `name` (`set_quota`); None: the service's default applies."""
        try:
            text = (self.path(name) / QUOTA_FILE).read_text()
        except FileNotFoundError:
            return None
        limits = json.loads(text)
        if not isinstance(limits, dict):
            raise StoreError(f"{self.path(name) / QUOTA_FILE}: not a JSON object")
        return limits

    def set_quota(self, name: str, limits: dict[str, Any] | None) -> None:
        """Replace index `name`'s own limits (written whole, atomically: every ingress replica reads one
        or the other); None removes them, so the service's default applies again."""
        path = self.path(name) / QUOTA_FILE
        if not self.exists(name):
            raise StoreError(f"name: no index named '{name}'")
        with self._quota_lock:
            if limits is None:
                path.unlink(missing_ok=True)
            else:
                write_atomic(path, json.dumps(limits, sort_keys=True).encode())

    def detach(self, name: str) -> Path:
        """Take index `name` out of the registry at once (a rename); returns where its files now are, for
        `indexing.build.remove_index` to drop its collections and files."""
        check_name(name)
        if name == DEFAULT_INDEX:
            raise InputError("name: the default index is the service's own and cannot be deleted")
        path = self.dir / name
        hidden = self.dir / f"{_DELETING}{uuid.uuid4().hex}"
        try:
            os.rename(path, hidden)
        except FileNotFoundError:
            raise StoreError(f"name: no index named '{name}'") from None
        return hidden

    def detached(self) -> list[Path]:
        """Indexes whose removal started and did not finish (a crash): removed again at start."""
        return sorted(p for p in self.dir.iterdir() if p.name.startswith(_DELETING)) if self.dir.is_dir() else []


def _files(path: Path, skip: set[Path]) -> Iterator[Path]:
    for entry in os.scandir(path):
        p = Path(entry.path)
        if p in skip:
            continue
        if entry.is_dir(follow_symlinks=False):
            yield from _files(p, skip)
        elif entry.is_file(follow_symlinks=False):
            yield p
