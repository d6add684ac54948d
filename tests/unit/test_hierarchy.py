import hashlib
from collections.abc import Mapping

import numpy as np
import pytest

from hygraph.core.hierarchy import (Hierarchy, Layer0Blocks, build_hierarchy, layer0_features, most_mentioned,
                                    summary_key)
from hygraph.core.lsh import HASH_ROWS, hash_codes, make_hyperplanes
from hygraph.model import sha1

DIM = 16


def embed(texts: list[str]) -> np.ndarray:
    """Deterministic stand-in embedder: a Gaussian vector seeded by the text."""
    rows = [np.random.default_rng(int(hashlib.sha1(t.encode()).hexdigest()[:8], 16)).standard_normal(DIM)
            for t in texts]
    return np.array(rows, dtype=np.float32).reshape(len(texts), DIM)


def summarize(segments: list[list[str]], known: Mapping[str, str]) -> list[str]:
    return ["summary(" + ",".join(sorted(seg)) + ")" for seg in segments]


def corpus(n: int = 400, seed: int = 0) -> tuple[np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 24)).astype(np.float32), [f"doc{i}:0" for i in range(n)]


def build(seed: int = 0, **kwargs) -> Hierarchy:
    features, ids = corpus()
    args = {"k": 8, "seed": seed, "s_min": 3, "s_max": 10, "max_layers": 10, "min_layer_size": 2}
    args.update(kwargs)
    return build_hierarchy(features, ids, summarize, embed, **args)


def test_same_seed_gives_the_same_hierarchy():
    a, b = build(seed=11), build(seed=11)
    assert len(a.layers) == len(b.layers)
    for la, lb in zip(a.layers, b.layers):
        assert la.node_ids == lb.node_ids and la.texts == lb.texts and la.keys == lb.keys
        np.testing.assert_array_equal(la.codes, lb.codes)
        np.testing.assert_array_equal(la.hyperplanes, lb.hyperplanes)
        np.testing.assert_array_equal(la.embeddings, lb.embeddings)
        assert [s.tolist() for s in la.segments] == [s.tolist() for s in lb.segments]
    assert not np.array_equal(a.layers[0].codes, build(seed=12).layers[0].codes)


def test_layers_shrink_and_link_to_the_layer_below():
    h = build()
    features, ids = corpus()
    below = ids
    for number, layer in enumerate(h.layers, start=1):
        assert layer.number == number
        assert layer.input_ids == below
        assert layer.node_ids == [f"L{number}:{i}" for i in range(len(layer.segments))]
        assert len(layer.node_ids) < len(below)
        assert sorted(np.concatenate(layer.segments).tolist()) == list(range(len(below)))
        assert layer.embeddings.shape == (len(layer.node_ids), DIM)
        assert layer.codes.shape == (len(below),)
        below = layer.node_ids
    assert h.layers[0].hyperplanes.shape == (8, 24)
    assert h.layers[1].hyperplanes.shape == (8, DIM)
    # Summary layers of equal dimension are hashed with the same stored hyperplanes.
    np.testing.assert_array_equal(h.layers[1].hyperplanes, h.layers[2].hyperplanes)
    assert len(h.layers[-1].node_ids) < 2  # ran until a single summary was left
    assert (h.k, h.seed, h.s_min, h.s_max) == (8, 0, 3, 10)


def test_stops_at_max_layers():
    assert len(build(max_layers=2).layers) == 2
    assert build(max_layers=0).layers == []


def test_numbering_can_start_above_layer_one():
    h = build(max_layers=2, first_layer=2)
    assert [layer.number for layer in h.layers] == [2, 3]
    assert h.layers[0].node_ids[0] == "L2:0" and h.layers[1].input_ids == h.layers[0].node_ids


def test_stops_at_a_layer_with_fewer_than_min_layer_size_segments():
    h = build(min_layer_size=20)
    assert len(h.layers[-1].segments) < 20
    assert all(len(layer.segments) >= 20 for layer in h.layers[:-1])


