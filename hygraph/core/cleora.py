"""Cleora structure embeddings (HyGRAG eq. 7): iterated random-walk propagation with row L2 normalization."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import scipy.sparse as sp
import torch

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer: a bijective mix of uint64 words, so neighbouring inputs give unrelated bits."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def cleora_init(node_ids: Sequence[str], dim: int, seed: int) -> np.ndarray:
    """Cleora initialization (HyGRAG eq. 7, step 0): a ±1 row per node derived only from (seed, node id).

    A node's row never depends on its position or on the other nodes, so an incremental
    update that grows the graph starts every old node from the same vector. Rows are
    returned L2-normalized (each entry ±1/sqrt(dim)), float32, shape (len(node_ids), dim).
    """
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    prefix = f"{seed}\x00".encode("utf-8")
    node_words = np.fromiter(
        (int.from_bytes(hashlib.blake2b(prefix + nid.encode("utf-8"), digest_size=8).digest(), "little")
         for nid in node_ids),
        dtype=np.uint64, count=len(node_ids))
    # One mixed 64-bit word yields 64 sign bits; little-endian bytes keep the bit order platform-independent.
    word_keys = np.arange((dim + 63) // 64, dtype=np.uint64) * _GOLDEN
    words = _splitmix64(node_words[:, None] ^ word_keys[None, :]).astype("<u8")
    bits = np.unpackbits(words.view(np.uint8), axis=1, bitorder="little")[:, :dim]
    # In place: at a million nodes each (n, dim) temporary is half a GiB.
    signs = bits.astype(np.float32)
    del bits
    signs *= -2.0
    signs += 1.0
    signs /= np.float32(np.sqrt(dim))
    return signs


def _transition(adj: sp.csr_matrix) -> sp.csr_matrix:
    """Random-walk matrix D^-1 A; an isolated node gets a self-loop so propagation keeps its vector."""
    adj = sp.csr_matrix(adj, dtype=np.float32)
    degree = np.asarray(adj.sum(axis=1)).ravel()
    isolated = degree <= 0
    inv = np.zeros_like(degree)
    inv[~isolated] = 1.0 / degree[~isolated]
    return (sp.diags(inv) @ adj + sp.diags(isolated.astype(np.float32))).tocsr()


def cleora_embed(
    adj: sp.csr_matrix,
    node_ids: Sequence[str],
    dim: int = 128,
    iterations: int = 2,
    seed: int = 0,
    device: str = "cpu",
) -> np.ndarray:
    """HyGRAG eq. 7 (Cleora): Z <- rownorm(D^-1 A Z), `iterations` times, from `cleora_init`.

    `adj` is the (weighted) adjacency over len(node_ids) nodes; row i of the result embeds
    node_ids[i]. Isolated nodes keep their (normalized) init. On "cpu", scipy's CSR x dense product
    over the transition matrix's own int32 arrays; on "cuda", torch's sparse x dense. Returns float32
    numpy, shape (n, dim).
    """
    n = len(node_ids)
    if adj.shape != (n, n):
        raise ValueError(f"adjacency shape {adj.shape} does not match {n} node ids")
    if iterations < 0:
        raise ValueError(f"iterations must be >= 0, got {iterations}")
    embedding = cleora_init(node_ids, dim, seed)
    if n == 0 or iterations == 0:
        return embedding
    walk = _transition(adj)
    walk.sum_duplicates()
    if device == "cpu":
        # Not torch's COO: it needs int64 row and column copies of every edge (4.1 GiB more at 200k
        # passages). On a 200k-node, 6M-edge graph this call took 2.6 CPU s and +362 MiB, torch's 3.7 s and +557.
        z = embedding
        for _ in range(iterations):
            z = walk @ z
            z /= np.maximum(np.linalg.norm(z, axis=1, keepdims=True), np.float32(1e-12))
        return z
    walk = walk.tocoo()
    dev = torch.device(device)
    indices = torch.from_numpy(np.vstack([walk.row, walk.col]).astype(np.int64))
    # Canonical CSR converts to row-major, duplicate-free COO, so torch can skip its coalescing sort.
    matrix = torch.sparse_coo_tensor(indices, torch.from_numpy(walk.data), (n, n), device=dev,
                                     check_invariants=False, is_coalesced=True)
    z = torch.from_numpy(embedding).to(dev)
    for _ in range(iterations):
        z = matrix @ z
        z /= z.norm(p=2.0, dim=1, keepdim=True).clamp_min(1e-12)  # F.normalize, without its (n, dim) copy
    return z.cpu().numpy()


def cleora_extend(adj: sp.csr_matrix, node_ids: Sequence[str], embedding: np.ndarray, new: np.ndarray,
                  iterations: int = 2, seed: int = 0) -> np.ndarray:
    """HyGRAG eq. 7 restricted to new nodes: Z[new] <- rownorm(D^-1 A Z)[new], old rows held fixed.

    `embedding` holds the existing nodes' vectors (rows of new nodes are ignored); `new` is a
    boolean mask. New nodes start from `cleora_init` and take `iterations` propagation steps
    through their neighbours, so an insert embeds its nodes without re-running Cleora.
    """
    n = len(node_ids)
    if adj.shape != (n, n) or embedding.shape[0] != n or new.shape != (n,):
        raise ValueError(f"adjacency {adj.shape}, embedding {embedding.shape} and mask {new.shape} "
                         f"must all cover {n} nodes")
    z = np.array(embedding, dtype=np.float32)
    rows = np.flatnonzero(new)
    if rows.size == 0:
        return z
    z[rows] = cleora_init([node_ids[i] for i in rows], z.shape[1], seed)
    sub = sp.csr_matrix(adj[rows], dtype=np.float32)
    degree = np.asarray(sub.sum(axis=1)).ravel()
    linked = degree > 0
    # An isolated new node keeps its init, as in `_transition`'s self-loop.
    walk = sp.diags(np.where(linked, 1.0 / np.maximum(degree, 1e-12), 0.0).astype(np.float32)) @ sub
    for _ in range(iterations):
        step = np.asarray(walk @ z, dtype=np.float32)[linked]
        z[rows[linked]] = step / np.maximum(np.linalg.norm(step, axis=1, keepdims=True), np.float32(1e-12))
    return z
