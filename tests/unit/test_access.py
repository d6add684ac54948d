"""Indexes and keys without a server: the registry's names and directories, the key store, and who may
do what (serve/access.py). The routes over them run against the real stack in test_tenants.py."""

from __future__ import annotations

import json
import shutil
import threading
from pathlib import Path

import pytest

from hygraph.config import ServeConfig
from hygraph.errors import InputError, StoreError
from hygraph.serve.access import Access
from hygraph.serve.http import ApiError
from hygraph.store.keys import KeyStore, StoredKey, digest
from hygraph.store.objects import LocalObjects, open_objects
from hygraph.store.versions import IndexStore
from hygraph.store.registry import DEFAULT_INDEX, IndexExists, IndexRegistry, check_name


@pytest.mark.parametrize("name", ["a", "team-1", "x" * 64, "a-b-c9"])
def test_index_names_that_are_allowed(name):
    assert check_name(name) == name


@pytest.mark.parametrize("name", ["", "A", "1abc", "-a", "a" * 65, "../x", "a/b", "a.b", "a b", "é", "a\n",
                                  ".deleting-x", "a_b", "a\u200b"])
def test_index_names_that_are_refused(name):
    with pytest.raises(InputError, match="name"):
        check_name(name)


def test_the_registry_locates_the_default_index_by_its_uri(tmp_path):
    local = IndexRegistry(tmp_path)
    assert local.location(DEFAULT_INDEX) == str(tmp_path) and local.path(DEFAULT_INDEX) == tmp_path
    remote = IndexRegistry("s3://bucket/idx", str(tmp_path / "cache"))
    # The default index on object storage is the bucket's, not this node's directory for it.
    assert remote.location(DEFAULT_INDEX) == "s3://bucket/idx" and remote.root.parent == tmp_path / "cache"
    for bad in ("../x", "A", "a/b"):
        with pytest.raises(InputError, match="name"):
            local.location(bad)


def test_the_registry_makes_lists_locates_and_detaches_indexes(uri, tmp_path):
    """On a local service root (directories, renamed away on delete) and on a bucket (catalog records naming
    a fresh prefix per index)."""
    reg = IndexRegistry(uri, str(tmp_path / "cache"))
    assert reg.names() == [DEFAULT_INDEX]
    with pytest.raises(StoreError, match="name"):
        reg.location("team-a")
    at = reg.reserve("team-a")
    assert reg.location("team-a") == at and IndexStore(at, cache_dir=str(tmp_path / "cache")).uid
    if not reg.remote:
        assert at == str(Path(uri) / "indexes" / "team-a")
    with pytest.raises(IndexExists):
        reg.reserve("team-a")
    with pytest.raises(IndexExists):
        reg.reserve(DEFAULT_INDEX)
    reg.reserve("b")
    assert reg.names() == [DEFAULT_INDEX, "b", "team-a"] and reg.exists("b") and not reg.exists("c")
    assert reg.info("b").documents == 0 and reg.info("b").index_version == 0
    assert reg.created("b") > 0
    reg.set_quota("b", {"max_documents": 3})
    assert reg.quota("b") == {"max_documents": 3} and reg.quota("team-a") is None
    reg.set_quota("b", None)
    assert reg.quota("b") is None
    hidden = reg.detach("team-a")
    assert not reg.exists("team-a") and reg.names() == [DEFAULT_INDEX, "b"]
    assert reg.detached() == [hidden]
    again = reg.reserve("team-a")  # the name is free at once, and a new index never shares the old one's files
    assert IndexStore(again, cache_dir=str(tmp_path / "cache")).uid != IndexStore(
        hidden, cache_dir=str(tmp_path / "cache")).uid
    if reg.remote:
        IndexStore(hidden, cache_dir=str(tmp_path / "cache")).purge()  # what remove_index does
    else:
        shutil.rmtree(hidden)
    assert reg.detached() == []
    with pytest.raises(StoreError):
        reg.detach("nope")
    with pytest.raises(StoreError):
        reg.set_quota("nope", {})
    assert not reg.exists("../indexes/b") and not reg.exists("B")


def test_keys_are_stored_as_hashes_one_record_each_and_revocation_is_seen_by_another_replica(tmp_path):
    writer, reader = KeyStore(LocalObjects(tmp_path)), KeyStore(LocalObjects(tmp_path))
    key, stored = writer.create({"a": ("read",)}, "ci")
    records = list((tmp_path / "keys").iterdir())
    assert [p.name for p in records] == [f"{digest(key)}.json"] and key not in records[0].read_text()
    assert reader.lookup(key).rights == {"a": ("read",)} and not reader.empty()
    assert reader.lookup(key + "x") is None
    writer.drop_index("a")
    assert reader.lookup(key).rights == {}
    assert writer.delete(stored.key_id) and not writer.delete(stored.key_id)
    assert reader.lookup(key) is None and reader.empty()
    # Each change took the keys' own lease and left only the newest epoch's record behind.
    assert len(list((tmp_path / "leases" / "keys").iterdir())) == 1


