"""A transformer sentence embedder run by ONNX Runtime instead of torch: the same vectors (cosine 0.9999999
against sentence-transformers on the dev questions), half the CPU per question, and no torch import in the
process that embeds. With `embedder.question_weights: int8` the graph's weights are also quantized to int8 once
(`quantize`) for the question encoder: about half its CPU again, at cosine ~0.99 against float32.

The ONNX graph is exported once per machine from the packaged weights (`export`, which needs torch,
transformers and onnx, at first use) into `embedder.onnx_dir`, named after the model directory and the
file sizes and times of its weights, so a changed model is exported again. Only the models
sentence-transformers runs as Transformer -> mean Pooling (-> Normalize) qualify (`exportable`); others
keep the torch embedder.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Sequence

import numpy as np

from hygraph.config import EmbedderConfig
from hygraph.errors import ConfigError
from hygraph.processes import locked

_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# The cost of one call of n texts padded to L tokens, in units of one token's work: _CALL_TOKENS + n*L*(1 + L /
# _ATTENTION_TOKENS). Fitted on the bundled MiniLM, one thread, n 1-16 and L 8-64: the session's calls alone
# ms = 2.65 + 0.150*nL + 0.00058*nL^2 (within 10%), `encode` with its tokenizing and pooling 1.69 + 0.179*nL +
# 0.00041*nL^2 (`loadtests/bench_question_batches.py --fit`). A call's fixed cost is worth 9-18 tokens (the cut
# is as good anywhere from 9 to 30), so a batch of questions padded to its longest (20 tokens typical, 45 the
# longest of the dev sets) paid more for its padding than its one call saved.
_CALL_TOKENS = 17.0
_ATTENTION_TOKENS = 256.0


def length_groups(lengths: Sequence[int], max_batch: int) -> list[tuple[int, int]]:
    """The cut of `lengths` (token counts, longest first) into model calls of at most `max_batch` texts, each
    padded to its first text's length, of least total cost (the cost model above): [start, end) ranges in order.
    Texts of near-equal length share a call; a short text does not ride with long ones."""
    n = len(lengths)
    best, cut = [0.0] + [float("inf")] * n, [0] * (n + 1)
    for end in range(1, n + 1):
        for start in range(max(0, end - max_batch), end):
            pad = lengths[start]
            cost = best[start] + _CALL_TOKENS + (end - start) * pad * (1.0 + pad / _ATTENTION_TOKENS)
            if cost < best[end]:
                best[end], cut[end] = cost, start
    groups, end = [], n
    while end > 0:
        groups.append((cut[end], end))
        end = cut[end]
    return groups[::-1]


def exportable(path: Path) -> bool:
    """Whether the sentence-transformers directory is Transformer -> mean Pooling (-> Normalize), with a
    tokenizer.json: what `OnnxEmbedder` computes."""
    try:
        modules = json.loads((path / "modules.json").read_text())
        types = [m.get("type") for m in modules]
        if types[:2] != [_TRANSFORMER, _POOLING] or any(t != _NORMALIZE for t in types[2:]):
            return False
        pooling = json.loads((path / modules[1]["path"] / "config.json").read_text())
    except (OSError, ValueError, IndexError, KeyError, TypeError):
        return False
    modes = {k: v for k, v in pooling.items() if k.startswith("pooling_mode_")}
    return (modes.get("pooling_mode_mean_tokens") is True and not any(v for k, v in modes.items()
                                                                     if k != "pooling_mode_mean_tokens")
            and (path / "tokenizer.json").is_file() and (path / "config.json").is_file())


def onnx_file(cfg: EmbedderConfig, path: Path) -> Path:
    weights = sorted(p for p in path.iterdir() if p.suffix in (".safetensors", ".bin"))
    stamp = "|".join(f"{p.name}:{p.stat().st_size}:{int(p.stat().st_mtime)}" for p in weights)
    key = hashlib.sha1(f"{path.resolve()}|{stamp}".encode()).hexdigest()[:16]
    root = Path(cfg.onnx_dir).expanduser() if cfg.onnx_dir else Path.home() / ".cache" / "hygraph" / "onnx"
    return root / key / "model.onnx"


def export(model_dir: Path, target: Path) -> None:
    """The transformer's token states as an ONNX graph (dynamic batch and sequence axes), written atomically."""
    import torch
    from transformers import AutoModel

    class _States(torch.nn.Module):
        def __init__(self, model: torch.nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                    token_type_ids: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=input_ids, attention_mask=attention_mask,
                              token_type_ids=token_type_ids).last_hidden_state

    model = _States(AutoModel.from_pretrained(str(model_dir)).eval())
    example = tuple(torch.ones((1, 8), dtype=torch.long) for _ in INPUTS)
    axes = {name: {0: "batch", 1: "tokens"} for name in (*INPUTS, "states")}
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    # The exporter's notes on how it lowered ops are for its developers, not for a user's first start.
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, example, str(tmp), input_names=list(INPUTS), output_names=["states"],
                          dynamic_axes=axes, opset_version=17, dynamo=False)
    os.replace(tmp, target)


