"""The torch-free static embedder: a memory-mapped token table, averaged and normalized as
sentence-transformers' StaticEmbedding does it."""

import json
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hygraph.backends.embedder import StaticEmbedder, is_static_model, make_embedder, read_safetensors
from hygraph.config import EmbedderConfig
from hygraph.errors import ConfigError

# A word-level tokenizer over four words; no special tokens, no normalizer.
VOCAB = {"[UNK]": 0, "red": 1, "green": 2, "blue": 3}
TABLE = np.array([[0, 0, 0], [3, 0, 4], [0, 2, 0], [1, 1, 0]], dtype=np.float16)


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    names = {np.dtype(np.float16): "F16", np.dtype(np.float32): "F32", np.dtype(np.int64): "I64"}
    header, blobs, at = {}, [], 0
    for name, a in tensors.items():
        blob = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": names[a.dtype], "shape": list(a.shape), "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def static_model(root: Path, tensors: dict[str, np.ndarray] | None = None, modules: list | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    write_safetensors(root / "model.safetensors", {"embeddings": TABLE} if tensors is None else tensors)
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
                 "pre_tokenizer": {"type": "Whitespace"}, "post_processor": None, "decoder": None,
                 "model": {"type": "WordLevel", "vocab": VOCAB, "unk_token": "[UNK]"}}
    (root / "tokenizer.json").write_text(json.dumps(tokenizer))
    (root / "config.json").write_text(json.dumps({"model_type": "model2vec"}))
    (root / "modules.json").write_text(json.dumps(modules if modules is not None else [
        {"idx": 0, "name": "0", "path": ".", "type": "sentence_transformers.models.StaticEmbedding"},
        {"idx": 1, "name": "1", "path": "1_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    return root


def test_mean_of_token_rows_then_unit_length(tmp_path):
    model = StaticEmbedder(static_model(tmp_path / "m"))
    assert model.dim == 3 and model.max_seq_length == sys.maxsize
    got = model.encode(["red", "red green", "blue blue red", "purple", ""])
    # red = (3, 0, 4) -> (0.6, 0, 0.8); red+green mean (1.5, 1, 2) / |.|; (1,1,0)*2 + (3,0,4) = (5, 2, 4) / 3;
    # an unknown word is token 0 (a zero row); no tokens at all -> zero vector.
    want = np.array([[0.6, 0, 0.8], np.array([1.5, 1, 2]) / np.sqrt(7.25), np.array([5, 2, 4]) / np.sqrt(45),
                     [0, 0, 0], [0, 0, 0]], dtype=np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert got.dtype == np.float32 and model.encode([]).shape == (0, 3)


def test_the_table_is_memory_mapped_not_copied(tmp_path):
    root = static_model(tmp_path / "m")
    tensors = read_safetensors(root / "model.safetensors")
    assert isinstance(tensors["embeddings"].base, np.memmap) or isinstance(tensors["embeddings"], np.memmap)
    assert not tensors["embeddings"].flags.writeable
    np.testing.assert_array_equal(tensors["embeddings"], TABLE)
    table = StaticEmbedder(root).table
    assert not table.flags.writeable and table.dtype == np.float16


def test_a_model2vec_mapping_and_weights_fold_into_rows(tmp_path):
    # token t reads row mapping[t] of the stored table, scaled by weights[t]
    stored = np.array([[1, 0, 0], [0, 1, 0]], dtype=np.float32)
    root = static_model(tmp_path / "m", {"embeddings": stored, "mapping": np.array([0, 0, 1, 0], np.int64),
                                         "weights": np.array([1, 2, 3, 4], np.float32)})
    model = StaticEmbedder(root)
    np.testing.assert_array_equal(model.table, [[1, 0, 0], [2, 0, 0], [0, 3, 0], [4, 0, 0]])
    np.testing.assert_allclose(model.encode(["green blue"]), [[0, 0.6, 0] + np.array([0.8, 0, 0])], atol=1e-7)


def test_which_directories_are_static_models(tmp_path):
    assert is_static_model(static_model(tmp_path / "a"))
    assert is_static_model(static_model(tmp_path / "b", modules=[
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.StaticEmbedding"}]))
    assert not is_static_model(static_model(tmp_path / "c", modules=[
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    assert not is_static_model(tmp_path / "missing")
    with pytest.raises(ConfigError, match="no embedding table"):
        StaticEmbedder(static_model(tmp_path / "d", {"other": TABLE}))


def test_make_embedder_runs_a_static_model_without_torch(tmp_path):
    """A process that embeds with a static model (a Retriever replica) never imports torch or transformers."""
    root = static_model(tmp_path / "m")
    code = ("import sys; from hygraph.backends.embedder import make_embedder; from hygraph.config import "
            f"EmbedderConfig; m = make_embedder(EmbedderConfig(model={str(root)!r})); "
            "print(m.encode(['red']).tolist()); "
            "print([x for x in ('torch', 'transformers', 'sentence_transformers') if x in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert json.loads(out[0])[0] == pytest.approx([0.6, 0.0, 0.8])
    assert out[1] == "[]"
    assert make_embedder(EmbedderConfig(model=str(root))).dim == 3
