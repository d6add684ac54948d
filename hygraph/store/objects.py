"""Where an index's files live: a local directory or an S3 bucket, behind one small interface of objects.

Keys are `/`-separated strings under the index's root (`versions/000003.json`, `segments/chunks/000003-0.arrow`).
Every operation an index needs is here: `get`, `put`, `put_if_absent` (the one conditional write that commits
a version and takes a lease: of two callers only one gets True), `list` of a prefix, `delete`, `size`, and
`local_path`, a file on this node that holds an immutable object, to memory-map.

- `LocalObjects`: the files themselves. `put` writes a temporary file, fsyncs it and renames it into place;
  `put_if_absent` links the fsynced temporary file to the key's name (`os.link` fails on an existing name),
  so a reader never sees a part of a file, and `local_path` is the file: local indexes keep their speed.
- `S3Objects`: boto3, with endpoint, region and credentials from the standard AWS variables and files
  (`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_DEFAULT_REGION`, `AWS_PROFILE`) as
  boto3 reads them. `put_if_absent` is `PutObject` with `If-None-Match: *` (412 or 409: the key exists).
  `local_path` fetches the object once into this node's cache (`ObjectCache`), where every reader of the node
  maps the same copy.

`open_objects(uri)` picks one: `s3://bucket/prefix` or a local path. Every key is checked (`check_key`): no
empty, `.` or `..` parts, so no string reaches outside the index root.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import threading
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Iterator

from hygraph.errors import InputError, StoreError, StoreUnavailable
from hygraph.store.files import fsync_dir

S3_SCHEME = "s3://"
DEFAULT_CACHE_DIR = "~/.cache/hygraph/indexes"
DEFAULT_CACHE_BYTES = 20 * 2**30
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_PART = re.compile(r"^[A-Za-z0-9._=+-]+$")


def is_remote(uri: str | os.PathLike[str]) -> bool:
    return str(uri).startswith(S3_SCHEME)


def index_uri(uri: str | os.PathLike[str]) -> str:
    """One name for the index at `uri` in every process (actor names, deployment arguments): an s3:// uri
    as given, a local path made absolute (Path.resolve would turn an s3:// uri into a local path)."""
    text = str(uri)
    return text if is_remote(text) else str(Path(text).resolve())


def check_key(key: str) -> str:
    """`key` when it is a relative `/`-separated key of plain parts; InputError otherwise."""
    parts = key.split("/")
    if not key or any(p in ("", ".", "..") or not _PART.match(p) for p in parts):
        raise InputError(f"object key {key!r}: not a relative key of plain names")
    return key


def parse_s3(uri: str) -> tuple[str, str]:
    """(bucket, prefix without slashes at either end) of `s3://bucket/prefix`; InputError naming what is wrong."""
    rest = uri[len(S3_SCHEME):]
    bucket, _, prefix = rest.partition("/")
    if not _BUCKET.match(bucket) or ".." in bucket:
        raise InputError(f"index uri {uri}: {bucket!r} is not an S3 bucket name (3-63 of a-z 0-9 . -)")
    prefix = prefix.strip("/")
    if prefix:
        check_key(prefix)
    return bucket, prefix


class Objects(ABC):
    """The objects under one index root."""

    uri: str
    local_dir: Path  # this node's own directory for the index: derived structures, build checkpoints, caches

    @abstractmethod
    def get(self, key: str) -> bytes | None:
        """The object's bytes, None when there is none."""

    @abstractmethod
    def put(self, key: str, data: bytes, durable: bool = True) -> None:
        """Write (or replace) the object whole: a reader sees the old or the new bytes. `durable=False`: it
        need not outlive a crash of this machine (a lease record: the crash ends its holder too)."""

    @abstractmethod
    def put_if_absent(self, key: str, data: bytes, durable: bool = True) -> bool:
        """Write the object unless the key exists; False when it does (another writer was first)."""

    @abstractmethod
    def put_file(self, key: str, path: Path) -> None:
        """Store the local file `path` (written and fsynced) as the immutable object `key`; `path` is moved."""

    @abstractmethod
    def list(self, prefix: str, start_after: str = "") -> list[str]:
        """Every key under `prefix` (a folder ending in `/`, or a key's start), sorted; with `start_after`,
        only the keys after that one (S3 lists from there: a long folder's tail costs only the tail)."""

    @abstractmethod
    def delete(self, key: str) -> int:
        """Remove the object; its bytes (0 when it was not there)."""

    @abstractmethod
    def size(self, key: str) -> int | None:
        """The object's bytes, None when there is none."""

    @abstractmethod
    def local_path(self, key: str) -> Path | None:
        """A file on this node holding the immutable object `key` (to map), None when there is none."""

    @abstractmethod
    def staging_dir(self) -> Path:
        """A local directory to write new immutable objects into before `put_file`."""


def _write(path: Path, data: bytes, durable: bool) -> None:
    with path.open("wb") as fh:
        fh.write(data)
        if durable:
            fh.flush()
            os.fsync(fh.fileno())


class LocalObjects(Objects):
    def __init__(self, root: Path) -> None:
        self.root = root
        self.uri = str(root)
        self.local_dir = root

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def _below_root(self, path: Path) -> None:
        """Make `path`'s directories below the index's root, never the root itself: a late write (a lease
        renewal) to an index deleted meanwhile must not bring its directory back under its name."""
        if not self.root.is_dir():
            raise StoreError(f"{self.uri}: the index directory is gone (deleted or moved)")
        path.parent.mkdir(parents=True, exist_ok=True)

    def _tmp(self, path: Path) -> Path:
        self._below_root(path)
        return path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")

    def get(self, key: str) -> bytes | None:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            return None

    def put(self, key: str, data: bytes, durable: bool = True) -> None:
        path = self._path(key)
        tmp = self._tmp(path)
        _write(tmp, data, durable)
        os.replace(tmp, path)
        if durable:
            fsync_dir(path.parent)

    def put_if_absent(self, key: str, data: bytes, durable: bool = True) -> bool:
        path = self._path(key)
        tmp = self._tmp(path)
        _write(tmp, data, durable)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            tmp.unlink()
        if durable:
            fsync_dir(path.parent)
        return True

    def put_file(self, key: str, path: Path) -> None:
        final = self._path(key)
        if path != final:  # segments are written in place: nothing to move
            self._below_root(final)
            os.replace(path, final)
            fsync_dir(final.parent)

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        folder, _, start = prefix.rpartition("/")
        base = self.root / folder if folder else self.root
        if folder:
            check_key(folder)
        if not base.is_dir():
            return []
        out: list[str] = []
        for dirpath, _, files in os.walk(base):
            rel = Path(dirpath).relative_to(self.root).as_posix()
            for name in files:
                key = name if rel == "." else f"{rel}/{name}"
                if key.startswith(prefix) and key > start_after and not name.startswith("."):
                    out.append(key)
        return sorted(out)

    def delete(self, key: str) -> int:
        path = self._path(key)
        try:
            size = path.stat().st_size
            path.unlink()
        except FileNotFoundError:
            return 0
        return size

    def size(self, key: str) -> int | None:
        try:
            return self._path(key).stat().st_size
        except FileNotFoundError:
            return None

    def local_path(self, key: str) -> Path | None:
        path = self._path(key)
        return path if path.is_file() else None

    def staging_dir(self) -> Path:
        return self.root  # segments are written in place: no copy on a local disk


class ObjectCache:
    """A node's copies of immutable objects, bounded by `max_bytes`, least recently used out.

    A copy is fetched once into a temporary name, its size checked against the object's, and renamed into
    place, so every process of the node maps the same file and none sees a part of one. Use (the file's
    mtime) orders eviction. An evicted file that a reader has mapped stays readable through its mapping.
    """

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory, self.max_bytes = directory, max_bytes
        self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.fetched_bytes = 0

    def path(self, key: str) -> Path:
        return self.directory / check_key(key)

    def lookup(self, key: str) -> Path | None:
        path = self.path(key)
        try:
            os.utime(path)
        except FileNotFoundError:
            return None
        return path

    def add(self, key: str, fill: Any, expected: int | None) -> Path:
        """The cached copy of `key`, made by `fill(tmp_path)` when absent; `expected` bytes (None: unchecked)."""
        path = self.path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            fill(tmp)
            got = tmp.stat().st_size
            if expected is not None and got != expected:
                raise StoreError(f"cached copy of {key}: {got} bytes fetched, the object has {expected}")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        with self._lock:
            self.fetched_bytes += path.stat().st_size
        self.trim()
        return path

    def _files(self) -> Iterator[tuple[float, int, Path]]:
        for dirpath, _, files in os.walk(self.directory):
            for name in files:
                if name.startswith("."):
                    continue
                p = Path(dirpath) / name
                try:
                    st = p.stat()
                except FileNotFoundError:
                    continue
                yield st.st_mtime, st.st_size, p

    def trim(self) -> int:
        """Remove the least recently used copies until the cache holds at most `max_bytes`; bytes removed."""
        files = sorted(self._files())
        total = sum(size for _, size, _ in files)
        removed = 0
        for _, size, p in files:
            if total <= self.max_bytes:
                break
            p.unlink(missing_ok=True)
            total -= size
            removed += size
        return removed


def _s3_error(exc: Exception, what: str) -> StoreError:
    """A StoreError naming the cause; StoreUnavailable (retryable, 503 with Retry-After) where the server is
    out of reach or answered that it cannot serve now, so that writers wait for it instead of failing jobs."""
    from botocore.exceptions import (ClientError, ConnectionClosedError, ConnectTimeoutError, EndpointConnectionError,
                                     NoCredentialsError, ReadTimeoutError)

    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if code == "NoSuchBucket":
            return StoreError(f"{what}: the bucket does not exist")
        if code in ("AccessDenied", "403", "InvalidAccessKeyId", "SignatureDoesNotMatch"):
            return StoreError(f"{what}: access denied ({code}; check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY)")
        message = f"{what}: {code or 'error'} {exc.response.get('Error', {}).get('Message', '')}".rstrip()
        return StoreUnavailable(message) if isinstance(status, int) and status >= 500 else StoreError(message)
    if isinstance(exc, (EndpointConnectionError, ConnectTimeoutError, ReadTimeoutError, ConnectionClosedError)):
        return StoreUnavailable(f"{what}: the S3 endpoint is unreachable ({exc}; check AWS_ENDPOINT_URL)")
    if isinstance(exc, NoCredentialsError):
        return StoreError(f"{what}: no AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
    return StoreError(f"{what}: {type(exc).__name__}: {exc}")


# What boto3 reads an S3 client's endpoint, region and credentials from. A process keeps one client per set of
# values: making one costs ~15 ms of CPU, a client is safe to share between threads, and a service opens an
# index's objects per request (an index's info, a named index's quota and location).
_CLIENT_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
               "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE",
               "AWS_SHARED_CREDENTIALS_FILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE")
_clients: dict[tuple[str | None, ...], Any] = {}
_buckets_seen: set[tuple[tuple[str | None, ...], str]] = set()  # (client, bucket) found once: not asked again
_clients_lock = threading.Lock()


def _s3_client() -> tuple[tuple[str | None, ...], Any]:
    """This process's S3 client for the current environment, and the environment's values (its key)."""
    env = tuple(os.environ.get(name) for name in _CLIENT_ENV)
    with _clients_lock:  # a boto3 session is not safe to make clients from on two threads at once
        client = _clients.get(env)
        if client is None:
            import boto3
            from botocore.config import Config

            # A session of its own: boto3's default session resolves credentials once per process and would
            # keep them after the environment changed. Retries with backoff for throttling and dropped
            # connections; short connect timeout so that an unreachable endpoint is an error in seconds.
            client = _clients[env] = boto3.session.Session().client(
                "s3", config=Config(retries={"max_attempts": 4, "mode": "standard"}, connect_timeout=5,
                                    read_timeout=60))
        return env, client


class S3Objects(Objects):
    def __init__(self, uri: str, cache_dir: str = "", cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.bucket, self.prefix = parse_s3(uri)
        self.uri = f"{S3_SCHEME}{self.bucket}/{self.prefix}".rstrip("/")
        env, self.client = _s3_client()
        self.local_dir = local_dir_of(self.uri, cache_dir)
        self.cache = ObjectCache(self.local_dir / "objects", cache_bytes)
        self.uploaded_bytes = 0
        if (env, self.bucket) not in _buckets_seen:
            self._check_bucket()
            _buckets_seen.add((env, self.bucket))

    def _check_bucket(self) -> None:
        try:
            self.client.head_bucket(Bucket=self.bucket)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a StoreError naming its cause
            if _code(exc) in ("404", "NoSuchBucket"):
                raise StoreError(f"{self.uri}: the bucket {self.bucket} does not exist") from None
            raise _s3_error(exc, self.uri) from None

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def get(self, key: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except Exception as exc:  # noqa: BLE001
            if _code(exc) in ("NoSuchKey", "404"):
                return None
            raise _s3_error(exc, f"{self.uri}/{key}") from None

    def put(self, key: str, data: bytes, durable: bool = True) -> None:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        except Exception as exc:  # noqa: BLE001
            raise _s3_error(exc, f"{self.uri}/{key}") from None
        self.uploaded_bytes += len(data)

    def put_if_absent(self, key: str, data: bytes, durable: bool = True) -> bool:
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, IfNoneMatch="*")
        except Exception as exc:  # noqa: BLE001
            if _code(exc) in ("PreconditionFailed", "412", "ConditionalRequestConflict", "409"):
                return False
            raise _s3_error(exc, f"{self.uri}/{key}") from None
        self.uploaded_bytes += len(data)
        return True

    def put_file(self, key: str, path: Path) -> None:
        size = path.stat().st_size
        try:
            self.client.upload_file(str(path), self.bucket, self._key(key))
        except Exception as exc:  # noqa: BLE001
            path.unlink(missing_ok=True)
            raise _s3_error(exc, f"{self.uri}/{key}") from None
        self.uploaded_bytes += size
        # The writer's copy becomes this node's cached copy: reading it back fetches nothing.
        self.cache.add(key, lambda tmp: os.replace(path, tmp), size)

    def list(self, prefix: str, start_after: str = "") -> list[str]:
        full = self._key(prefix.rstrip("/")) + ("/" if prefix.endswith("/") else "") if prefix else \
            (f"{self.prefix}/" if self.prefix else "")
        cut = len(self.prefix) + 1 if self.prefix else 0
        out: list[str] = []
        after = {"StartAfter": self._key(start_after)} if start_after else {}
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full,
                                                                               **after):
                out.extend(o["Key"][cut:] for o in page.get("Contents", ()))
        except Exception as exc:  # noqa: BLE001
            raise _s3_error(exc, f"{self.uri}/{prefix}") from None
        return sorted(out)

    def delete(self, key: str) -> int:
        size = self.size(key)
        if size is None:
            return 0
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as exc:  # noqa: BLE001
            raise _s3_error(exc, f"{self.uri}/{key}") from None
        self.cache.path(key).unlink(missing_ok=True)
        return size

    def size(self, key: str) -> int | None:
        try:
            return int(self.client.head_object(Bucket=self.bucket, Key=self._key(key))["ContentLength"])
        except Exception as exc:  # noqa: BLE001
            if _code(exc) in ("NoSuchKey", "404"):
                return None
            raise _s3_error(exc, f"{self.uri}/{key}") from None

    def local_path(self, key: str) -> Path | None:
        found = self.cache.lookup(key)
        if found is not None:
            return found
        try:  # one GET: absent (404) or streamed into the cache, its length checked
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key))
        except Exception as exc:  # noqa: BLE001
            if _code(exc) in ("NoSuchKey", "404"):
                return None
            raise _s3_error(exc, f"{self.uri}/{key}") from None

        def fill(tmp: Path) -> None:
            try:
                with tmp.open("wb") as fh:
                    for chunk in response["Body"].iter_chunks(1 << 20):
                        fh.write(chunk)
            except Exception as exc:  # noqa: BLE001 - a dropped connection mid-body
                raise _s3_error(exc, f"{self.uri}/{key}") from None

        return self.cache.add(key, fill, int(response["ContentLength"]))

    def staging_dir(self) -> Path:
        path = self.local_dir / "staging" / f"{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"
        path.mkdir(parents=True, exist_ok=True)
        return path


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", "")) or str(
            response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
    return ""


