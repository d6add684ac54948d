"""HyperRAG (seed 002 §3.1-3.3): explicit edges, Poincaré ball, training, incremental step, Lorentz serving."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hygraph.core.hyperbolic import (
    BALL_EPS,
    INIT_RADIUS,
    contrastive_loss,
    exp_map,
    explicit_edges,
    fit_under_bound,
    from_storage,
    incremental_step,
    init_from_text,
    key_terms,
    lorentz_lift,
    norm_bound,
    poincare_distance,
    project_to_ball,
    query_vector,
    riemannian_grad,
    storage_vectors,
    train_poincare,
)


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    # These tensors are tiny; on a shared CPU extra intra-op threads only add spin-wait time.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def random_ball(n: int, dim: int, rng: np.random.Generator, max_norm: float = 0.95) -> np.ndarray:
    x = rng.standard_normal((n, dim))
    return x / np.linalg.norm(x, axis=1, keepdims=True) * rng.uniform(0.0, max_norm, size=(n, 1))


def two_clusters(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """40 random starting points and a ring of edges inside each half (0-19, 20-39)."""
    init = init_from_text(rng.standard_normal((40, 16)), 8, seed=0)
    ring = [(i, (i + 1) % 20) for i in range(20)] + [(i, (i + 7) % 20) for i in range(20)]
    edges = np.array(ring + [(a + 20, b + 20) for a, b in ring])
    return init, edges


# ---------------------------------------------------------------- §3.1

def test_key_terms_keep_content_words_and_named_spans() -> None:
    [terms] = key_terms(["Teutberga\nShe was a queen of Lotharingia by marriage to Lothair II."])
    assert terms == {"teutberga", "queen", "lotharingia", "marriage", "lothair", "lothair ii"}


def test_explicit_edges_threshold_is_inclusive() -> None:
    base = {f"t{i}" for i in range(20)}
    three = {"t0", "t1", "t2"} | {f"a{i}" for i in range(17)}  # 3 / 20 = 0.15 exactly
    two = {"t0", "t1"} | {f"b{i}" for i in range(18)}  # 2 / 20 = 0.10
    small = {"t5", "c"}  # min size 2: 1 / 2 = 0.5
    edges = explicit_edges([base, three, two, small, set()], theta=0.15)
    assert edges.tolist() == [[0, 1], [0, 3]]


def test_explicit_edges_keep_the_five_strongest_neighbours() -> None:
    hub = {f"h{i}" for i in range(30)}
    sets = [hub]
    used = 0
    for k in range(1, 8):  # spoke k shares k hub terms (disjoint from other spokes): ratio k/10
        sets.append({f"h{used + i}" for i in range(k)} | {f"s{k}_{i}" for i in range(10 - k)})
        used += k
    edges = explicit_edges(sets, theta=0.15, max_neighbors=5)
    # Spoke 1 (0.1) is below theta; of spokes 2..7 the hub keeps the five best, dropping spoke 2.
    assert edges.tolist() == [[0, 3], [0, 4], [0, 5], [0, 6], [0, 7]]


def test_explicit_edges_break_ties_by_lower_index_and_cap_every_degree() -> None:
    hub = {f"h{i}" for i in range(6)}
    spokes = [{f"h{k}", f"x{k}"} for k in range(6)]  # every spoke: 1 / 2 with the hub
    edges = explicit_edges([hub, *spokes], theta=0.15, max_neighbors=5)
    assert edges.tolist() == [[0, 1], [0, 2], [0, 3], [0, 4], [0, 5]]
    rng = np.random.default_rng(0)
    sets = [set(rng.choice(40, size=8, replace=False).tolist()) for _ in range(300)]
    edges = explicit_edges(sets, theta=0.15, max_neighbors=5)
    assert np.bincount(edges.ravel(), minlength=300).max() <= 5
    assert np.all(edges[:, 0] < edges[:, 1])
    assert np.array_equal(edges, explicit_edges(sets, theta=0.15, max_neighbors=5))


def test_a_hub_term_is_a_stopword_for_explicit_edges() -> None:
    # "hub" is held by passages 0, 1, 2 and 4. Uncapped, 0-1 share hub and a: 2 / 10 = 0.2 >= 0.15; with
    # hub_df=3 it leaves every set: 1 / 9 < 0.15, no edge. 2-3 share p and q: uncapped 2 / 14 < 0.15;
    # capped, passage 2 has 13 terms left: 2 / 13 >= 0.15, an edge. Pairs sharing only hub: 1 / 10 or less.
    sets = [{"hub", "a", *(f"b{i}" for i in range(8))}, {"hub", "a", *(f"c{i}" for i in range(8))},
            {"hub", "p", "q", *(f"d{i}" for i in range(11))}, {"p", "q", *(f"e{i}" for i in range(13))},
            {"hub", *(f"f{i}" for i in range(10))}]
    assert explicit_edges(sets, theta=0.15).tolist() == [[0, 1]]
    assert explicit_edges(sets, theta=0.15, hub_df=3).tolist() == [[2, 3]]
    assert explicit_edges(sets, theta=0.15, hub_df=4).tolist() == [[0, 1]]


def test_explicit_edges_under_a_cap_no_term_exceeds_are_the_uncapped_ones() -> None:
    rng = np.random.default_rng(5)
    sets = [set(rng.choice(60, size=rng.integers(1, 12), replace=False).tolist()) for _ in range(400)]
    most = max(sum(t in s for s in sets) for t in range(60))
    full = explicit_edges(sets, theta=0.15, max_neighbors=5)
    assert np.array_equal(explicit_edges(sets, theta=0.15, max_neighbors=5, hub_df=most), full)
    assert not np.array_equal(explicit_edges(sets, theta=0.15, max_neighbors=5, hub_df=most - 1), full)


# ---------------------------------------------------------------- ball operations

def test_ball_operations() -> None:
    rng = np.random.default_rng(1)
    x = random_ball(20, 5, rng)
    far = x * 10
    assert np.all(np.linalg.norm(project_to_ball(far), axis=1) <= 1 - BALL_EPS + 1e-12)
    assert np.array_equal(project_to_ball(x), x)
    v = 0.1 * rng.standard_normal((20, 5))
    lam = 2 / (1 - np.sum(x * x, axis=1))
    # exp_x(v) lies at Riemannian distance lambda_x |v| from x.
    assert np.allclose(poincare_distance(x, exp_map(x, v)), lam * np.linalg.norm(v, axis=1))
    assert np.allclose(riemannian_grad(x, v), v / lam[:, None] ** 2)
    assert isinstance(poincare_distance(torch.from_numpy(x), torch.from_numpy(x)), torch.Tensor)
    assert np.allclose(poincare_distance(x[:1], np.zeros((1, 5))), 2 * np.arctanh(np.linalg.norm(x[0])))


def test_init_from_text_is_rowwise_and_deterministic() -> None:
    emb = np.random.default_rng(2).standard_normal((10, 32))
    p = init_from_text(emb, 8, seed=3)
    assert np.allclose(np.linalg.norm(p, axis=1), INIT_RADIUS)
    assert np.allclose(init_from_text(emb[4], 8, seed=3), p[4], atol=1e-12)
    assert np.array_equal(p, init_from_text(emb, 8, seed=3))
    assert not np.allclose(p, init_from_text(emb, 8, seed=4))


# ---------------------------------------------------------------- Lorentz / L2 serving

def test_lorentz_l2_ranking_equals_poincare_ranking() -> None:
    rng = np.random.default_rng(5)
    dim = 8
    pts = random_ball(300, dim, rng)
    near_edge = random_ball(60, dim, rng)
    near_edge /= np.linalg.norm(near_edge, axis=1, keepdims=True)
    near_edge *= rng.choice([0.999, 0.9999, 1 - 2 * BALL_EPS], size=(60, 1))
    pts = np.concatenate([pts, near_edge])
    m = norm_bound(lorentz_lift(pts))
    stored = storage_vectors(pts, m)
    assert np.allclose(np.linalg.norm(stored, axis=1), m)
    for q in np.concatenate([random_ball(10, dim, rng), near_edge[:3] * 0.99]):
        t = query_vector(q)
        l2 = np.sum((stored - t) ** 2, axis=1)
        exact = poincare_distance(pts, np.broadcast_to(q, pts.shape))
        assert np.array_equal(np.argsort(l2, kind="stable"), np.argsort(exact, kind="stable"))
        assert np.array_equal(np.argsort(-(stored @ t), kind="stable"), np.argsort(exact, kind="stable"))
        assert np.allclose(l2, m * m + t @ t + 2 * np.cosh(exact), rtol=1e-9)
    with pytest.raises(ValueError, match="norm bound"):
        storage_vectors(pts, m / 2)


def test_query_vector_batches() -> None:
    q = random_ball(4, 3, np.random.default_rng(6))
    assert np.array_equal(query_vector(q)[2], query_vector(q[2]))
    assert query_vector(q).shape == (4, 5)


# ---------------------------------------------------------------- §3.2 training

def test_training_reduces_loss_stays_in_ball_and_separates_negatives() -> None:
    rng = np.random.default_rng(7)
    init, edges = two_clusters(rng)
    negs = rng.integers(0, 40, size=(2 * len(edges), 10))
    trained = train_poincare(init, edges, epochs=40, lr=0.05, batch_size=32, seed=0)
    assert contrastive_loss(trained, edges, negs) < contrastive_loss(init, edges, negs)
    assert np.all(np.linalg.norm(trained, axis=1) < 1 - BALL_EPS + 1e-12)
    d = poincare_distance(trained[:, None, :], trained[None, :, :])
    same = np.zeros((40, 40), dtype=bool)
    same[edges[:, 0], edges[:, 1]] = same[edges[:, 1], edges[:, 0]] = True
    cross = np.zeros((40, 40), dtype=bool)
    cross[:20, 20:] = cross[20:, :20] = True
    assert d[same].mean() < d[cross].mean()

    def separation(dist: np.ndarray) -> float:
        """Fraction of (edge, cross-cluster pair) comparisons, per node, where the edge is shorter."""
        wins = [np.mean(dist[u, same[u]][:, None] < dist[u, cross[u]][None, :]) for u in range(40)]
        return float(np.mean(wins))

    assert separation(d) > 0.9
    assert separation(poincare_distance(init[:, None, :], init[None, :, :])) < 0.8


def test_training_is_deterministic_with_a_seed() -> None:
    init, edges = two_clusters(np.random.default_rng(8))
    a = train_poincare(init, edges, epochs=2, batch_size=16, seed=1)
    assert np.array_equal(a, train_poincare(init, edges, epochs=2, batch_size=16, seed=1))
    assert not np.array_equal(a, train_poincare(init, edges, epochs=2, batch_size=16, seed=2))


def test_trainable_mask_leaves_frozen_rows_bit_identical() -> None:
    init, edges = two_clusters(np.random.default_rng(9))
    init = init.astype(np.float32)
    mask = np.zeros(40, dtype=bool)
    mask[[0, 1, 2, 25]] = True
    out = train_poincare(init, edges, epochs=5, batch_size=16, seed=0, trainable_mask=mask)
    assert out[~mask].astype(np.float32).tobytes() == init[~mask].tobytes()
    assert not np.array_equal(out[mask], init[mask].astype(np.float64))


# ---------------------------------------------------------------- §3.3 incremental fine-tuning

def test_incremental_step_changes_only_allowed_rows() -> None:
    rng = np.random.default_rng(10)
    points = random_ball(500, 8, rng, max_norm=0.6)
    sub = np.array([[3, 40], [40, 77]])
    neighbours = np.array([5, 6, 41])
    new, changed = incremental_step(points, sub, neighbours, steps=10, lr=0.05, negatives=5, seed=0)
    allowed = {3, 40, 77, 5, 6, 41}
    assert {3, 40, 77} <= set(changed.tolist()) <= allowed
    untouched = np.setdiff1d(np.arange(500), changed)
    assert new[untouched].tobytes() == points[untouched].tobytes()
    assert np.all(poincare_distance(new[sub[:, 0]], new[sub[:, 1]])
                  < poincare_distance(points[sub[:, 0]], points[sub[:, 1]]))
    again, changed_again = incremental_step(points, sub, neighbours, steps=10, lr=0.05, negatives=5, seed=0)
    assert np.array_equal(again, new) and np.array_equal(changed_again, changed)


def test_from_storage_inverts_the_serving_lift() -> None:
    rng = np.random.default_rng(5)
    p = random_ball(40, 6, rng, max_norm=0.98)
    stored = storage_vectors(p, norm_bound(lorentz_lift(p)))
    np.testing.assert_allclose(from_storage(stored), p, atol=1e-12)
    # float32 storage (what the vector store keeps) still gives the points to ~1e-7
    np.testing.assert_allclose(from_storage(stored.astype(np.float32)), p, atol=1e-6)


def test_fit_under_bound_keeps_rows_inside_and_pulls_the_rest_onto_the_radius() -> None:
    rng = np.random.default_rng(6)
    inner = random_ball(20, 4, rng, max_norm=0.6)
    m = norm_bound(lorentz_lift(inner))
    outer = random_ball(20, 4, rng, max_norm=0.99)
    outer = outer / np.linalg.norm(outer, axis=1, keepdims=True) * 0.99  # all beyond the bound
    fitted = fit_under_bound(np.vstack([inner, outer]), m)
    np.testing.assert_array_equal(fitted[:20], inner)
    lifted = np.linalg.norm(lorentz_lift(fitted), axis=1)
    assert lifted.max() <= m
    # The pulled rows keep their direction and sit on the bound's radius: lifted norm = M (to 1e-6).
    np.testing.assert_allclose(lifted[20:], m, rtol=1e-6)
    cos = np.sum(fitted[20:] * outer, axis=1) / np.linalg.norm(fitted[20:], axis=1) / np.linalg.norm(outer, axis=1)
    np.testing.assert_allclose(cos, 1.0)
    storage_vectors(fitted, m)  # valid storage: no norm above M


def test_incremental_step_keeps_frozen_rows_in_place() -> None:
    rng = np.random.default_rng(8)
    points = random_ball(30, 4, rng, max_norm=0.8)
    edges = np.array([[29, 0], [29, 1], [0, 2]])
    out, changed = incremental_step(points, edges, np.array([3]), steps=5, lr=0.05, negatives=4, frozen=np.array([29]))
    np.testing.assert_array_equal(out[29], points[29])
    assert 29 not in changed and {0, 1, 2} <= set(changed.tolist())
    # pulled toward the fixed anchor
    assert poincare_distance(out[0], points[29]) < poincare_distance(points[0], points[29])


def test_distance_of_numpy_arrays_is_torchs() -> None:
    """Serving measures in numpy (no torch in a Retriever); training in torch: the same numbers."""
    rng = np.random.default_rng(4)
    x = project_to_ball(rng.standard_normal((6, 4)) * 0.3)
    y = project_to_ball(rng.standard_normal((6, 4)) * 0.3)
    got = poincare_distance(x, y)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, poincare_distance(torch.from_numpy(x), torch.from_numpy(y)).numpy(), rtol=1e-12)
    # hand-checked: from the origin, d = 2 artanh |y|; a point to itself is 0 (clamped, not NaN)
    assert np.allclose(poincare_distance(np.zeros((1, 2)), np.array([[0.6, 0.0]])), 2 * np.arctanh(0.6))
    assert poincare_distance(x[:1], x[:1])[0] == pytest.approx(0.0, abs=1e-6)


def test_serving_imports_no_torch() -> None:
    """The Retriever's modules and every retrieval mode's code import torch only where training runs."""
    import subprocess
    import sys

    code = ("import sys; import hygraph.serve.deployments, hygraph.engine, hygraph.core.retrieval.hyperbolic; "
            "print([m for m in ('torch', 'transformers', 'sentence_transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_sample_present_draws_distinct_present_unexcluded_ids_in_their_order():
    from hygraph.core.hyperbolic import sample_present

    ids = ["a", None, "b", "c", None, "d", "e", "f"]
    rng = np.random.default_rng(0)
    for _ in range(200):
        got = sample_present(ids, 3, rng, {"c"})
        assert len(got) == 3 == len(set(got))
        assert None not in got and "c" not in got
        assert got == sorted(got, key=ids.index)  # in their order in `ids`
    # Fewer qualify than asked: all of them (the one-pass fallback), in order.
    assert sample_present(ids, 10, rng, {"a", "f"}) == ["b", "c", "d", "e"]
    assert sample_present(ids, 5, rng, set("abcdef")) == []
    assert sample_present([], 5, rng, set()) == [] and sample_present(ids, 0, rng, set()) == []


def test_sample_present_is_uniform_over_the_qualifying_ids():
    from hygraph.core.hyperbolic import sample_present

    ids = [f"c{i}" if i % 3 else None for i in range(30)]  # 20 present, c1 and c2 excluded: 18 qualify
    rng = np.random.default_rng(1)
    counts: dict[str, int] = {}
    runs = 6000
    for _ in range(runs):
        for c in sample_present(ids, 4, rng, {"c1", "c2"}):
            counts[c] = counts.get(c, 0) + 1
    assert len(counts) == 18
    expected = runs * 4 / 18  # each qualifying id is in a uniform 4-subset with probability 4/18
    assert all(abs(n - expected) < 0.08 * expected for n in counts.values()), counts
