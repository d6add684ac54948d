"""EraRAG Alg. 3 over the index state (`HierarchyEdit.update_lsh`): the local re-partition of each layer
matches `repartition_affected` on the whole layer, and the layers stay a partition within bounds."""

import numpy as np
import pytest

from hygraph.config import HierarchyConfig
from hygraph.core.hierarchy import build_hierarchy, layer0_features
from hygraph.core.lsh import hash_codes, repartition_affected
from hygraph.indexing.stages.hierarchy import HierarchyResult
from hygraph.indexing.stages.hierarchy_layers import HierarchyEdit, LayerIndex
from hygraph.indexing.state import IndexState
from hygraph.store.artifacts import HYPERPLANES, PARENTS, SUMMARIES
from hygraph.store.manifest import Manifest
from hygraph.store.versions import IndexStore

H = HierarchyConfig(num_hyperplanes=5, s_min=3, s_max=7, max_layers=3, min_layer_size=2)
DIM = 6
N = 160


def _vec(text: str) -> np.ndarray:
    v = np.random.default_rng(abs(hash(text)) % 2**32).standard_normal(DIM)
    return (v / np.linalg.norm(v)).astype(np.float32)


def summarize(members, leaves=None, known=None):
    return ["+".join(m) for m in members]


def embed(texts):
    return np.vstack([_vec(t) for t in texts])


FEATURES = {f"n{i}": layer0_features(np.random.default_rng(i).standard_normal((1, DIM)))[0] for i in range(N + 12)}


def _setup(tmp_path) -> tuple[IndexState, LayerIndex, HierarchyEdit]:
    ids = [f"n{i}" for i in range(N)]
    hier = build_hierarchy(np.vstack([FEATURES[i] for i in ids]), ids, lambda segs, known: summarize(segs), embed,
                           k=H.num_hyperplanes, s_min=H.s_min, s_max=H.s_max, max_layers=H.max_layers,
                           min_layer_size=H.min_layer_size)
    result = HierarchyResult()
    result.add_layers(hier)
    summaries, parents, planes = result.rows()
    store = IndexStore(tmp_path, create=True)
    with store.begin() as w:
        for artifact, rows in ((SUMMARIES, summaries), (PARENTS, parents), (HYPERPLANES, planes)):
            w.replace(artifact, rows, {"text": DIM})
        w.commit(Manifest(dims={"text": DIM}))
    version = store.open()
    state, index = IndexState(version), LayerIndex.load(version, H)
    return state, index, HierarchyEdit(state, index, H, "lsh", summarize, embed)


def _layer(state: IndexState, index: LayerIndex, number: int) -> list[list[str]]:
    return [list(state.require(SUMMARIES, s).children) for s in sorted(index.ids[number], key=lambda s: int(s[3:]))]


@pytest.mark.parametrize("added, removed", [([f"n{N + i}" for i in range(12)], []),
                                            ([], [f"n{i}" for i in range(0, 40, 3)]),
                                            ([f"n{N}", f"n{N + 1}"], ["n5", "n6", "n7"])])
def test_layer_one_is_repartitioned_as_the_whole_layer_rule_says(tmp_path, added, removed):
    state, index, edit = _setup(tmp_path)
    segments = _layer(state, index, 1)
    rows = [m for seg in segments for m in seg]
    planes = index.planes[1]
    codes = hash_codes(np.vstack([FEATURES[m] for m in rows]), planes)
    bounds = np.cumsum([0] + [len(s) for s in segments])
    new_codes = hash_codes(np.vstack([FEATURES[m] for m in added]), planes) if added else np.zeros(0, np.int64)
    rep = repartition_affected([np.arange(bounds[i], bounds[i + 1]) for i in range(len(segments))], codes, new_codes,
                               H.s_min, H.s_max, np.array([rows.index(r) for r in removed], dtype=np.int64))
    kept_rows = [m for m in rows if m not in removed] + added
    expected = {frozenset(kept_rows[r] for r in rep.segments[i]) for i in rep.changed}

    edit.update_lsh(lambda ids: np.vstack([FEATURES[i] for i in ids]), added, set(removed))
    fresh = {frozenset(state.require(SUMMARIES, s).children) for s in edit.fresh if s.startswith("L1:")}
    assert fresh == expected
    retired = {s for s in edit.retired if s.startswith("L1:")}
    assert len(retired) == len(rep.removed)

    below = set(kept_rows)
    for number in sorted(index.ids):
        layer = _layer(state, index, number)
        members = [m for seg in layer for m in seg]
        assert sorted(members) == sorted(below), number  # a partition of the layer below
        assert all(H.s_min <= len(seg) <= H.s_max for seg in layer) or len(layer) == 1
        for sid in index.ids[number]:
            row = state.require(SUMMARIES, sid)
            assert len(row.child_codes) == len(row.children)
            assert all(sid in state.require(PARENTS, c).summaries for c in row.children)
        below = set(index.ids[number])
    assert not set(edit.retired) & {s for ids in index.ids.values() for s in ids}


def test_untouched_segments_keep_their_ids_and_leaves_are_derived(tmp_path):
    state, index, edit = _setup(tmp_path)
    before = {s: state.require(SUMMARIES, s).children for s in index.ids[1]}
    edit.update_lsh(lambda ids: np.vstack([FEATURES[i] for i in ids]), [f"n{N}"], set())
    kept = set(before) & index.ids[1]
    assert kept and all(state.require(SUMMARIES, s).children == before[s] for s in kept)
    assert len(set(before) - index.ids[1]) <= 2  # one new row reaches one bucket (or its nearest)
    top = max(index.ids)
    [root] = index.ids[top] if len(index.ids[top]) == 1 else [sorted(index.ids[top])[0]]
    leaves = edit.leaves(root, top)
    assert list(leaves) == sorted(leaves) and f"n{N}" in {x for s in index.ids[top] for x in edit.leaves(s, top)}
