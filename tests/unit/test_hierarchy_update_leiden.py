"""HyGRAG §3.4 incremental attachment (`update_leiden`) on a hand-built two-layer hierarchy.

Layer 1 holds two Leiden communities (entities as members, their chunks as extra leaves),
layer 2 one summary over both. Summaries are the sorted member ids joined by "+", and the
embedder maps the new content's summary to a chosen direction, so every attachment
decision below can be checked by hand against tau = 0.5.
"""

import numpy as np

from hygraph.config import HierarchyConfig
from hygraph.core.hierarchy import summary_key
from hygraph.indexing.stages.hierarchy_layers import HierarchyEdit, LayerIndex
from hygraph.indexing.state import IndexState
from hygraph.store.artifacts import PARENTS, SUMMARIES, ParentsRow, SummaryRow
from hygraph.store.manifest import Manifest
from hygraph.store.versions import IndexStore
from hygraph.store.view_loader import AncestorsMap, LeavesMap, Parents

TAU = 0.5
NO_CODES = np.zeros(0, np.int64)


def _store(tmp_path) -> IndexStore:
    rows = [SummaryRow("L1:0", 1, "e1+e2", ("e1", "e2"), ("c1",), summary_key(["c1", "e1", "e2"]), NO_CODES,
                       np.array([1, 0, 0], np.float32)),
            SummaryRow("L1:1", 1, "e3+e4", ("e3", "e4"), ("c2",), summary_key(["c2", "e3", "e4"]), NO_CODES,
                       np.array([0, 1, 0], np.float32)),
            SummaryRow("L2:0", 2, "L1:0+L1:1", ("L1:0", "L1:1"), (), summary_key(["L1:0", "L1:1"]),
                       np.array([3, 1]), np.array([0.6, 0.8, 0], np.float32))]
    parents: dict[str, list[str]] = {}
    for r in rows:
        for node in (*r.children, *r.extra_leaves):
            parents.setdefault(node, []).append(r.id)
    store = IndexStore(tmp_path, create=True)
    with store.begin() as w:
        w.replace(SUMMARIES, rows, {"text": 3})
        w.replace(PARENTS, [ParentsRow(n, tuple(s)) for n, s in parents.items()], {"text": 3})
        w.commit(Manifest(dims={"text": 3}))
    return store


def _run(tmp_path, new_entities, new_chunks, removed, new_direction=(0, 0, 1)):
    calls = []

    def summarize(members, leaves, known):
        calls.append([list(m) for m in members])
        return ["+".join(sorted(m)) for m in members]

    def embed(texts):
        # The new content's summary points where the test says; rebuilt summaries point nowhere in particular.
        return np.array([new_direction if t == "+".join(sorted(new_entities or new_chunks)) else (0.5, 0.5, 0.5)
                         for t in texts], np.float32)

    version = _store(tmp_path).open()
    h = HierarchyConfig(partitioner="leiden")
    state, index = IndexState(version), LayerIndex.load(version, h)
    hier = HierarchyEdit(state, index, h, "leiden", summarize, embed)
    hier.update_leiden(TAU, new_entities, new_chunks, set(removed))
    nodes = {sid: (layer, list(state.require(SUMMARIES, sid).children), list(hier.leaves(sid, layer)))
             for layer, ids in index.ids.items() for sid in ids}
    for sid, (layer, children, _) in nodes.items():  # parents rows follow the children
        for child in children:
            assert sid in state.require(PARENTS, child).summaries
    return hier, nodes, calls


def test_similar_new_content_joins_the_closest_community_and_rebuilds_only_its_path(tmp_path):
    delta, nodes, _ = _run(tmp_path, ["e5"], ["c3"], [], new_direction=(0.9, 0.1, 0))  # cos to L1:0 ~ 0.99
    assert sorted(delta.retired) == ["L1:0", "L2:0"]
    assert delta.fresh == ["L1:2", "L2:1"]
    assert nodes["L1:2"] == (1, ["e1", "e2", "e5"], ["c1", "c3", "e1", "e2", "e5"])
    assert nodes["L1:1"] == (1, ["e3", "e4"], ["c2", "e3", "e4"])  # the other community is untouched
    assert sorted(nodes["L2:1"][1]) == ["L1:1", "L1:2"]
    assert sorted(nodes["L2:1"][2]) == ["c1", "c2", "c3", "e1", "e2", "e3", "e4", "e5"]


