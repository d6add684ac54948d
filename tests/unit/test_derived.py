"""A version's derived read structures as shared mapped files (store/derived.py)."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hygraph.store import derived

texts = st.lists(st.text(max_size=12), unique=True, max_size=40)


@settings(max_examples=60, deadline=None)
@given(values=texts, probes=st.lists(st.text(max_size=12), max_size=10))
def test_strings_read_back_and_are_found_by_value(tmp_path_factory: pytest.TempPathFactory, values: list[str],
                                                  probes: list[str]) -> None:
    directory = tmp_path_factory.mktemp("d") / "x"
    derived.write(directory, {}, {"s": values}, indexed=("s",))
    got = derived.Derived(directory)
    strings, index = got.strings("s"), got.index("s")
    assert list(strings) == values and len(strings) == len(values)
    assert [index[v] for v in values] == list(range(len(values)))
    for p in probes:
        assert (p in index) == (p in values)
        assert index.get(p) == (values.index(p) if p in values else None)
    assert 3 not in index and index.get(None) is None  # type: ignore[arg-type]


def test_a_hash_collision_never_answers_a_wrong_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(derived, "hashes", lambda keys: np.zeros(len(list(keys)), dtype=np.int64))
    monkeypatch.setattr(derived, "key_hash", lambda key: 0)
    derived.write(tmp_path / "x", {}, {"s": ["a", "b", "c"]}, indexed=("s",))
    index = derived.Derived(tmp_path / "x").index("s")
    assert [index["a"], index["b"], index["c"]] == [0, 1, 2]
    assert "d" not in index
    with pytest.raises(KeyError):
        index["d"]


def test_strings_index_like_a_sequence(tmp_path: Path) -> None:
    derived.write(tmp_path / "x", {}, {"s": ["é", "", "abc", "z"]})
    s = derived.Derived(tmp_path / "x").strings("s")
    assert s[0] == "é" and s[1] == "" and s[-1] == "z" and s[1:3] == ["", "abc"]
    assert list(s.part(2, 4)) == ["abc", "z"] and len(s.part(0, 0)) == 0
    with pytest.raises(IndexError):
        s[4]
    with pytest.raises(IndexError):
        s[-5]


def test_arrays_are_mapped_read_only(tmp_path: Path) -> None:
    derived.write(tmp_path / "x", {"a": np.arange(5, dtype=np.int32)}, {})
    a = derived.Derived(tmp_path / "x").array("a")
    assert a.tolist() == [0, 1, 2, 3, 4] and a.dtype == np.int32 and not a.flags.writeable


def _compute_counting(root: str, counter: str) -> None:
    def compute(directory: Path) -> None:
        with open(counter, "a") as fh:
            fh.write("x")
        derived.write(directory, {"a": np.ones(3)}, {})

    derived.shared(Path(root), "v1", compute)


def test_shared_is_computed_once_by_concurrent_readers(tmp_path: Path) -> None:
    counter = tmp_path / "count"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_compute_counting, args=(str(tmp_path / "derived"), str(counter))) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert counter.read_text() == "x"
    got = derived.shared(tmp_path / "derived", "v1", lambda d: pytest.fail("computed again"))
    assert got.array("a").tolist() == [1.0, 1.0, 1.0]


def test_a_failed_computation_leaves_nothing_and_is_tried_again(tmp_path: Path) -> None:
    root = tmp_path / "derived"

    def broken(directory: Path) -> None:
        derived.write(directory, {"a": np.ones(2)}, {})
        raise RuntimeError("killed halfway")

    with pytest.raises(RuntimeError):
        derived.shared(root, "v1", broken)
    assert sorted(p.name for p in root.iterdir()) == ["v1.lock"]
    got = derived.shared(root, "v1", lambda d: derived.write(d, {"a": np.zeros(2)}, {}))
    assert got.array("a").tolist() == [0.0, 0.0]


def test_an_unwritable_root_raises_os_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        derived.shared(tmp_path / "file" / "derived", "v1", lambda d: derived.write(d, {}, {}))


def test_remove_takes_what_keep_refuses_and_leaves_other_files(tmp_path: Path) -> None:
    root = tmp_path / "derived"
    for version in (1, 2, 3):
        derived.shared(root, derived.directory_name("u", version), lambda d: derived.write(d, {"a": np.ones(1)}, {}))
    (root / f".{derived.directory_name('u', 1)}.99.tmp").mkdir()
    (root / "notes.txt").write_text("")
    assert derived.remove(root, lambda uid, version, fmt: version >= 2) == 1
    f = derived.FORMAT
    assert sorted(p.name for p in root.iterdir()) == [
        "notes.txt", f"u-000002-f{f}", f"u-000002-f{f}.lock", f"u-000003-f{f}", f"u-000003-f{f}.lock"]
    assert derived.remove(root, lambda uid, version, fmt: uid != "u") == 2
    assert sorted(p.name for p in root.iterdir()) == ["notes.txt"]
    assert derived.remove(tmp_path / "absent", lambda *_: False) == 0
