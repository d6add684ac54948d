"""The layer loop of HyGRAG Alg. 1 / EraRAG Alg. 1: hash -> partition -> summarize -> embed -> repeat.

Summarizing and embedding are injected callables, so this module stays free of models and I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from hygraph.core.lsh import HASH_ROWS, hash_codes, make_hyperplanes, partition
from hygraph.model import SummaryNode, sha1

# (member ids per segment, texts of the summaries built so far by id) -> one summary text per segment.
Summarize = Callable[[list[list[str]], Mapping[str, str]], list[str]]
# texts -> float array (len(texts), dim).
Embed = Callable[[list[str]], np.ndarray]


def summary_key(member_ids: Iterable[str]) -> str:
    """SummaryNode.key: sha1 of the sorted member ids joined by newlines, so equal member sets share a key."""
    return sha1("\n".join(sorted(member_ids)))


# `most_mentioned` counts over the whole range of values once the mentions number at least 1/DENSE_MENTIONS of
# it: an array of the range costs more than sorting a short sequence, less than sorting a long one.
DENSE_MENTIONS = 4


def most_mentioned(mentions: Sequence[np.ndarray], k: int) -> np.ndarray:
    """The k most frequent values of the concatenated `mentions` (non-negative ints), ties broken by first
    occurrence: what `collections.Counter(...).most_common(k)` gives over the same sequence, in C steps
    instead of a Python step per mention (a top summary's leaves mention every entity of the corpus)."""
    seq = np.concatenate(mentions) if len(mentions) else np.zeros(0, np.int64)
    if not len(seq) or k <= 0:
        return np.zeros(0, np.int64)
    span = int(seq.max()) + 1
    if len(seq) * DENSE_MENTIONS < span:
        # Few mentions of a wide range (most summaries: a segment's leaves): count the distinct values only.
        values, first, inverse = np.unique(seq, return_index=True, return_inverse=True)
        counts = np.bincount(inverse.ravel(), minlength=len(values))
        return values[np.lexsort((first, -counts))[:k]].astype(np.int64)
    # Many (a top summary): counts over the whole range in O(n), no sort of the sequence.
    counts = np.bincount(seq, minlength=span)
    # Every value as frequent as the k-th most frequent one is a candidate: ties at the cut need their first
    # occurrence to be ranked.
    cut = max(int(np.partition(counts, span - k)[span - k]) if span > k else 1, 1)
    candidates = np.flatnonzero(counts >= cut)
    first = np.full(span, len(seq), np.int64)
    np.minimum.at(first, seq, np.arange(len(seq)))
    return candidates[np.lexsort((first[candidates], -counts[candidates]))[:k]]


# Rows normalized at a time by `layer0_features`: its temporaries stay a few MB, whatever the corpus.
FEATURE_ROWS = 8192

# A feature block: one array, or arrays whose rows follow one another (the chunks' text vectors, then the entities').
Block = np.ndarray | Sequence[np.ndarray]


def _block_parts(blocks: Sequence[Block]) -> tuple[list[list[np.ndarray]], int, list[int]]:
    """Each block as its list of row-parts, the number of rows the blocks share and each block's width."""
    if not blocks:
        raise ValueError("need at least one feature block")
    parts_of = [list(b) if isinstance(b, (list, tuple)) else [b] for b in blocks]
    rows = {sum(np.shape(p)[0] for p in parts) for parts in parts_of}
    if len(rows) != 1:
        raise ValueError(f"feature blocks disagree on the number of rows: {sorted(rows)}")
    dims = []
    for parts in parts_of:
        widths = {np.shape(p)[1] for p in parts}
        if len(widths) != 1:
            raise ValueError(f"the parts of a feature block disagree on their width: {sorted(widths)}")
        dims.append(widths.pop())
    return parts_of, rows.pop(), dims


def layer0_features(*blocks: Block) -> np.ndarray:
    """HyGRAG Alg. 1 lines 13-16: layer-0 node features, e.g. [text embedding ; Cleora embedding].

    Each block is L2-normalized per row and scaled by 1/sqrt(len(blocks)), so every block
    weighs the same in a cosine (and so in a hyperplane sign) and rows have unit norm.
    An all-zero row of a block stays zero.

    A block may be a list of arrays whose rows follow one another (the chunks' text vectors, then the
    entities'): they are written into the result in slabs of FEATURE_ROWS rows, so the only array of the
    corpus's size made here is the result (not a stacked copy of each block and its normalized copies).
    """
    parts_of, rows, dims = _block_parts(blocks)
    scale = np.float32(1.0 / np.sqrt(len(blocks)))
    out = np.empty((rows, sum(dims)), np.float32)
    col = 0
    for parts, dim in zip(parts_of, dims):
        row = 0
        for part in parts:
            for start in range(0, np.shape(part)[0], FEATURE_ROWS):
                slab = np.asarray(part[start:start + FEATURE_ROWS], dtype=np.float32)
                norms = np.linalg.norm(slab, axis=1, keepdims=True)
                out[row + start:row + start + len(slab), col:col + dim] = (
                    slab / np.maximum(norms, np.float32(1e-12)) * scale)
            row += np.shape(part)[0]
        col += dim
    return out


def _block_rows(block: Block, start: int, stop: int) -> Block:
    """Rows [start, stop) of a block; of a block in parts, the parts overlapping them, cut (views, no copies)."""
    if not isinstance(block, (list, tuple)):
        return block[start:stop]
    cut, offset = [], 0
    for part in block:
        n = np.shape(part)[0]
        if offset < stop and start < offset + n:
            cut.append(part[max(start - offset, 0):stop - offset])
        offset += n
    return cut


@dataclass(frozen=True, eq=False)
class Layer0Blocks:
    """Layer 0's feature blocks as `layer0_features` takes them, for `build_hierarchy` to hash without making
    the features: an array of (chunks + entities) x every block's width, ~880 MB at 50k passages, that would
    otherwise stay alive while every layer is summarized and embedded."""

    blocks: tuple[Block, ...]

    @property
    def shape(self) -> tuple[int, int]:
        """The features' shape (raises as `layer0_features` would on blocks that do not fit together)."""
        _, rows, dims = _block_parts(self.blocks)
        return rows, sum(dims)

    def codes(self, hyperplanes: np.ndarray, device: str = "cpu") -> np.ndarray:
        """hash_codes(layer0_features(*blocks), hyperplanes, device), bit for bit, from features made a slab
        at a time. A slab is one of hash_codes' batches, so each float32 matmul gets the very rows it would
        get from the whole features (its rounding may depend on them), and a multiple of FEATURE_ROWS, so an
        unsplit block is normalized in the same slabs too."""
        rows = self.shape[0]
        codes = np.empty(rows, np.int64)
        for start in range(0, rows, HASH_ROWS):
            stop = min(start + HASH_ROWS, rows)
            # Not named: a slab held in a variable would still be alive while the next one is made.
            codes[start:stop] = hash_codes(layer0_features(*(_block_rows(b, start, stop) for b in self.blocks)),
                                           hyperplanes, device=device, batch_size=HASH_ROWS)
        return codes


@dataclass(frozen=True, eq=False)
class Layer:
    """One summary layer: how the nodes one layer down were hashed and grouped, and the summaries.

    input_ids/codes are row-aligned (the nodes one layer down and their LSH codes under
    `hyperplanes`); segments[i] holds row indices into input_ids and is summarized by
    node_ids[i] = "L{number}:{i}" with texts[i], embeddings[i] and keys[i].
    """

    number: int
    input_ids: list[str]
    codes: np.ndarray
    hyperplanes: np.ndarray
    segments: list[np.ndarray]
    node_ids: list[str]
    texts: list[str]
    embeddings: np.ndarray
    keys: list[str]

    @property
    def members(self) -> list[list[str]]:
        """Member node ids per segment."""
        return [[self.input_ids[i] for i in seg] for seg in self.segments]


@dataclass(frozen=True, eq=False)
class Hierarchy:
    """Summary layers bottom-up (layers[0] is layer `first_layer`) and the LSH settings updates reuse."""

    layers: list[Layer]
    k: int
    seed: int
    s_min: int
    s_max: int


def build_hierarchy(
    features: np.ndarray | Layer0Blocks,
    ids: Sequence[str],
    summarize: Summarize,
    embed: Embed,
    k: int = 16,
    seed: int = 0,
    s_min: int = 5,
    s_max: int = 50,
    max_layers: int = 4,
    min_layer_size: int = 2,
    first_layer: int = 1,
    device: str = "cpu",
) -> Hierarchy:
    """HyGRAG Alg. 1 lines 14-26 / EraRAG Alg. 1: build summary layers over layer-0 nodes.

    features[i] is the layer-0 vector of ids[i] (see `layer0_features`; hashing only looks at
    signs, so row scale does not matter), or `Layer0Blocks` to hash the first layer from without
    making its features (the same codes, bit for bit). Each layer hashes the nodes below with
    make_hyperplanes(dim, k, seed) -- the same hyperplanes for every layer of equal dimension,
    as EraRAG re-hashes summaries with its stored hyperplanes -- partitions them into
    [s_min, s_max] segments, calls `summarize` once with every segment's member ids and the
    texts of all summaries built so far, and `embed` once on the new texts.
    A layer is built only if it groups the nodes below into fewer segments than nodes.
    Stops after `max_layers` layers, or after a layer with fewer than max(2, min_layer_size)
    segments. Layers are numbered from `first_layer`: a caller that built layer 1 another way
    (Leiden communities) passes its summaries as `features`/`ids` and first_layer=2.
    Deterministic for a given seed when `summarize` and `embed` are.
    """
    if not isinstance(features, Layer0Blocks):
        features = np.asarray(features, dtype=np.float32)
    ids = list(ids)
    if len(features.shape) != 2 or features.shape[0] != len(ids):
        raise ValueError(f"features must be 2-D with one row per id ({len(ids)} ids, shape {features.shape})")
    if len(set(ids)) != len(ids):
        raise ValueError("duplicate ids")
    if max_layers < 0:
        raise ValueError(f"max_layers must be >= 0, got {max_layers}")
    if min_layer_size < 1:
        raise ValueError(f"min_layer_size must be >= 1, got {min_layer_size}")
    if first_layer < 1:
        raise ValueError(f"first_layer must be >= 1, got {first_layer}")

    layers: list[Layer] = []
    summary_texts: dict[str, str] = {}
    below_ids, below = ids, features
    for number in range(first_layer, first_layer + max_layers):
        hyperplanes = make_hyperplanes(below.shape[1], k, seed)
        codes = (below.codes(hyperplanes, device) if isinstance(below, Layer0Blocks)
                 else hash_codes(below, hyperplanes, device=device))
        segments = partition(codes, s_min, s_max)
        if len(segments) >= len(below_ids):
            break
        members = [[below_ids[i] for i in seg] for seg in segments]
        texts = list(summarize(members, dict(summary_texts)))
        if len(texts) != len(segments):
            raise ValueError(f"summarize returned {len(texts)} texts for {len(segments)} segments")
        embeddings = np.asarray(embed(texts), dtype=np.float32)
        if embeddings.ndim != 2 or embeddings.shape[0] != len(texts):
            raise ValueError(f"embed returned shape {embeddings.shape} for {len(texts)} texts")
        node_ids = [SummaryNode.node_id(number, i) for i in range(len(segments))]
        layers.append(Layer(number=number, input_ids=below_ids, codes=codes, hyperplanes=hyperplanes,
                            segments=segments, node_ids=node_ids, texts=texts, embeddings=embeddings,
                            keys=[summary_key(m) for m in members]))
        summary_texts.update(zip(node_ids, texts))
        if len(segments) < max(2, min_layer_size):
            break
        below_ids, below = node_ids, embeddings
    return Hierarchy(layers=layers, k=k, seed=seed, s_min=s_min, s_max=s_max)