def local_dir_of(uri: str | os.PathLike[str], cache_dir: str = "") -> Path:
    """This node's own directory for the index at `uri` (build checkpoints, derived structures, caches, a managed
    vector store's data): the directory itself, or for `s3://bucket/prefix` one directory per index under
    `cache_dir` (default ~/.cache/hygraph/indexes), named by the hash of the normalised uri."""
    text = str(uri)
    if not is_remote(text):
        return Path(text)
    bucket, prefix = parse_s3(text)
    normal = f"{S3_SCHEME}{bucket}/{prefix}".rstrip("/")
    return Path(cache_dir or DEFAULT_CACHE_DIR).expanduser() / hashlib.sha1(normal.encode()).hexdigest()[:16]


def open_objects(uri: str | os.PathLike[str], cache_dir: str = "", cache_bytes: int = DEFAULT_CACHE_BYTES,
                 create: bool = False) -> Objects:
    """The objects of the index at `uri`: `s3://bucket/prefix` or a local directory (made with `create`)."""
    text = str(uri)
    if is_remote(text):
        return S3Objects(text, cache_dir, cache_bytes)
    if "://" in text:
        raise InputError(f"index location {text}: only local paths and s3:// URIs are supported")
    root = Path(text)
    if not root.exists():
        if not create:
            raise InputError(f"index directory {root} does not exist (build one with `hygraph index`)")
        try:
            root.mkdir(parents=True)
        except OSError as exc:
            if exc.errno != errno.EEXIST:
                raise StoreError(f"index directory {root} cannot be created: {exc.strerror}") from None
    elif not root.is_dir():
        raise InputError(f"index directory {root} is not a directory")
    return LocalObjects(root)
