"""The answer cache: keys that change with everything a result depends on, LRU bound, hit counts."""

from __future__ import annotations

from hygraph.serve.answer_cache import AnswerCache, CacheKey, normalize_question


def key(**kw):
    base = dict(index="default", uid="u1", version=3, mode="hybrid", k=5, filter=None,
                question="Who directed Jaws?")
    return CacheKey.of(**{**base, **kw})


def test_whitespace_and_unicode_forms_are_one_question_case_is_not():
    assert normalize_question("  Who  directed\tJaws?\n") == "Who directed Jaws?"
    assert normalize_question("Cafe\u0301") == normalize_question("Caf\u00e9")
    assert key(question="  Who directed   Jaws? ") == key()
    assert key(question="who directed jaws?") != key()


def test_every_input_of_a_result_is_in_the_key():
    assert key() == key(filter={})
    for change in (dict(version=4), dict(mode="dense"), dict(k=6), dict(index="hr"),
                   dict(uid="u2"), dict(filter={"lang": "en"})):
        assert key(**change) != key(), change
    assert key(filter={"a": 1, "b": 2}) == key(filter={"b": 2, "a": 1})


def test_least_recently_used_goes_first_and_hits_are_counted():
    cache = AnswerCache(2)
    a, b, c = key(k=1), key(k=2), key(k=3)
    cache.put(a, "A")
    cache.put(b, "B")
    assert cache.get(a) == "A"  # a is now the most recent
    cache.put(c, "C")
    assert cache.get(b) is None and cache.get(a) == "A" and cache.get(c) == "C"
    assert (cache.hits, cache.misses, len(cache)) == (3, 1, 2)


def test_zero_entries_stores_nothing():
    cache = AnswerCache(0)
    cache.put(key(), "A")
    assert cache.get(key()) is None and len(cache) == 0


def test_cache_control_directives_choose_the_caches_use():
    from hygraph.serve.gateway import cache_use

    assert cache_use(None) == cache_use("") == cache_use("max-age=60") == "use"
    assert cache_use("no-cache") == cache_use("max-age=0, No-Cache") == "refresh"
    assert cache_use("no-store") == cache_use("no-cache, no-store") == "off"
    assert cache_use("no-cache-please, x=no-store") == "use"  # directive names only, matched whole
