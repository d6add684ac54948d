import pytest

from hygraph.core.chunking import token_windows


def test_short_text_is_one_window():
    assert token_windows(10, 1200, 100) == [(0, 10)]
    assert token_windows(1200, 1200, 100) == [(0, 1200)]


def test_windows_overlap_and_cover_everything():
    w = token_windows(25, 10, 3)
    assert w == [(0, 10), (7, 17), (14, 24), (15, 25)]
    covered = set()
    for s, e in w:
        assert e - s == 10
        covered |= set(range(s, e))
    assert covered == set(range(25))


def test_invalid_parameters():
    with pytest.raises(ValueError):
        token_windows(10, 5, 5)
    with pytest.raises(ValueError):
        token_windows(10, 0, 0)
