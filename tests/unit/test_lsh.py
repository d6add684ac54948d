import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hygraph.core.lsh import _nearest, hash_codes, make_hyperplanes, partition, repartition_affected


def sizes(segments: list[np.ndarray]) -> list[int]:
    return [int(s.size) for s in segments]


def assert_exact_cover(segments: list[np.ndarray], n: int) -> None:
    covered = np.sort(np.concatenate(segments)) if segments else np.empty(0, dtype=np.int64)
    np.testing.assert_array_equal(covered, np.arange(n))


def assert_bounds(segments: list[np.ndarray], n: int, s_min: int, s_max: int) -> None:
    assert_exact_cover(segments, n)
    if n >= s_min:
        assert all(s_min <= s <= s_max for s in sizes(segments)), sizes(segments)
    elif n:
        assert len(segments) == 1


@st.composite
def bounds(draw) -> tuple[int, int]:
    s_min = draw(st.integers(1, 8))
    return s_min, draw(st.integers(2 * s_min - 1, 2 * s_min + 25))


@st.composite
def code_arrays(draw, max_size: int = 300) -> np.ndarray:
    """Codes spread over k bits, or concentrated on a few codes (big buckets), or a mix."""
    k = draw(st.integers(1, 14))
    pool = draw(st.lists(st.integers(0, 2 ** k - 1), min_size=1, max_size=12))
    element = st.one_of(st.sampled_from(pool), st.integers(0, 2 ** k - 1))
    return np.array(draw(st.lists(element, max_size=max_size)), dtype=np.int64)


def test_hyperplanes_are_seeded_gaussian_rows():
    h = make_hyperplanes(384, 16, seed=3)
    assert h.shape == (16, 384) and h.dtype == np.float32
    np.testing.assert_array_equal(h, make_hyperplanes(384, 16, seed=3))
    assert not np.array_equal(h, make_hyperplanes(384, 16, seed=4))
    for k in (0, 64):
        with pytest.raises(ValueError, match="k must be"):
            make_hyperplanes(8, k, seed=0)


def test_hash_codes_pack_sign_bits():
    planes = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)
    vectors = np.array([[-1, -1], [1, -1], [-1, 1], [1, 1], [0, 2]], dtype=np.float32)
    codes = hash_codes(vectors, planes)
    assert codes.dtype == np.int64
    assert codes.tolist() == [0, 1, 2, 3, 2]  # bit j = 1 iff v . h_j > 0; exactly 0 is a 0 bit


def test_hash_codes_batches_agree_and_use_all_bits():
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((1000, 24)).astype(np.float64)
    planes = make_hyperplanes(24, 63, seed=1)
    codes = hash_codes(vectors, planes, batch_size=4096)
    np.testing.assert_array_equal(codes, hash_codes(vectors, planes, batch_size=97))
    assert codes.min() >= 0
    bits = vectors.astype(np.float32) @ planes.T > 0
    expected = (bits * (1 << np.arange(63, dtype=np.int64))).sum(axis=1)
    np.testing.assert_array_equal(codes, expected)
    assert hash_codes(np.empty((0, 24)), planes).shape == (0,)
    with pytest.raises(ValueError, match="dimension"):
        hash_codes(vectors[:, :5], planes)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_hash_codes_cuda_matches_cpu():
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((5000, 384)).astype(np.float32)
    planes = make_hyperplanes(384, 16, seed=0)
    cpu, gpu = hash_codes(vectors, planes, device="cpu"), hash_codes(vectors, planes, device="cuda")
    # Only vectors within float rounding of a hyperplane may differ between devices.
    assert (cpu != gpu).mean() < 1e-3


@settings(max_examples=150, deadline=None)
@given(codes=code_arrays(), bound=bounds())
def test_partition_sizes_within_bounds_and_rows_covered_once(codes, bound):
    s_min, s_max = bound
    segments = partition(codes, s_min, s_max)
    assert_bounds(segments, codes.size, s_min, s_max)
    assert all(np.all(np.diff(s) > 0) for s in segments)


@settings(max_examples=40, deadline=None)
@given(codes=code_arrays(max_size=150), bound=bounds())
def test_partition_is_deterministic(codes, bound):
    first = partition(codes, *bound)
    second = partition(codes.copy(), *bound)
    assert [s.tolist() for s in first] == [s.tolist() for s in second]


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_nearest_code_search_matches_a_full_scan(data):
    k = data.draw(st.integers(1, 12))
    targets = np.array(sorted(data.draw(st.sets(st.integers(0, 2 ** k - 1), min_size=2, max_size=200))))
    priority = np.array(data.draw(st.permutations(range(targets.size))))
    queries = np.array(data.draw(st.lists(st.sampled_from(targets.tolist()), min_size=1, max_size=30)))
    found = _nearest(queries, targets, priority, k)
    for q, t in zip(queries, found):
        dist = [bin(int(q) ^ int(c)).count("1") or k + 1 for c in targets]
        best = min(range(targets.size), key=lambda i: (dist[i], priority[i]))
        assert t == best


