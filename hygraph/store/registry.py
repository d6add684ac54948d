"""The named indexes one service hosts, beside its default index.

Where they live depends on where the service's own index (`--index-dir`, the default index) is:

- a local directory: `indexes/<name>/` under it, one index directory each (`store/versions.py`: its own
  journal, versions and vector collections, named after its uid, so two indexes never share a collection).
  Deleting renames the directory to `indexes/.deleting-<uuid>/` first, so the name is gone (404, and free
  to create again) at once, and the slow part (dropping collections, removing files) cannot leave a
  half-deleted index under the name.
- object storage (`s3://bucket/prefix`): a catalog record `catalog/<name>.json` under the prefix names the
  index's own prefix, `indexes/<uuid>/`, made fresh for each index. There is no rename on object storage,
  so the record is the name: creating writes it with `put_if_absent` (of two concurrent creates one gets
  the 409), deleting first records the removal (`catalog-deleting/<uuid>.json`) and then deletes the
  record, so the name is free at once while the old index's objects are removed under a prefix no new
  index will ever use.

Either way an index's quota (`quota.json`, when an admin set one: the limits that replace the service's
default for it) is an object of the index itself.

Names are checked (`check_name`) before they touch a path or key: 1-64 of `[a-z0-9-]`, starting with a
letter, so a name is never a path, a key prefix or a glob.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Iterator

from hygraph.errors import InputError, StoreError, StoreUnavailable
from hygraph.store.objects import Objects, is_remote, local_dir_of, open_objects
from hygraph.store.versions import IndexStore

NAME_PATTERN = r"^[a-z][a-z0-9-]{0,63}$"
_NAME = re.compile(NAME_PATTERN)
# The service's own index (the routes without `/v1/indexes/{name}`) is listed and granted under this name.
DEFAULT_INDEX = "default"
_DELETING = ".deleting-"
QUOTA_FILE = "quota.json"
CATALOG = "catalog/"
REMOVING = "catalog-deleting/"
DATA = "indexes/"
_UUID = re.compile(r"^[0-9a-f]{32}$")
LOCATION_CACHE_S = 5.0  # how long a service node trusts where a named index on object storage is
_SEEN_LIMIT = 10_000


class IndexExists(InputError):
    """POST /v1/indexes with a name that is taken (HTTP 409)."""


class NoSuchIndex(StoreError):
    """No index has the name (HTTP 404); a store out of reach is a plain StoreError instead."""


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


class DirectoryCatalog:
    """Named indexes as directories under a local service root."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "indexes"

    def location(self, name: str) -> str | None:
        path = self.dir / name
        return str(path) if (path / "index.json").is_file() else None

    def names(self) -> list[str]:
        return sorted(p.name for p in self.dir.iterdir() if _NAME.fullmatch(p.name)
                      and (p / "index.json").is_file()) if self.dir.is_dir() else []

    def reserve(self, name: str) -> str:
        self.dir.mkdir(parents=True, exist_ok=True)
        path = self.dir / name
        try:
            path.mkdir()  # exclusive: of two concurrent creates, one gets the 409
        except FileExistsError:
            raise IndexExists(f"name: an index named '{name}' exists") from None
        IndexStore(path, create=True)
        return str(path)

    def created(self, name: str) -> float:
        return (self.dir / name).stat().st_mtime

    def detach(self, name: str) -> str:
        hidden = self.dir / f"{_DELETING}{uuid.uuid4().hex}"
        try:
            os.rename(self.dir / name, hidden)
        except FileNotFoundError:
            raise NoSuchIndex(f"name: no index named '{name}'") from None
        return str(hidden)

    def detached(self) -> list[str]:
        return sorted(str(p) for p in self.dir.iterdir() if p.name.startswith(_DELETING)) \
            if self.dir.is_dir() else []


