import numpy as np
import pytest
import scipy.sparse as sp
import torch

from hygraph.core.cleora import cleora_embed, cleora_extend, cleora_init

IDS = ["n0", "n1", "n2", "n3"]


def path_with_isolated_node() -> sp.csr_matrix:
    """n0 - n1 - n2 path, n3 isolated."""
    rows, cols = [0, 1, 1, 2], [1, 0, 2, 1]
    return sp.csr_matrix((np.ones(4, dtype=np.float32), (rows, cols)), shape=(4, 4))


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def test_init_rows_are_signs_scaled_to_unit_norm():
    z = cleora_init(IDS, 16, seed=0)
    assert z.shape == (4, 16) and z.dtype == np.float32
    np.testing.assert_allclose(np.abs(z), 0.25)
    np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1.0, rtol=1e-6)


def test_init_depends_only_on_seed_and_node_id():
    small = cleora_init(["a", "b"], 100, seed=3)
    large = cleora_init(["q", "b", "x", "a", "y"], 100, seed=3)
    np.testing.assert_array_equal(small[0], large[3])
    np.testing.assert_array_equal(small[1], large[1])
    assert not np.array_equal(small[0], small[1])
    assert not np.array_equal(small, cleora_init(["a", "b"], 100, seed=4))
    # Bits beyond the first 64 come from a second word, not a repeat of the first.
    wide = cleora_init(["a"], 128, seed=3)[0]
    assert not np.array_equal(wide[:64], wide[64:])


def test_one_iteration_by_hand():
    x = cleora_init(IDS, 8, seed=1)
    z = cleora_embed(path_with_isolated_node(), IDS, dim=8, iterations=1, seed=1)
    # Row-normalized walk: n0 and n2 see only n1; n1 averages n0 and n2; n3 keeps its init.
    np.testing.assert_allclose(z[0], unit(x[1]), atol=1e-6)
    np.testing.assert_allclose(z[2], unit(x[1]), atol=1e-6)
    np.testing.assert_allclose(z[1], unit(0.5 * x[0] + 0.5 * x[2]), atol=1e-6)
    np.testing.assert_allclose(z[3], x[3], atol=1e-6)


def test_two_iterations_with_weights_by_hand():
    # Star: n0 joined to n1 (weight 1) and n2 (weight 3); n3 isolated.
    rows, cols, w = [0, 1, 0, 2], [1, 0, 2, 0], [1.0, 1.0, 3.0, 3.0]
    adj = sp.csr_matrix((w, (rows, cols)), shape=(4, 4))
    x = cleora_init(IDS, 8, seed=2)
    z1 = np.stack([unit(0.25 * x[1] + 0.75 * x[2]), unit(x[0]), unit(x[0]), x[3]])
    z2 = np.stack([unit(0.25 * z1[1] + 0.75 * z1[2]), unit(z1[0]), unit(z1[0]), z1[3]])
    np.testing.assert_allclose(cleora_embed(adj, IDS, dim=8, iterations=2, seed=2), z2, atol=1e-6)


def test_deterministic_and_independent_of_node_order():
    adj = path_with_isolated_node()
    a = cleora_embed(adj, IDS, dim=32, iterations=2, seed=5)
    np.testing.assert_array_equal(a, cleora_embed(adj, IDS, dim=32, iterations=2, seed=5))
    perm = np.array([2, 3, 0, 1])
    permuted = adj[perm][:, perm]
    b = cleora_embed(permuted, [IDS[i] for i in perm], dim=32, iterations=2, seed=5)
    np.testing.assert_allclose(b, a[perm], atol=1e-6)


def test_zero_iterations_return_the_init():
    np.testing.assert_array_equal(cleora_embed(path_with_isolated_node(), IDS, dim=8, iterations=0, seed=0),
                                  cleora_init(IDS, 8, seed=0))


def test_bad_input():
    with pytest.raises(ValueError, match="does not match"):
        cleora_embed(path_with_isolated_node(), IDS[:3], dim=8)
    with pytest.raises(ValueError, match="iterations"):
        cleora_embed(path_with_isolated_node(), IDS, dim=8, iterations=-1)
    with pytest.raises(ValueError, match="dim"):
        cleora_init(IDS, 0, seed=0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_matches_cpu():
    adj = sp.random(500, 500, density=0.02, random_state=1, format="csr")
    adj = ((adj + adj.T) > 0).astype(np.float32)
    ids = [f"v{i}" for i in range(500)]
    cpu = cleora_embed(adj, ids, dim=64, iterations=2, seed=7, device="cpu")
    gpu = cleora_embed(adj, ids, dim=64, iterations=2, seed=7, device="cuda")
    np.testing.assert_allclose(cpu, gpu, atol=1e-5)


def test_cleora_extend_propagates_only_into_new_nodes():
    # Path a - b - c, then a new node d joined to a and c: d's vector is the normalized mean of
    # a's and c's (its own init drops out after one step); old rows are untouched.
    adj = sp.csr_matrix(np.array([[0, 1, 0, 1], [1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 1, 0]], dtype=np.float32))
    ids = ["a", "b", "c", "d"]
    old = cleora_embed(adj[:3, :3], ids[:3], dim=8, iterations=2, seed=1)
    base = np.vstack([old, np.zeros((1, 8), np.float32)])
    out = cleora_extend(adj, ids, base, np.array([False, False, False, True]), iterations=1, seed=1)
    np.testing.assert_array_equal(out[:3], old)
    mean = (old[0] + old[2]) / 2
    np.testing.assert_allclose(out[3], mean / np.linalg.norm(mean), rtol=1e-5)


def test_cleora_extend_keeps_an_isolated_new_node_at_its_init():
    adj = sp.csr_matrix((2, 2), dtype=np.float32)
    out = cleora_extend(adj, ["x", "y"], np.ones((2, 4), np.float32), np.array([False, True]), seed=3)
    np.testing.assert_array_equal(out[1], cleora_init(["y"], 4, 3)[0])
    np.testing.assert_array_equal(out[0], np.ones(4, np.float32))