def test_summary_keys_are_sha1_of_sorted_members_and_stable():
    h = build()
    for layer in h.layers:
        for members, key in zip(layer.members, layer.keys):
            assert key == sha1("\n".join(sorted(members)))
    assert summary_key(["b", "a"]) == summary_key(["a", "b"]) != summary_key(["a"])
    first, again = build().layers[0], build().layers[0]
    assert first.keys == again.keys


def test_summarize_sees_the_texts_of_lower_summaries():
    seen: list[Mapping[str, str]] = []

    def recording(segments: list[list[str]], known: Mapping[str, str]) -> list[str]:
        seen.append(dict(known))
        for seg in segments:
            assert all(m in known for m in seg if m.startswith("L"))
        return summarize(segments, known)

    features, ids = corpus()
    h = build_hierarchy(features, ids, recording, embed, k=8, s_min=3, s_max=10, max_layers=3)
    assert seen[0] == {}
    assert seen[1] == dict(zip(h.layers[0].node_ids, h.layers[0].texts))
    assert set(seen[2]) == set(h.layers[0].node_ids) | set(h.layers[1].node_ids)


def test_tiny_inputs():
    features, ids = corpus(n=4)
    h = build_hierarchy(features, ids, summarize, embed, k=8, s_min=5, s_max=10)
    assert len(h.layers) == 1 and h.layers[0].members == [ids]
    one = build_hierarchy(features[:1], ids[:1], summarize, embed, k=8, s_min=5, s_max=10)
    assert one.layers == []  # a single node has nothing to group
    assert build_hierarchy(np.empty((0, 24)), [], summarize, embed).layers == []


def test_callables_must_answer_every_segment():
    features, ids = corpus()
    with pytest.raises(ValueError, match="summarize returned"):
        build_hierarchy(features, ids, lambda segs, known: ["x"], embed, k=8, s_min=3, s_max=10)
    with pytest.raises(ValueError, match="embed returned"):
        build_hierarchy(features, ids, summarize, lambda texts: np.zeros((1, DIM)), k=8, s_min=3, s_max=10)
    with pytest.raises(ValueError, match="duplicate"):
        build_hierarchy(features[:2], ["a", "a"], summarize, embed)


def test_layer0_features_weigh_blocks_equally():
    text = np.array([[3.0, 4.0], [0.0, 2.0]])
    structure = np.array([[10.0, 0.0, 0.0], [0.0, 0.0, -1.0]])
    f = layer0_features(text, structure)
    assert f.shape == (2, 5) and f.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(f, axis=1), 1.0, rtol=1e-6)
    s = 1 / np.sqrt(2)
    np.testing.assert_allclose(f[0], [0.6 * s, 0.8 * s, s, 0, 0], rtol=1e-6)
    with pytest.raises(ValueError, match="rows"):
        layer0_features(text, structure[:1])


def test_layer0_features_of_a_block_in_parts_equal_the_stacked_block(monkeypatch):
    """A block given as row-parts (the build's chunk and entity vectors) is normalized slab by slab into the
    result: the same bits as the stacked block's, across slab and part boundaries."""
    import hygraph.core.hierarchy as core_hierarchy

    rng = np.random.default_rng(3)
    chunks, entities = rng.standard_normal((7, 5)), rng.standard_normal((12, 5))
    structure = rng.standard_normal((19, 3))
    entities[4] = 0.0
    stacked = np.vstack([chunks, entities]).astype(np.float32)
    scale = np.float32(1 / np.sqrt(2))
    expect = np.concatenate([b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), np.float32(1e-12)) * scale
                             for b in (stacked, structure.astype(np.float32))], axis=1)
    monkeypatch.setattr(core_hierarchy, "FEATURE_ROWS", 4)
    got = layer0_features([chunks, entities], structure)
    assert got.dtype == np.float32 and np.array_equal(got, expect)
    assert np.array_equal(got, layer0_features(stacked, structure))
    with pytest.raises(ValueError, match="width"):
        layer0_features([chunks, structure[:12]], structure)


