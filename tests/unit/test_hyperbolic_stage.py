"""The hyperbolic stage's update (HyperRAG §3.1 on new rows): explicit edges found through the inverted key-term
index agree with the build's rule, and the degree cap holds for old and new chunks alike."""

import numpy as np
import pytest

from hygraph.core.hyperbolic import explicit_edges, key_terms
from hygraph.indexing.stages.hyperbolic import TermIndex, new_edges

TEXTS = [
    "Alpha Centauri is a star system near the Sun.",
    "The Sun is a star at the center of the Solar System.",
    "Proxima Centauri orbits Alpha Centauri.",
    "The Solar System has eight planets orbiting the Sun.",
    "Jupiter is the largest planet of the Solar System.",
    "Kappa Valley is a film location in Alpha.",
    "Alpha Centauri and Proxima Centauri are close to the Sun.",
]


def _index(terms: list[set[str]], edges: np.ndarray, hub_df: int = 500) -> TermIndex:
    index = TermIndex(hub_df=hub_df)
    degree = np.bincount(edges.ravel(), minlength=len(terms)) if len(edges) else np.zeros(len(terms), int)
    for i, t in enumerate(terms):
        index.add(f"c{i}", sorted(t), int(degree[i]))
    return index


# hub_df 2: "sun", "solar system", "alpha centauri"... are hubs once the last text is in.
@pytest.mark.parametrize("hub_df", [500, 2])
def test_edges_of_a_new_chunk_are_the_builds_edges_touching_it_when_no_degree_cap_binds(hub_df):
    terms = key_terms(TEXTS)
    old = explicit_edges(terms[:-1], theta=0.15, max_neighbors=10, hub_df=hub_df)
    index = _index(terms[:-1], old, hub_df)
    new = len(TEXTS) - 1
    index.add(f"c{new}", sorted(terms[new]), 0)
    got = {tuple(sorted(e)) for e in new_edges(index, [f"c{new}"], [terms[new]], 0.15, 10)}
    full = explicit_edges(terms, theta=0.15, max_neighbors=10, hub_df=hub_df)
    expected = {tuple(sorted((f"c{a}", f"c{b}"))) for a, b in full.tolist() if new in (a, b)}
    assert got == expected and got
    if hub_df == 2:
        assert got != {tuple(sorted((f"c{a}", f"c{b}"))) for a, b in explicit_edges(terms, theta=0.15, max_neighbors=10)
                       .tolist() if new in (a, b)}


def test_term_counts_leave_out_hub_terms_as_terms_cross_the_cap():
    index = TermIndex(hub_df=2)
    index.add("a", ["x", "y"], 0)
    index.add("b", ["x", "z"], 0)
    assert list(index.n_terms) == [2, 2]
    index.add("c", ["x"], 0)  # x is now held by 3 > 2: a stopword for everyone
    assert list(index.n_terms) == [1, 1, 0]
    assert index.overlaps(["x", "y"])[0].tolist() == [0]
    index.remove("b", ["x", "z"])  # back to 2: a and c count it again
    assert list(index.n_terms)[::2] == [2, 1]
    nums, shared = index.overlaps(["x"])
    assert nums.tolist() == [0, 2] and shared.tolist() == [1, 1]


def test_the_degree_cap_holds_for_old_and_new_chunks():
    terms = key_terms(TEXTS)
    old = explicit_edges(terms[:-2], theta=0.15, max_neighbors=1)
    index = _index(terms[:-2], old)
    for i in (len(TEXTS) - 2, len(TEXTS) - 1):
        index.add(f"c{i}", sorted(terms[i]), 0)
    got = new_edges(index, ["c5", "c6"], [terms[5], terms[6]], 0.15, 1)
    degree: dict[str, int] = {}
    for a, b in [*((f"c{a}", f"c{b}") for a, b in old.tolist()), *got]:
        degree[a], degree[b] = degree.get(a, 0) + 1, degree.get(b, 0) + 1
    assert max(degree.values()) == 1
    assert list(index.degree) == [degree.get(f"c{i}", 0) for i in range(len(TEXTS))]


def test_removed_chunks_are_never_partners():
    terms = key_terms(TEXTS)
    index = _index(terms[:-1], np.zeros((0, 2), np.int64))
    index.remove("c0", sorted(terms[0]))
    index.remove("c2", sorted(terms[2]))
    index.add("c6", sorted(terms[6]), 0)
    partners = {b if a == "c6" else a for a, b in new_edges(index, ["c6"], [terms[6]], 0.15, 10)}
    assert partners and not partners & {"c0", "c2"}


def test_a_batch_that_needs_a_larger_norm_bound_fetches_only_stored_points(tmp_path):
    """Issue 34: the term index already lists the batch's chunks when M must grow; fetching their points
    from the collection failed the job ('no vector for id'). Only stored chunks are fetched, the new ones
    come from training, and every vector is rewritten under the new bound."""
    from hygraph.config import HyperbolicConfig
    from hygraph.core import hyperbolic
    from hygraph.indexing.stages import hyperbolic as stage
    from hygraph.indexing.stages.vectors import VectorDelta
    from hygraph.indexing.state import IndexState
    from hygraph.store.artifacts import TERMS, TermsRow
    from hygraph.store.manifest import HyperbolicInfo, Manifest
    from hygraph.store.versions import IndexStore

    h = HyperbolicConfig(dim=4, epochs=1)
    old_terms = key_terms(TEXTS[:4])
    rng = np.random.default_rng(0)
    stored = {f"c{i}": rng.uniform(-0.05, 0.05, h.dim) for i in range(4)}
    store = IndexStore(tmp_path, create=True)
    with store.begin() as w:
        w.replace(TERMS, [TermsRow(f"c{i}", tuple(sorted(t)), ()) for i, t in enumerate(old_terms)], {})
        # A bound below any point's lifted norm (>= 1): the batch's points need a larger one.
        w.commit(Manifest(dims={}, hyperbolic=HyperbolicInfo(M=0.5, dim=h.dim, seed=0)))
    state = IndexState(store.open())
    index = stage.TermIndex.load(state.base, h.hub_df)
    fetched: list[list[str]] = []

    def points_of(ids):
        fetched.append(list(ids))
        return np.vstack([stored[c] for c in ids])  # KeyError for a chunk the collection does not hold

    delta = VectorDelta()
    new = ["n0", "n1", "c2"]  # c2 is replaced: its stored point is stale
    texts = TEXTS[4:7]
    stage.update(state, h, index, new, texts, rng.normal(size=(3, 8)).astype(np.float32), ["c2"], points_of, delta)
    ids, vectors, _ = delta.upserts["hyperbolic"]
    assert sorted(ids) == ["c0", "c1", "c2", "c3", "n0", "n1"]
    assert all(c not in new for call in fetched for c in call)
    m = state.manifest.hyperbolic.M
    assert m > 1.0
    assert np.allclose(np.linalg.norm(vectors, axis=1), m, rtol=1e-4)
    row = {c: i for i, c in enumerate(ids)}
    assert np.allclose(hyperbolic.from_storage(vectors[row["c0"]]), stored["c0"], atol=1e-5)