class ObjectCatalog:
    """Named indexes as catalog records under a service root on object storage, each naming its own prefix."""

    def __init__(self, uri: str, objects: Objects, cache_dir: str) -> None:
        self.uri, self.objects, self.cache_dir = uri, objects, cache_dir
        # name -> (time.monotonic() of the read, its location or None): every request to a named index asks
        # where it is, and a GET per request would cost more than the request's own work on a small index.
        self._seen: dict[str, tuple[float, str | None]] = {}

    def _entry(self, name: str) -> dict[str, Any] | None:
        data = self.objects.get(f"{CATALOG}{name}.json")
        if data is None:
            return None
        try:
            entry = json.loads(data)
            if not _UUID.fullmatch(entry["data"]):
                raise ValueError("data")
        except (ValueError, KeyError, TypeError) as exc:
            raise StoreError(f"{self.uri}/{CATALOG}{name}.json: not a catalog record ({exc})") from None
        return entry

    def _at(self, data: str) -> str:
        return f"{self.uri}/{DATA}{data}"

    def location(self, name: str) -> str | None:
        """Read again after LOCATION_CACHE_S (another node's create or delete is seen within that), and answered
        from the last read while the bucket is out of reach."""
        now = time.monotonic()
        seen = self._seen.get(name)
        if seen is not None and now - seen[0] < LOCATION_CACHE_S:
            return seen[1]
        try:
            entry = self._entry(name)
        except StoreUnavailable:
            if seen is None:
                raise
            return seen[1]
        found = self._at(entry["data"]) if entry is not None else None
        if len(self._seen) >= _SEEN_LIMIT:
            self._seen.clear()
        self._seen[name] = (now, found)
        return found

    def names(self) -> list[str]:
        found = (k[len(CATALOG):].removesuffix(".json") for k in self.objects.list(CATALOG))
        return sorted(n for n in found if _NAME.fullmatch(n))

    def reserve(self, name: str) -> str:
        if self.objects.get(f"{CATALOG}{name}.json") is not None:
            raise IndexExists(f"name: an index named '{name}' exists")
        data = uuid.uuid4().hex
        IndexStore(self._at(data), create=True, cache_dir=self.cache_dir)
        record = json.dumps({"data": data, "created": time.time()}).encode()
        self._seen.pop(name, None)
        if not self.objects.put_if_absent(f"{CATALOG}{name}.json", record):
            IndexStore(self._at(data), cache_dir=self.cache_dir).purge()  # another create won the name
            raise IndexExists(f"name: an index named '{name}' exists")
        return self._at(data)

    def created(self, name: str) -> float:
        entry = self._entry(name)
        if entry is None:
            raise NoSuchIndex(f"name: no index named '{name}'")
        return float(entry.get("created", 0.0))

    def detach(self, name: str) -> str:
        entry = self._entry(name)
        if entry is None:
            raise NoSuchIndex(f"name: no index named '{name}'")
        # The removal is recorded before the name goes, so a crash in between leaves it to `detached`.
        self.objects.put(f"{REMOVING}{entry['data']}.json", json.dumps({"name": name}).encode())
        self._seen.pop(name, None)
        if not self.objects.delete(f"{CATALOG}{name}.json"):
            raise NoSuchIndex(f"name: no index named '{name}'")  # a concurrent delete took it first
        return self._at(entry["data"])

    def detached(self) -> list[str]:
        """Removals not finished. A record whose index is gone is done: it is dropped here. So is one whose
        index still has a catalog record (a crash after recording the removal, before deleting the name)."""
        live = {self._entry(n)["data"] for n in self.names()}  # type: ignore[index]
        out = []
        for key in self.objects.list(REMOVING):
            data = key[len(REMOVING):].removesuffix(".json")
            if not _UUID.fullmatch(data):
                continue
            if data in live or not self.objects.list(f"{DATA}{data}/"):
                self.objects.delete(key)
            else:
                out.append(self._at(data))
        return sorted(out)


