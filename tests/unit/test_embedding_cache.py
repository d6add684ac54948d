"""The on-disk embedding cache: a text is embedded once per model, whoever asks again reads it back."""

import numpy as np

from hygraph.backends.embedder import CachedEmbedder


class Counting:
    dim, max_seq_length, precision = 3, 16, "float32"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def encode(self, texts):
        self.seen.extend(texts)
        return np.array([[len(t), ord(t[0]), 1.0] for t in texts], np.float32)


def test_cached_vectors_are_the_models_and_each_text_is_embedded_once(tmp_path):
    inner = Counting()
    cache = CachedEmbedder(inner, tmp_path, "model-a")
    first = cache.encode(["alpha", "beta", "alpha", "東京"])
    np.testing.assert_array_equal(first, Counting().encode(["alpha", "beta", "alpha", "東京"]))
    assert inner.seen == ["alpha", "beta", "東京"]
    again = CachedEmbedder(inner, tmp_path, "model-a").encode(["beta", "gamma"])  # another process, same file
    np.testing.assert_array_equal(again, Counting().encode(["beta", "gamma"]))
    assert inner.seen[3:] == ["gamma"]
    CachedEmbedder(inner, tmp_path, "model-b").encode(["beta"])  # another model: its own vectors
    assert inner.seen[4:] == ["beta"]
    assert cache.encode([]).shape == (0, 3)
