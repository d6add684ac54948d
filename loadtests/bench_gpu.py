"""CPU against CUDA, on one machine that has both, for the build stages that config can put on a GPU.

Run on a GPU machine (`python loadtests/bench_gpu.py --corpus C --model M`); prints one JSON line per step:
- passage embedding with hygraph's embedder (sentence-transformers runtime) over the corpus: CUDA bfloat16 and
  float32 against CPU float32 on every core, medians of 3 runs after a warm-up, and each vector set's least cosine
  with the CPU float32 vectors;
- LSH hashing of 200k x 384 vectors into 16-bit codes (host arrays in, codes out, as the build calls it);
- Cleora on a random 1M-node graph of 16M directed edges, dim 256, 3 iterations, and the largest difference.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Callable

import numpy as np
import scipy.sparse as sp
import torch

from hygraph.backends.embedder import make_embedder
from hygraph.config import EmbedderConfig
from hygraph.core.cleora import cleora_embed
from hygraph.core.lsh import hash_codes, make_hyperplanes


def timed(step: Callable[[], object], runs: int) -> tuple[float, object]:
    """Median seconds of `runs` calls (the device synchronized around each) and the last result."""
    seconds, result = [], None
    for _ in range(runs):
        torch.cuda.synchronize()
        start = time.perf_counter()
        result = step()
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result


def embedding(out: dict, texts: list[str], model: str) -> None:
    vectors = {}
    for name, device, precision, batch in [("cuda_bf16_b64", "cuda", "bfloat16", 64),
                                           ("cuda_bf16_b512", "cuda", "bfloat16", 512),
                                           ("cuda_fp32_b64", "cuda", "float32", 64),
                                           ("cpu_fp32_b64", "cpu", "float32", 64)]:
        embedder = make_embedder(EmbedderConfig(model=model, device=device, precision=precision, batch_size=batch,
                                                runtime="torch"))
        embedder.encode(texts[:256])
        seconds, vectors[name] = timed(lambda: embedder.encode(texts), 3 if device == "cuda" else 1)
        out[f"embed_{name}_s"] = round(seconds, 3)
        out[f"embed_{name}_passages_per_s"] = round(len(texts) / seconds, 1)
        print(json.dumps(out), flush=True)
    ref = vectors["cpu_fp32_b64"]
    for name, v in vectors.items():
        cos = (v * ref).sum(1) / np.linalg.norm(v, axis=1) / np.linalg.norm(ref, axis=1)
        out[f"embed_{name}_min_cos_vs_cpu_fp32"] = float(cos.min())


def lsh(out: dict) -> None:
    vectors = np.random.default_rng(0).standard_normal((200_000, 384)).astype(np.float32)
    planes = make_hyperplanes(384, 16, seed=0)
    hash_codes(vectors[:1000], planes, device="cuda")
    for device in ("cpu", "cuda"):
        out[f"lsh_200k_x384_{device}_s"] = round(timed(lambda: hash_codes(vectors, planes, device=device), 3)[0], 4)


def cleora(out: dict) -> None:
    n, rng = 1_000_000, np.random.default_rng(0)
    # sp.random samples among n*n positions: draw the edges directly instead.
    src, dst = rng.integers(0, n, 8 * n), rng.integers(0, n, 8 * n)
    adj = sp.csr_matrix((np.ones(16 * n, np.float32), (np.r_[src, dst], np.r_[dst, src])), shape=(n, n))
    adj.data[:] = 1.0
    ids = [f"v{i}" for i in range(n)]
    cleora_embed(adj[:1000, :1000], ids[:1000], dim=64, iterations=2, seed=7, device="cuda")
    out["cleora_edges"] = int(adj.nnz)
    cpu_s, cpu = timed(lambda: cleora_embed(adj, ids, dim=256, iterations=3, seed=7, device="cpu"), 1)
    gpu_s, gpu = timed(lambda: cleora_embed(adj, ids, dim=256, iterations=3, seed=7, device="cuda"), 3)
    out.update(cleora_1M_dim256_cpu_s=round(cpu_s, 2), cleora_1M_dim256_cuda_s=round(gpu_s, 2),
               cleora_max_abs_diff=float(np.abs(cpu - gpu).max()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", required=True, help="JSONL of {id, title, text} passages")
    parser.add_argument("--model", default="bundled", help="embedder.model: 'bundled' or a local model directory")
    args = parser.parse_args()
    with open(args.corpus, encoding="utf-8") as f:
        texts = [f"{d['title']}\n{d['text']}" for d in map(json.loads, f)]
    out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cpu_threads": torch.get_num_threads(),
           "passages": len(texts)}
    embedding(out, texts, args.model)
    lsh(out)
    print(json.dumps(out), flush=True)
    cleora(out)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
