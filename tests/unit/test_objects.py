"""The object layer (store/objects.py), the writer lease and an index on it: a local directory and a real S3
server (SeaweedFS on loopback, tests/s3server.py), no mocks."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest

from hygraph.errors import InputError, StoreError
from hygraph.store import lease
from hygraph.store.artifacts import DOCUMENTS, DocumentRow
from hygraph.store.lease import WriterLease
from hygraph.store.manifest import Manifest
from hygraph.store.objects import LocalObjects, S3Objects, check_key, open_objects
from hygraph.store.versions import IndexStore

DIMS: dict[str, int] = {}


def test_objects_roundtrip_and_conditional_put(uri):
    objects = open_objects(uri)
    assert objects.get("a/b.json") is None and objects.size("a/b.json") is None
    assert objects.put_if_absent("a/b.json", b"first")
    assert not objects.put_if_absent("a/b.json", b"second")
    assert objects.get("a/b.json") == b"first" and objects.size("a/b.json") == 5
    objects.put("a/b.json", b"replaced")
    objects.put("a/c.json", b"x")
    objects.put("ab.json", b"y")
    assert objects.list("a/") == ["a/b.json", "a/c.json"]
    path = objects.local_path("a/c.json")
    assert path is not None and path.read_bytes() == b"x"
    assert objects.local_path("a/none") is None
    assert objects.delete("a/b.json") == 8 and objects.delete("a/b.json") == 0
    assert objects.list("a/") == ["a/c.json"]


@pytest.mark.parametrize("bad", ["", "/abs", "a//b", "../up", "a/../b", "a/./b", "sp ace"])
def test_keys_never_leave_the_root(bad):
    with pytest.raises(InputError):
        check_key(bad)


@pytest.mark.parametrize("bad", ["s3://", "s3://UPPER/x", "s3://b/../x", "s3://ok-bucket/a//b", "gs://b/x"])
def test_bad_uris_are_input_errors(bad):
    with pytest.raises(InputError):
        open_objects(bad)


def test_put_if_absent_race_has_one_winner(uri):
    objects = open_objects(uri)
    for round_ in range(5):
        wins: list[int] = []
        barrier = threading.Barrier(2)

        def race(me: int, key: str = f"race/{round_}") -> None:
            barrier.wait()
            if objects.put_if_absent(key, str(me).encode()):
                wins.append(me)

        threads = [threading.Thread(target=race, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(wins) == 1 and objects.get(f"race/{round_}") == str(wins[0]).encode()


def test_lease_is_taken_over_only_after_it_expires_and_fences_the_old_holder(uri):
    objects = open_objects(uri)
    # A holder that died: its record says it writes version 7 for one more second, and is never renewed.
    expires = time.time() + 1.0
    assert objects.put_if_absent(lease.key(1), json.dumps({"holder": "dead", "expires": expires,
                                                           "version": 7}).encode())
    contender = WriterLease(objects, term_s=5.0)
    seen: list[lease.LeaseRecord | None] = []
    with pytest.raises(StoreError, match="holds the index's writer lease"):
        contender.acquire(lambda previous: 8, wait_s=0.2)
    assert contender.acquire(lambda previous: seen.append(previous) or 8, wait_s=5.0) == 8
    assert seen[-1] is not None and seen[-1].version == 7 and time.time() >= expires
    contender.check()
    # It stalls; a third writer takes epoch 3 (its term is over on the third writer's clock): fenced.
    assert objects.put_if_absent(lease.key(3), json.dumps({"holder": "third", "expires": time.time() + 5,
                                                           "version": 9}).encode())
    with pytest.raises(StoreError, match="taken over by third"):
        contender.check()
    contender.release()


def test_a_released_lease_is_taken_at_once(uri):
    objects = open_objects(uri)
    first = WriterLease(objects, term_s=30.0)
    assert first.acquire(lambda previous: 1) == 1
    first.release()
    second = WriterLease(objects, term_s=30.0)
    seen: list[lease.LeaseRecord | None] = []
    second.acquire(lambda previous: seen.append(previous) or 2, wait_s=0.0)
    assert seen[-1] is not None and seen[-1].version == 1
    second.release()


def test_the_updater_lease_is_apart_from_the_writer_lease_and_gc_keeps_only_its_newest_epoch(tmp_path):
    """An index on object storage has one updater (`leases/updater/`) for as long as it runs, and that updater
    still takes the writer lease for each version it publishes."""
    store = IndexStore(str(tmp_path), create=True)
    updater = WriterLease(store.objects, term_s=30.0, prefix=lease.UPDATER)
    updater.acquire(lambda previous: 0, wait_s=0.0)
    with pytest.raises(lease.LeaseHeld, match="another updater .* holds the index's updater lease"):
        WriterLease(store.objects, term_s=30.0, prefix=lease.UPDATER).acquire(lambda previous: 0, wait_s=0.0)
    with store.begin(wait_s=0.0) as w:  # the writer lease is free all the same
        w.replace(DOCUMENTS, _docs("a"), DIMS)
        w.commit(Manifest(dims=DIMS))
    updater.release()
    again = WriterLease(store.objects, term_s=30.0, prefix=lease.UPDATER)
    again.acquire(lambda previous: 0, wait_s=0.0)  # released: taken at once
    assert lease.epochs(store.objects, lease.UPDATER) == [1, 2] and lease.epochs(store.objects) == [1]
    store.gc(keep=1, grace_s=0.0)
    assert lease.epochs(store.objects, lease.UPDATER) == [2]
    again.check()
    again.release()


def _docs(*ids: str) -> list[DocumentRow]:
    return [DocumentRow(i, f"title {i}", "", ()) for i in ids]


def test_an_index_on_the_store_commits_reads_and_collects(uri):
    store = IndexStore(uri, create=True)
    with store.begin() as w:
        w.replace(DOCUMENTS, _docs("a", "b"), DIMS)
        w.commit(Manifest(dims=DIMS))
    with store.begin() as w:
        w.change(store.open(1).table(DOCUMENTS), DOCUMENTS, _docs("c"), ["a"], DIMS)
        w.commit(Manifest(dims=DIMS))
    again = IndexStore(uri)
    assert again.uid == store.uid and again.current_version() == 2 and again.versions() == [1, 2]
    assert sorted(again.open().table(DOCUMENTS).ids()) == ["b", "c"]
    assert again.open(1).table(DOCUMENTS).value("a", "title") == "title a"
    result = again.gc(keep=1, grace_s=0.0)
    assert result.versions == [1] and result.segment_files == 0  # version 2 still names version 1's segment
    assert again.size_bytes() > 0 and sorted(again.open().table(DOCUMENTS).ids()) == ["b", "c"]


def test_gc_never_removes_a_version_a_live_reader_lease_names(uri):
    """Issue 30 item 4: version 1 is served by a reader (on another node, say) while versions 2 and 3 are
    published; GC with keep=1 and no grace keeps version 1 and its segment while that lease lives, and removes
    them once it lapsed; the lapsed reader knows, and holds the current version before it reads again."""
    store = IndexStore(uri, create=True, lease_s=2.0)
    with store.begin() as w:
        w.replace(DOCUMENTS, _docs("a"), DIMS)
        w.commit(Manifest(dims=DIMS))
    reader = IndexStore(uri, lease_s=2.0).reader_lease()
    reader.hold(1)
    for ids in (("b",), ("c",)):  # full replacements: version 1's segment is named by version 1 alone
        with store.begin() as w:
            w.replace(DOCUMENTS, _docs(*ids), DIMS)
            w.commit(Manifest(dims=DIMS))
    assert store.gc(keep=1, grace_s=0.0).versions == [2] and store.versions() == [1, 3]
    assert store.open(1).table(DOCUMENTS).value("a", "title") == "title a"
    assert lease.served_versions(store.objects) == {1} and not reader.lapsed
    time.sleep(2.5)  # past the term and more than one renewal: the renewer kept it alive
    assert lease.served_versions(store.objects) == {1} and not reader.lapsed
    with reader._put:  # a reader that stalls (a long GC pause, a frozen node) past its term
        time.sleep(2.2)
    assert reader.lapsed
    reader.renew()  # a renewal after the term does not revive it
    assert reader.lapsed and lease.served_versions(store.objects) == set()
    result = store.gc(keep=1, grace_s=0.0)
    assert result.versions == [1] and result.segment_files >= 1 and store.versions() == [3]
    reader.hold(store.current_version())
    assert not reader.lapsed and lease.served_versions(store.objects) == {3}
    reader.release()
    assert lease.served_versions(store.objects) == set()


def test_of_two_writers_of_one_version_only_one_publishes(uri):
    store = IndexStore(uri, create=True)
    with pytest.raises(StoreError, match="published by another writer"):
        with store.begin() as w:
            w.replace(DOCUMENTS, _docs("mine"), DIMS)
            # A writer that lost its lease without knowing it publishes the same number first.
            store.objects.put_if_absent(f"versions/{w.version:06d}.json",
                                        Manifest(version=w.version, dims=DIMS).to_json())
            w.commit(Manifest(dims=DIMS))
    assert store.manifest(1).tables == {}  # the first writer's manifest stands


def test_s3_cache_fetches_once_and_keeps_the_bound(s3_env, tmp_path):
    uri = f"s3://{s3_env.bucket}/{uuid.uuid4().hex[:12]}/cache"
    writer = open_objects(uri, cache_dir=str(tmp_path / "w"))
    for name in ("a", "b", "c"):
        writer.put(f"seg/{name}", name.encode() * 100)
    reader = S3Objects(uri, cache_dir=str(tmp_path / "r"), cache_bytes=250)
    first = reader.local_path("seg/a")
    assert first is not None and first.read_bytes() == b"a" * 100 and reader.cache.fetched_bytes == 100
    assert reader.local_path("seg/a") == first and reader.cache.fetched_bytes == 100  # no second fetch
    time.sleep(0.05)
    reader.local_path("seg/b")
    time.sleep(0.05)
    reader.local_path("seg/a")  # used again: b is now the least recently used
    time.sleep(0.05)
    reader.local_path("seg/c")
    cached = sorted(p.name for p in (reader.cache.directory / "seg").iterdir())
    assert cached == ["a", "c"] and reader.cache.fetched_bytes == 300


def test_s3_stores_of_one_environment_share_a_client_and_another_environment_gets_its_own(s3_env, monkeypatch,
                                                                                         tmp_path):
    first = open_objects(f"s3://{s3_env.bucket}/{uuid.uuid4().hex[:12]}/a", cache_dir=str(tmp_path))
    second = open_objects(f"s3://{s3_env.bucket}/{uuid.uuid4().hex[:12]}/b", cache_dir=str(tmp_path))
    assert first.client is second.client
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "another-secret")  # other credentials: never the cached client
    other = open_objects(f"s3://{s3_env.bucket}/{uuid.uuid4().hex[:12]}/c", cache_dir=str(tmp_path))
    assert other.client is not first.client
    assert other.client._request_signer._credentials.secret_key == "another-secret"


def test_s3_errors_say_what_is_wrong(s3_env, monkeypatch, tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        open_objects(f"s3://no-such-bucket-{time.time_ns()}/x", cache_dir=str(tmp_path))
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(StoreError, match="unreachable"):
        open_objects("s3://any-bucket/x", cache_dir=str(tmp_path))


def test_local_writes_stay_in_place(tmp_path):
    """A local index keeps today's speed: segments are written where they live, no staging copy."""
    objects = open_objects(str(tmp_path))
    assert isinstance(objects, LocalObjects) and objects.staging_dir() == tmp_path == objects.local_dir


def test_a_late_write_to_a_deleted_local_index_does_not_bring_it_back(tmp_path):
    """A reader's lease renewal after its index was deleted (renamed away, then removed) fails instead of making
    the index's directory again under its name, where the next create of that name would find it taken."""
    store = IndexStore(tmp_path / "team-a", create=True)
    reader = store.reader_lease()
    reader.hold(1)
    (tmp_path / "team-a").rename(tmp_path / ".deleting-x")
    with pytest.raises(StoreError, match="index directory is gone"):
        reader.renew()
    assert not (tmp_path / "team-a").exists()
    reader.release()
    assert not (tmp_path / "team-a").exists()