def big_blocks() -> tuple[list[np.ndarray], np.ndarray]:
    """A text block in two parts (chunks, then entities) and a structure block, over more rows than one of
    hash_codes' batches: neither part boundary nor the end falls on a slab boundary."""
    rng = np.random.default_rng(5)
    chunks = rng.standard_normal((20_011, 48)).astype(np.float32)
    entities = rng.standard_normal((HASH_ROWS + 9_000, 48)).astype(np.float32)
    entities[77] = 0.0
    structure = rng.standard_normal((len(chunks) + len(entities), 16)).astype(np.float32)
    return [chunks, entities], structure


def test_layer0_blocks_hash_like_their_features_bit_for_bit():
    text, structure = big_blocks()
    planes = make_hyperplanes(64, 16, seed=2)
    expect = hash_codes(layer0_features(text, structure), planes)
    layer0 = Layer0Blocks((text, structure))
    assert layer0.shape == (len(structure), 64)
    got = layer0.codes(planes)
    assert got.dtype == np.int64 and np.array_equal(got, expect)
    assert len(np.unique(got)) > 1000  # the codes say something
    # Blocks given whole are cut into the same slabs.
    stacked = np.vstack(text)
    assert np.array_equal(Layer0Blocks((stacked, structure)).codes(planes), expect)
    planes = make_hyperplanes(48, 16, seed=2)
    assert np.array_equal(Layer0Blocks((stacked,)).codes(planes), hash_codes(layer0_features(stacked), planes))


def test_build_hierarchy_from_layer0_blocks_equals_from_their_features():
    text, structure = big_blocks()
    ids = [f"n{i}" for i in range(len(structure))]
    args = {"k": 8, "seed": 4, "s_min": 100, "s_max": 400, "max_layers": 3}
    a = build_hierarchy(layer0_features(text, structure), ids, summarize, embed, **args)
    b = build_hierarchy(Layer0Blocks((text, structure)), ids, summarize, embed, **args)
    assert len(a.layers) == len(b.layers) == 3
    for la, lb in zip(a.layers, b.layers):
        assert la.input_ids == lb.input_ids and la.node_ids == lb.node_ids
        assert la.texts == lb.texts and la.keys == lb.keys
        assert np.array_equal(la.codes, lb.codes)
        assert np.array_equal(la.hyperplanes, lb.hyperplanes)
        assert np.array_equal(la.embeddings, lb.embeddings)
        assert [s.tolist() for s in la.segments] == [s.tolist() for s in lb.segments]
    with pytest.raises(ValueError, match="one row per id"):
        build_hierarchy(Layer0Blocks((text, structure)), ids[1:], summarize, embed)
    with pytest.raises(ValueError, match="rows"):
        build_hierarchy(Layer0Blocks((text, structure[1:])), ids, summarize, embed)


def test_most_mentioned_counts_and_breaks_ties_by_first_occurrence():
    # 7 and 3 twice each, 7 seen first; 5 once (before 9, also once).
    assert most_mentioned([np.array([3, 7]), np.array([], np.int32), np.array([7, 5, 3, 9])], 3).tolist() == [3, 7, 5]
    assert most_mentioned([np.array([4, 4]), np.array([1, 2, 2])], 10).tolist() == [4, 2, 1]
    assert most_mentioned([], 5).tolist() == [] and most_mentioned([np.array([], np.int32)], 5).tolist() == []


def test_most_mentioned_is_counter_most_common():
    from collections import Counter

    rng = np.random.default_rng(3)
    for _ in range(400):  # narrow ranges take the dense count, wide ones the sparse one
        top = rng.choice([30, 5000])
        parts = [rng.integers(0, rng.integers(1, top), size=rng.integers(0, 8)) for _ in range(rng.integers(1, 12))]
        flat = [int(v) for p in parts for v in p]
        want = [v for v, _ in Counter(flat).most_common(10)]
        assert most_mentioned(parts, 10).tolist() == want