class IndexRegistry:
    def __init__(self, root: str | os.PathLike[str], cache_dir: str = "") -> None:
        """`cache_dir`: `store.cache_dir`, where this node's directories for indexes on object storage are."""
        self.uri = str(root)
        self.remote = is_remote(self.uri)
        self.cache_dir = cache_dir
        # This node's directory for the default index (the index itself when local): the managed vector store
        # and the caches of the whole service live there.
        self.root = local_dir_of(self.uri, cache_dir) if self.remote else Path(root)
        self._quota_lock = threading.Lock()  # two writes of one quota from this process: one at a time

    @cached_property
    def catalog(self) -> DirectoryCatalog | ObjectCatalog:
        """Made on first use: a registry on object storage connects to its bucket only when asked."""
        if self.remote:
            return ObjectCatalog(self.uri.rstrip("/"), open_objects(self.uri, self.cache_dir), self.cache_dir)
        return DirectoryCatalog(self.root)

    def location(self, name: str) -> str:
        """Index `name` as `IndexStore`, the updater's name and the engine take it: the service's own URI for
        the default index, a named one's directory or s3:// prefix; StoreError when there is none."""
        if name == DEFAULT_INDEX:
            return self.uri
        found = self.catalog.location(check_name(name))
        if found is None:
            raise NoSuchIndex(f"name: no index named '{name}'")
        return found

    def path(self, name: str) -> Path:
        """This node's own directory for index `name` (the index itself when local)."""
        return local_dir_of(self.location(name), self.cache_dir)

    def exists(self, name: str) -> bool:
        if name == DEFAULT_INDEX:
            return True
        return _NAME.fullmatch(name) is not None and self.catalog.location(name) is not None

    def names(self) -> list[str]:
        """Every index, the default first, then the named ones in name order."""
        return [DEFAULT_INDEX, *self.catalog.names()]

    def reserve(self, name: str) -> str:
        """Create index `name`'s identity; returns its location; IndexExists when the name is taken. The
        caller then writes its first (empty) version."""
        check_name(name)
        if name == DEFAULT_INDEX:
            raise IndexExists(f"name: an index named '{name}' exists")
        return self.catalog.reserve(name)

    def created(self, name: str) -> float:
        """When index `name` was made (the default index: when its directory or first record was)."""
        if name != DEFAULT_INDEX:
            return self.catalog.created(check_name(name))
        if not self.remote:
            return self.root.stat().st_mtime
        store = IndexStore(self.uri, cache_dir=self.cache_dir)
        first = store.versions()
        return store.manifest(first[0]).created if first else time.time()

    def info(self, name: str, size: bool = True) -> IndexInfo:
        """Documents and version from the manifest; with `size`, the bytes of its files too (a walk over them,
        which listings skip)."""
        store = IndexStore(self.location(name), cache_dir=self.cache_dir)
        current = store.current_version()
        documents = store.manifest(current).counts.get("documents", 0) if current is not None else 0
        # The index's own files; the vector store's data (one server for every index) is not counted.
        # An index on object storage is not walked: its size is its bucket's to report.
        total = None
        if size and not self.remote:
            skip = {self.root / "indexes", self.root / "milvus"} if name == DEFAULT_INDEX else set()
            total = sum(f.stat().st_size for f in _files(Path(store.uri), skip))
        return IndexInfo(name, documents, current or 0, total)

    def _objects(self, name: str) -> Objects:
        return open_objects(self.location(name), self.cache_dir)

    def quota(self, name: str) -> dict[str, Any] | None:
        """The limits an admin set on index `name` (`set_quota`); None: the service's default applies."""
        try:
            objects = self._objects(name)
        except (NoSuchIndex, InputError):
            return None  # deleted meanwhile
        text = objects.get(QUOTA_FILE)
        if text is None:
            return None
        limits = json.loads(text)
        if not isinstance(limits, dict):
            raise StoreError(f"{objects.uri}/{QUOTA_FILE}: not a JSON object")
        return limits

    def set_quota(self, name: str, limits: dict[str, Any] | None) -> None:
        """Replace index `name`'s own limits (written whole: every ingress replica reads one or the other);
        None removes them, so the service's default applies again."""
        if name == DEFAULT_INDEX or not self.exists(name):
            raise NoSuchIndex(f"name: no index named '{name}'")
        objects = self._objects(name)
        with self._quota_lock:
            if limits is None:
                objects.delete(QUOTA_FILE)
            else:
                objects.put(QUOTA_FILE, json.dumps(limits, sort_keys=True).encode())

    def detach(self, name: str) -> str:
        """Take index `name` out of the registry at once; returns where its files now are, for
        `indexing.build.remove_index` to drop its collections and files."""
        check_name(name)
        if name == DEFAULT_INDEX:
            raise InputError("name: the default index is the service's own and cannot be deleted")
        return self.catalog.detach(name)

    def detached(self) -> list[str]:
        """Indexes whose removal started and did not finish (a crash): removed again at start."""
        return self.catalog.detached()


def _files(path: Path, skip: set[Path]) -> Iterator[Path]:
    for entry in os.scandir(path):
        p = Path(entry.path)
        if p in skip:
            continue
        if entry.is_dir(follow_symlinks=False):
            yield from _files(p, skip)
        elif entry.is_file(follow_symlinks=False):
            yield p