def test_keys_made_on_one_node_are_known_on_another_and_concurrent_changes_keep_every_key(uri, tmp_path):
    """Two nodes (two cache directories) of one service on the same index root: a local one, or a bucket."""
    node_a = KeyStore(open_objects(uri, str(tmp_path / "a")))
    node_b = KeyStore(open_objects(uri, str(tmp_path / "b")))
    made: list[tuple[str, StoredKey]] = []
    threads = [threading.Thread(target=lambda i=i: made.append((node_a if i % 2 else node_b).create(
        {"a": ("read",), f"i{i}": ("write",)}))) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    node_b.drop_index("a")  # rewrites every record while the other node revokes one
    assert node_a.delete(made[0][1].key_id)
    assert node_b.lookup(made[0][0]) is None
    for key, stored in made[1:]:
        assert node_b.lookup(key).rights == {k: v for k, v in stored.rights.items() if k != "a"}
        assert node_a.lookup(key).key_id == stored.key_id


def test_a_replica_trusts_what_it_read_for_its_cache_term_and_then_reads_again(tmp_path, monkeypatch):
    writer, reader = KeyStore(LocalObjects(tmp_path)), KeyStore(LocalObjects(tmp_path), cache_s=5.0)
    key, stored = writer.create({"a": ("write",)})
    clock = [100.0]
    monkeypatch.setattr("hygraph.store.keys.time.monotonic", lambda: clock[0])
    assert reader.lookup(key).rights == {"a": ("write",)}
    assert reader.lookup("hgk_unknown") is None
    writer.delete(stored.key_id)
    writer.create({"b": ("read",)})
    assert reader.lookup(key) is not None  # within the term: what it read
    clock[0] += 5.0
    assert reader.lookup(key) is None and reader.lookup("hgk_unknown") is None


def test_keys_of_an_earlier_release_move_from_keys_json_into_records(tmp_path):
    key = "hgk_" + "k" * 43
    legacy = tmp_path / "keys.json"
    legacy.write_text(json.dumps({digest(key): {"key_id": "key_1", "name": "old", "created": 1.0,
                                               "rights": {"a": ["read", "write"]}}}))
    store = KeyStore(LocalObjects(tmp_path), legacy_file=legacy)
    assert store.lookup(key) == StoredKey("key_1", "old", {"a": ("read", "write")}, 1.0)
    assert not legacy.exists() and (tmp_path / "keys.json.moved").is_file()
    assert KeyStore(LocalObjects(tmp_path), legacy_file=legacy).lookup(key).key_id == "key_1"  # once only
    bad = tmp_path / "other.json"
    bad.write_text("[1]")
    with pytest.raises(InputError, match="not a key file"):
        KeyStore(LocalObjects(tmp_path), legacy_file=bad)


def _access(tmp_path, **serve) -> Access:
    return Access(ServeConfig(**serve), "local", KeyStore(LocalObjects(tmp_path)))


def test_with_no_key_anywhere_everything_but_admin_is_open(tmp_path):
    who = _access(tmp_path).principal("")
    assert who.may("team-a", "write") and who.may(DEFAULT_INDEX, "status") and not who.may("team-a", "admin")


def test_scoped_keys_see_only_their_indexes(tmp_path):
    access = _access(tmp_path, admin_keys=["adm"], api_keys=["svc"])
    reader_key, _ = access.store.create({"a": ("read",)})
    owner_key, _ = access.store.create({"b": ("admin",)})
    reader, owner = access.principal(f"Bearer {reader_key}"), access.principal(f"Bearer {owner_key}")
    assert reader.may("a", "read") and reader.may("a", "status") and not reader.may("a", "write")
    assert not reader.knows("b") and not reader.knows(DEFAULT_INDEX)
    assert owner.may("b", "write") and owner.may("b", "admin") and not owner.knows("a")
    assert access.principal("Bearer svc").may("b", "write") and not access.principal("Bearer svc").may("b", "admin")
    assert access.principal("Bearer adm").may("anything", "admin")


def test_without_a_key_a_configured_service_reads_only_the_default_index(tmp_path):
    anon = _access(tmp_path, api_keys=["svc"]).principal("")
    assert anon.may(DEFAULT_INDEX, "read") and not anon.may(DEFAULT_INDEX, "write")
    assert not anon.may(DEFAULT_INDEX, "status") and not anon.may("a", "read")
    strict = _access(tmp_path, api_keys=["svc"], require_key_for_reads=True).principal("")
    assert not strict.may(DEFAULT_INDEX, "read")


@pytest.mark.parametrize("header", ["Bearer wrong", "Basic svc", "Bearer ", "svc"])
def test_a_key_the_service_does_not_know_is_401_when_reads_need_keys(tmp_path, header):
    with pytest.raises(ApiError) as err:
        _access(tmp_path, api_keys=["svc"], require_key_for_reads=True).principal(header)
    assert err.value.status == 401


def test_an_unknown_key_reads_the_default_index_as_no_key_does_and_nothing_more(tmp_path):
    """The OpenAI SDK must send some key: with reads open, a made-up one reads the default index only."""
    who = _access(tmp_path, api_keys=["svc"]).principal("Bearer unused-for-reads")
    assert who.may(DEFAULT_INDEX, "read") and not who.may(DEFAULT_INDEX, "write") and not who.knows("team-a")
    from hygraph.serve.access import denied

    assert denied(who, DEFAULT_INDEX, "write").message == "authorization: invalid API key"


def test_admin_routes_need_an_admin_key(tmp_path):
    access = _access(tmp_path, admin_keys=["adm"], api_keys=["svc"])
    access.require_admin(access.principal("Bearer adm"))
    for header, status in (("", 401), ("Bearer svc", 403)):
        with pytest.raises(ApiError) as err:
            access.require_admin(access.principal(header))
        assert err.value.status == status


def test_admin_keys_come_from_the_environment_too(tmp_path, monkeypatch):
    monkeypatch.setenv("HYGRAPH_ADMIN_KEYS", " k1 , ,k2")
    access = _access(tmp_path)
    assert access.principal("Bearer k2").kind == "admin" and access.configured()


@pytest.mark.parametrize("name", ["../etc", "Team", "a/b", ""])
def test_the_cli_refuses_a_bad_index_name_with_status_2(tmp_path, capsys, name):
    from hygraph.cli import main

    assert main(["query", "--index-dir", str(tmp_path), "--index", name, "q"]) == 2
    assert "--index" in capsys.readouterr().err


def test_a_query_quota_refills_at_its_rate(monkeypatch):
    from hygraph.config import QuotaConfig
    from hygraph.serve import quotas as q

    clock = [100.0]
    monkeypatch.setattr(q.time, "monotonic", lambda: clock[0])
    quotas = q.Quotas(QuotaConfig(max_qps=2))
    quotas.admit_query("a")
    quotas.admit_query("a")
    with pytest.raises(ApiError) as err:
        quotas.admit_query("a")
    assert err.value.status == 429 and err.value.headers["Retry-After"] == "1"
    quotas.admit_query("b")  # another index has its own bucket
    clock[0] += 0.5
    quotas.admit_query("a")


def test_insert_quotas_count_documents_and_bytes():
    from hygraph.config import QuotaConfig
    from hygraph.serve.quotas import Quotas
    from hygraph.store.registry import IndexInfo

    quotas = Quotas(QuotaConfig(max_documents=10, max_bytes=1000))
    quotas.admit_insert("a", 2, lambda size: IndexInfo("a", 8, 3, 10))
    with pytest.raises(ApiError, match="documents"):
        quotas.admit_insert("a", 3, lambda size: IndexInfo("a", 8, 3, 10))
    with pytest.raises(ApiError, match="bytes"):
        quotas.admit_insert("b", 1, lambda size: IndexInfo("b", 0, 1, 1000))


def test_an_index_with_its_own_quota_is_held_to_it_and_the_others_to_the_default(tmp_path, monkeypatch):
    from hygraph.config import QuotaConfig
    from hygraph.serve import quotas as q
    from hygraph.store.registry import IndexInfo, IndexRegistry

    registry = IndexRegistry(tmp_path)
    for name in ("small", "big"):
        registry.reserve(name)
    registry.set_quota("small", QuotaConfig(max_documents=1).model_dump())
    clock = [100.0]
    monkeypatch.setattr(q.time, "monotonic", lambda: clock[0])
    quotas = q.Quotas(QuotaConfig(max_documents=5), registry.quota)
    empty = lambda size: IndexInfo("x", 0, 1, None)  # noqa: E731
    quotas.admit_insert("small", 1, empty)
    with pytest.raises(ApiError, match="limit of 1"):
        quotas.admit_insert("small", 2, empty)
    quotas.admit_insert("big", 5, empty)  # the default
    registry.set_quota("small", QuotaConfig(max_documents=3).model_dump())
    with pytest.raises(ApiError, match="limit of 1"):  # replicas reread the limits every LIMITS_TTL_S
        quotas.admit_insert("small", 2, empty)
    clock[0] += q.LIMITS_TTL_S + 0.1
    quotas.admit_insert("small", 2, empty)
    registry.set_quota("small", None)  # back on the default
    clock[0] += q.LIMITS_TTL_S + 0.1
    assert quotas.limits("small") == QuotaConfig(max_documents=5) and registry.quota("small") is None
    registry.set_quota("small", QuotaConfig(max_qps=1).model_dump())
    quotas.forget("small")  # the replica that changed it applies it at once
    assert quotas.limits("small").max_qps == 1
    with pytest.raises(StoreError):
        registry.set_quota("absent", {"max_documents": 1})
    (registry.path("big") / "quota.json").write_text('{"max_documents": -3}')
    with pytest.raises(StoreError, match="invalid limits"):
        quotas.limits("big")