def test_buckets_within_bounds_are_kept_whole():
    codes = np.array([3] * 6 + [9] * 7 + [3] * 2)
    segments = partition(codes, 5, 20)
    assert [s.tolist() for s in segments] == [[0, 1, 2, 3, 4, 5, 13, 14], list(range(6, 13))]


def test_small_bucket_merges_with_hamming_nearest():
    # 0b0001 is 1 bit from 0b0000 and 3 bits from 0b0111, though numerically closer to neither.
    codes = np.array([0b0000] * 5 + [0b0111] * 5 + [0b0001])
    assert [s.tolist() for s in partition(codes, 5, 20)] == [[0, 1, 2, 3, 4, 10], [5, 6, 7, 8, 9]]


def test_hamming_ties_prefer_the_larger_bucket_then_the_lower_code():
    # 0b0011 is 2 bits from both 0b0000 and 0b1111.
    codes = np.array([0b0000] * 5 + [0b1111] * 6 + [0b0011])
    assert [s.tolist() for s in partition(codes, 5, 20)] == [list(range(5)), list(range(5, 12))]
    codes = np.array([0b0000] * 5 + [0b1111] * 5 + [0b0011])
    assert [s.tolist() for s in partition(codes, 5, 20)] == [[0, 1, 2, 3, 4, 10], list(range(5, 10))]


def test_small_buckets_merge_until_large_enough():
    # Four singletons: the pair rounds join neighbours until a group reaches s_min.
    codes = np.array([0b000, 0b001, 0b011, 0b111, 0b111, 0b111])
    segments = partition(codes, 3, 5)
    assert_bounds(segments, 6, 3, 5)


def test_large_bucket_splits_in_row_order_and_balances_the_tail():
    assert sizes(partition(np.zeros(51, dtype=np.int64), 5, 50)) == [26, 25]
    segments = partition(np.zeros(101, dtype=np.int64), 5, 50)
    assert sizes(segments) == [50, 26, 25]
    assert segments[0].tolist() == list(range(50))
    assert sizes(partition(np.zeros(100, dtype=np.int64), 5, 50)) == [50, 50]
    assert sizes(partition(np.zeros(57, dtype=np.int64), 5, 50)) == [50, 7]


def test_split_orders_merged_members_by_distance_to_the_group_code():
    # Bucket 0 (60 rows) absorbs a 1-row bucket at distance 1 and is then split:
    # its own rows fill the first piece before the absorbed row.
    codes = np.array([1] + [0] * 60)
    segments = partition(codes, 5, 50)
    assert sizes(segments) == [50, 11]
    assert 0 in segments[1] and 0 not in segments[0]


def test_fewer_rows_than_s_min_give_one_segment():
    assert [s.tolist() for s in partition(np.array([5, 9, 1]), 5, 50)] == [[0, 1, 2]]
    assert partition(np.empty(0, dtype=np.int64), 5, 50) == []


@pytest.mark.parametrize("s_min, s_max", [(0, 10), (5, 8), (5, 4)])
def test_bounds_that_cannot_be_met_are_rejected(s_min, s_max):
    with pytest.raises(ValueError, match="s_m"):
        partition(np.zeros(10, dtype=np.int64), s_min, s_max)


def test_codes_must_be_non_negative_integers():
    with pytest.raises(ValueError, match="non-negative"):
        partition(np.array([-1, 2]), 1, 5)
    with pytest.raises(ValueError, match="integer"):
        partition(np.array([0.5, 2.0]), 1, 5)


def test_repartition_touches_only_affected_buckets():
    codes = np.array([0b0000] * 8 + [0b1111] * 9 + [0b0011] * 6 + [0b1100] * 7)
    old = partition(codes, 5, 20)
    assert len(old) == 4
    result = repartition_affected(old, codes, np.array([0b1111, 0b1111]), 5, 20)
    assert_bounds(result.segments, codes.size + 2, 5, 20)
    grown = [s.tolist() for s in old if codes[s[0]] == 0b1111][0] + [30, 31]
    assert [result.segments[i].tolist() for i in result.changed] == [grown]
    assert result.removed.tolist() == [i for i, s in enumerate(old) if codes[s[0]] == 0b1111]
    untouched = [s.tolist() for s in old if codes[s[0]] != 0b1111]
    assert [s.tolist() for s in result.segments[:3]] == untouched