def quantize(source: Path, target: Path) -> None:
    """`source`'s graph with its matrix products' weights in int8, per output channel (dynamic quantization:
    activations are scaled per call), written atomically."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
    os.replace(tmp, target)


class OnnxEmbedder:
    """`int8`: the graph's weights quantized (`quantize`), for questions only (`embedder.question_weights`)."""

    def __init__(self, cfg: EmbedderConfig, model_dir: Path, threads: float | None = None,
                 int8: bool = False) -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        if not exportable(model_dir):
            raise ConfigError(f"embedder.runtime: onnx runs Transformer -> mean Pooling models; {model_dir} is not one")
        target = onnx_file(cfg, model_dir)
        if not target.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            with locked(target.with_name(".export.lock")):  # one export per machine, however many start at once
                if not target.is_file():
                    export(model_dir, target)
        if int8:
            source, target = target, target.with_name("model.int8.onnx")
            if not target.is_file():
                with locked(target.with_name(".export.lock")):
                    if not target.is_file():
                        quantize(source, target)
        self.precision = "int8" if int8 else "float32"
        config = json.loads((model_dir / "config.json").read_text())
        self.dim = int(config["hidden_size"])
        limit = cfg.max_seq_length
        if limit is None:
            st_config = model_dir / "sentence_bert_config.json"
            limit = json.loads(st_config.read_text()).get("max_seq_length") if st_config.is_file() else None
        self.max_seq_length = int(limit or config.get("max_position_embeddings", 512))
        self._tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tok.enable_truncation(self.max_seq_length)
        self._tok.no_padding()  # each call is padded to its own longest text (`encode`)
        self._pad_id = int(config.get("pad_token_id") or 0)
        options = ort.SessionOptions()
        # Threads follow the caller's CPU share, as the torch embedder's do (more spin against the other stages).
        options.intra_op_num_threads = max(1, int(threads or 1))
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(target), options, providers=["CPUExecutionProvider"])
        self.batch_size = cfg.batch_size

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """L2-normalized mean of the token states over the attention mask, as sentence-transformers computes it.
        The texts are run longest first in `length_groups`' calls, each padded to its own longest text."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        encs = self._tok.encode_batch(list(texts))
        lengths = [len(e.ids) for e in encs]
        order = sorted(range(len(texts)), key=lambda i: -lengths[i])
        for start, end in length_groups([lengths[i] for i in order], self.batch_size):
            rows = order[start:end]
            width = lengths[rows[0]]
            ids = np.full((len(rows), width), self._pad_id, dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            types = np.zeros((len(rows), width), dtype=np.int64)
            for j, i in enumerate(rows):
                e, k = encs[i], lengths[i]
                ids[j, :k], mask[j, :k], types[j, :k] = e.ids, 1, e.type_ids
            states = self._session.run(None, {"input_ids": ids, "attention_mask": mask, "token_type_ids": types})[0]
            weights = mask[..., None].astype(np.float32)
            pooled = (states * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[rows] = pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)
        return out