def test_dissimilar_new_content_becomes_a_new_community_under_the_top_layers_best(tmp_path):
    delta, nodes, _ = _run(tmp_path, ["e5"], ["c3"], [], new_direction=(0, 0, 1))  # no summary reaches tau
    assert nodes["L1:2"] == (1, ["e5"], ["c3", "e5"])
    assert {"L1:0", "L1:1"} <= set(nodes)  # existing communities keep their ids and texts
    assert delta.retired == ["L2:0"]
    [top] = [sid for sid, (layer, _, _) in nodes.items() if layer == 2]
    assert sorted(nodes[top][1]) == ["L1:0", "L1:1", "L1:2"]


def test_deleting_every_member_retires_the_community_and_its_parent_forgets_it(tmp_path):
    delta, nodes, calls = _run(tmp_path, [], [], ["e3", "e4", "c2"])
    assert "L1:1" not in nodes and "L1:1" in delta.retired
    assert nodes["L1:0"] == (1, ["e1", "e2"], ["c1", "e1", "e2"])
    [top] = [sid for sid, (layer, _, _) in nodes.items() if layer == 2]
    assert top != "L2:0" and nodes[top][1] == ["L1:0"]
    assert sorted(nodes[top][2]) == ["c1", "e1", "e2"]
    assert calls == [[["L1:0"]]]  # one re-summary: the parent; nothing for the emptied community


def test_deleting_one_member_resummarizes_that_community_without_the_deleted_leaf(tmp_path):
    delta, nodes, _ = _run(tmp_path, [], [], ["e2"])
    [community] = [s for s in delta.fresh if nodes[s][0] == 1]
    assert nodes[community] == (1, ["e1"], ["c1", "e1"])
    assert all("e2" not in lv for _, _, lv in nodes.values())


def _three_layer_store(tmp_path) -> IndexStore:
    """The two-layer hierarchy under one more summary, L3:0 over L2:0."""
    store = _store(tmp_path)
    version = store.open()
    top = SummaryRow("L3:0", 3, "L2:0", ("L2:0",), (), summary_key(["L2:0"]), np.array([1]),
                     np.array([0.6, 0.8, 0], np.float32))
    with store.begin() as w:
        w.change(version.table(SUMMARIES), SUMMARIES, [top], [], {"text": 3})
        w.change(version.table(PARENTS), PARENTS, [ParentsRow("L2:0", ("L3:0",))], [], {"text": 3})
        w.commit(Manifest(dims={"text": 3}))
    return store


def test_content_attached_under_a_higher_layer_is_read_and_edited_through_it(tmp_path):
    """Dissimilar content becomes a layer-1 community under the top layer's best summary (layer 3, two up):
    its leaves are that summary's leaves, for the updater and for a reader of the published version, and
    a later edit of the community reaches that summary."""
    store = _three_layer_store(tmp_path)
    h = HierarchyConfig(partitioner="leiden")

    def edit(new_entities, new_chunks, removed):
        version = store.open()
        state, index = IndexState(version), LayerIndex.load(version, h)
        hier = HierarchyEdit(state, index, h, "leiden", lambda ms, lv, known: ["+".join(sorted(m)) for m in ms],
                             lambda texts: np.array([(0, 0, 1)] * len(texts), np.float32))
        hier.update_leiden(TAU, new_entities, new_chunks, set(removed))
        with store.begin() as w:
            for artifact in (SUMMARIES, PARENTS):
                w.change(version.table(artifact), artifact, *state.changes(artifact), {"text": 3})
            w.commit(state.manifest)
        [top] = index.ids[3]
        return hier, top, LeavesMap(store.open().table(SUMMARIES), Parents(store.open().table(PARENTS)))

    hier, top, leaves = edit(["e5"], ["c3"], [])
    assert "L1:2" in store.open().table(SUMMARIES).value(top, "children")
    expected = ["c1", "c2", "c3", "e1", "e2", "e3", "e4", "e5"]
    assert list(hier.leaves(top, 3)) == expected and list(leaves[top]) == expected
    assert top in AncestorsMap(leaves.parents)["c3"] and AncestorsMap(leaves.parents).get("nowhere") is None
    assert "c3" in leaves[top] and "e5" in leaves[top] and "c3" not in leaves["L2:0"]

    _, top, leaves = edit([], [], ["e5"])  # the community's only member goes: retired, and the summary above
    assert tuple(store.open().table(SUMMARIES).value(top, "children")) == ("L2:0",)  # two layers up forgets it
    assert list(leaves[top]) == ["c1", "c2", "e1", "e2", "e3", "e4"] and "e5" not in leaves[top]