def test_repartition_sends_a_new_stray_code_to_the_hamming_nearest_segment():
    codes = np.array([0b0000] * 8 + [0b1111] * 9)
    old = partition(codes, 5, 20)
    result = repartition_affected(old, codes, np.array([0b1110]), 5, 20)
    assert [result.segments[i].tolist() for i in result.changed] == [list(range(8, 18))]
    assert result.segments[0].tolist() == list(range(8))


def test_repartition_keeps_reproduced_segments_and_splits_when_full():
    codes = np.zeros(50, dtype=np.int64)
    old = partition(codes, 5, 50)
    result = repartition_affected(old, codes, np.zeros(5, dtype=np.int64), 5, 50)
    assert sizes(result.segments) == [50, 5]
    assert result.segments[0].tolist() == list(range(50))
    assert result.changed.tolist() == [1] and result.removed.tolist() == []


def test_repartition_without_new_rows_changes_nothing():
    codes = np.array([1] * 6 + [2] * 6)
    old = partition(codes, 5, 10)
    result = repartition_affected(old, codes, np.empty(0, dtype=np.int64), 5, 10)
    assert [s.tolist() for s in result.segments] == [s.tolist() for s in old]
    assert result.changed.size == 0 and result.removed.size == 0


def test_repartition_rejects_segments_that_do_not_cover_the_rows():
    with pytest.raises(ValueError, match="cover"):
        repartition_affected([np.array([0, 1])], np.array([1, 1, 1]), np.array([1]), 1, 5)


@settings(max_examples=100, deadline=None)
@given(old_codes=code_arrays(max_size=200), new_codes=code_arrays(max_size=40), bound=bounds())
def test_repartition_property(old_codes, new_codes, bound):
    s_min, s_max = bound
    old = partition(old_codes, s_min, s_max)
    result = repartition_affected(old, old_codes, new_codes, s_min, s_max)
    n = old_codes.size + new_codes.size
    assert_bounds(result.segments, n, s_min, s_max)
    old_sets = {s.tobytes() for s in old}
    changed = set(result.changed.tolist())
    for i, seg in enumerate(result.segments):
        assert (seg.tobytes() in old_sets) == (i not in changed)
    assert len(old) - result.removed.size + len(changed) == len(result.segments)
    # Every new row sits in a changed segment.
    new_rows = set(range(old_codes.size, n))
    assert new_rows <= {int(r) for i in changed for r in result.segments[i]}


def test_repartition_removes_rows_and_renumbers_the_rest():
    # Three buckets of 6; two rows of the middle one leave, so only it is rebuilt (4 < s_min
    # merges it into its Hamming-nearest neighbour 0b0001's segment).
    codes = np.array([0b0000] * 6 + [0b0001] * 6 + [0b1110] * 6)
    old = partition(codes, 5, 20)
    result = repartition_affected(old, codes, np.empty(0, dtype=np.int64), 5, 20, removed=np.array([6, 7]))
    assert_bounds(result.segments, 16, 5, 20)
    # Kept rows renumber: old rows 8..17 become 6..15.
    assert [result.segments[i].tolist() for i in result.changed] == [list(range(0, 10))]
    assert sorted(result.removed.tolist()) == [0, 1]
    assert [s.tolist() for s in result.segments if s[0] == 10] == [list(range(10, 16))]


def test_repartition_drops_a_segment_whose_rows_all_leave():
    codes = np.array([0b0000] * 6 + [0b1111] * 6)
    old = partition(codes, 5, 20)
    result = repartition_affected(old, codes, np.array([0b1111]), 5, 20, removed=np.arange(6))
    assert [s.tolist() for s in result.segments] == [list(range(7))]
    assert result.removed.tolist() == [0, 1]


@settings(max_examples=100, deadline=None)
@given(old_codes=code_arrays(max_size=200), new_codes=code_arrays(max_size=40), bound=bounds(),
       data=st.data())
def test_repartition_with_removals_property(old_codes, new_codes, bound, data):
    s_min, s_max = bound
    old = partition(old_codes, s_min, s_max)
    removed = np.array(sorted(data.draw(st.sets(st.integers(0, max(old_codes.size - 1, 0)),
                                                max_size=old_codes.size // 2))) if old_codes.size else [],
                       dtype=np.int64)
    result = repartition_affected(old, old_codes, new_codes, s_min, s_max, removed=removed)
    n = old_codes.size - removed.size + new_codes.size
    covered = np.sort(np.concatenate(result.segments)) if result.segments else np.empty(0, np.int64)
    assert covered.tolist() == list(range(n))
    # A segment that lost a row is never reported as unchanged.
    renumber = np.cumsum(np.isin(np.arange(old_codes.size), removed, invert=True)) - 1
    intact = {renumber[s].tobytes() for s in old if not np.isin(s, removed).any()}
    for i, seg in enumerate(result.segments):
        if i not in set(result.changed.tolist()):
            assert seg.tobytes() in intact
