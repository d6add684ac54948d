"""HyperRAG (seed 002 §3.1-3.3): explicit keyword edges, Poincaré-ball embeddings, incremental fine-tuning,
and the Lorentz transform that lets an L2 / inner-product vector index rank by Poincaré distance.

Geometry is the Poincaré ball of curvature -1. Ball operations are written once in torch and accept
numpy arrays or torch tensors, returning the same kind, so training (any device) and serving share them.
torch is imported by the operations that need it, not by this module: the distance, the one operation
serving runs, takes numpy arrays through numpy, so a process that only serves never imports torch.

Queries: at serve time a query has only its text embedding. It is mapped with the same deterministic
`init_from_text` projection as the passages were before training (same seed and dimension), which
places it where an untrained passage with the same text would sit; retrieval may refine it afterwards.

Determinism: with a fixed seed, training is bit-reproducible on CPU. On CUDA the backward pass of
row gathers accumulates with atomics, so results can differ in the last bits between runs.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING, Iterable, Iterator, Sequence, TypeVar

import numpy as np
from scipy import sparse

from hygraph.core.overlap import pair_overlaps, without_hubs

if TYPE_CHECKING:
    import torch

ArrayT = TypeVar("ArrayT", np.ndarray, "torch.Tensor")

# Largest norm a trained point may take; Nickel & Kiela's boundary margin. Keeps 1 - |x|^2 >= 2e-5,
# so the Lorentz coordinates stay below ~1e5 and remain precise in float32 vector indexes.
BALL_EPS = 1e-5
# Initial points lie on this sphere: well inside the ball, where Riemannian steps of size lr move
# points by comparable Euclidean amounts, and far from the boundary where distances blow up.
INIT_RADIUS = 0.5
_MIN_NORM = 1e-15

_STOPWORDS = frozenset("""
a about above after again against all also am an and any are as at be because been before being below
between both but by can could did do does doing down during each either else ever few for from further had
has have having he her here hers herself him himself his how however i if in into is it its itself just
least less like made many may me might more most much must my myself neither no nor not now of off on once
one only or other others our ours ourselves out over own per same shall she should since so some such than
that the their theirs them themselves then there these they this those though through thus to too under
until up upon us very via was we were what when where whether which while who whom whose why will with
within without would yet you your yours yourself yourselves
""".split())
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# A run of two or more capitalized words on one line ("Lothair II", "Bosonid Boso"): a cheap
# named-entity span. Not across newlines, so a title never fuses with the text's first word.
_SPAN = re.compile(r"\b[^\W\d_a-z][\w'’-]*(?:[ \t]+[^\W\d_a-z][\w'’-]*)+", re.UNICODE)
_POSSESSIVE = re.compile(r"['’]s\b")


# ---------------------------------------------------------------- §3.1 explicit connections

def key_terms(texts: Iterable[str]) -> list[set[str]]:
    """§3.1 T(p): the key terms of each passage (lowercase content words and named spans).

    Rule: content words are maximal runs of letters/digits, lowercased, at least 3 characters,
    not in a fixed English stopword list. Named spans are runs of two or more capitalized words in
    the original text (same line, possessive 's dropped), lowercased, with leading/trailing
    stopwords dropped, kept when at least two words remain. A span is one term next to its own
    words, so sharing a full name counts more than sharing one of its words.
    """
    out: list[set[str]] = []
    for text in texts:
        terms = {w for w in (m.lower() for m in _WORD.findall(text)) if len(w) >= 3 and w not in _STOPWORDS}
        for span in _SPAN.findall(text):
            words = [w.lower() for w in _WORD.findall(_POSSESSIVE.sub("", span))]
            while words and words[0] in _STOPWORDS:
                words.pop(0)
            while words and words[-1] in _STOPWORDS:
                words.pop()
            if len(words) >= 2:
                terms.add(" ".join(words))
        out.append(terms)
    return out


def _incidence(term_sets: list[set[str]]) -> sparse.csr_matrix:
    vocab: dict[str, int] = {}
    indptr = [0]
    indices: list[int] = []
    for terms in term_sets:
        indices.extend(vocab.setdefault(t, len(vocab)) for t in terms)
        indptr.append(len(indices))
    data = np.ones(len(indices), dtype=np.int32)
    return sparse.csr_matrix((data, np.asarray(indices, dtype=np.int64), np.asarray(indptr, dtype=np.int64)),
                             shape=(len(term_sets), len(vocab)))


def explicit_edges(term_sets: list[set[str]], theta: float = 0.15, max_neighbors: int = 5,
                   hub_df: int | None = None) -> np.ndarray:
    """§3.1 explicit edges: e_ij = 1 iff |T_i ∩ T_j| / min(|T_i|, |T_j|) >= theta, at most `max_neighbors` each.

    Overlaps come from sparse incidence products, a block of rows at a time. A term held by more than
    `hub_df` passages (None: no limit) is a stopword here: it is left out of T for every passage, so it
    neither links a pair nor counts in a ratio, which keeps the cost linear in the corpus (core.overlap).
    The degree cap is applied in two stages: each passage nominates its `max_neighbors` best partners
    (overlap ratio descending, then lower index), then the nominated pairs are accepted greedily in
    global order (ratio descending, then lower index pair) while both endpoints have a free slot, so
    every passage ends with at most `max_neighbors` edges and the strongest links win. Returns int64
    (m, 2) with i < j, sorted.
    """
    n = len(term_sets)
    if n == 0:
        return np.zeros((0, 2), dtype=np.int64)
    x = without_hubs(_incidence(term_sets), hub_df)
    sizes = np.diff(x.indptr)
    heads: list[np.ndarray] = [np.zeros(0, np.int64)]
    tails: list[np.ndarray] = [np.zeros(0, np.int64)]
    ratios: list[np.ndarray] = [np.zeros(0)]
    for i, j, shared in pair_overlaps(x):
        smaller = np.minimum(sizes[i], sizes[j])
        ratio = shared / np.maximum(smaller, 1)
        ok = (smaller > 0) & (ratio >= theta)
        i, j, ratio = i[ok], j[ok], ratio[ok]
        order = np.lexsort((j, -ratio, i))
        i, j, ratio = i[order], j[order], ratio[order]
        first = np.searchsorted(i, i, side="left")
        nominated = (np.arange(len(i)) - first) < max_neighbors
        heads.append(i[nominated])
        tails.append(j[nominated])
        ratios.append(ratio[nominated])
    i, j, ratio = np.concatenate(heads), np.concatenate(tails), np.concatenate(ratios)
    a, b = np.minimum(i, j), np.maximum(i, j)
    pair_key = a * n + b
    pair_key, first = np.unique(pair_key, return_index=True)
    a, b, ratio = pair_key // n, pair_key % n, ratio[first]
    order = np.lexsort((b, a, -ratio))
    degree = [0] * n
    kept: list[int] = []
    for e, u, v in zip(order.tolist(), a[order].tolist(), b[order].tolist()):
        if degree[u] < max_neighbors and degree[v] < max_neighbors:
            degree[u] += 1
            degree[v] += 1
            kept.append(e)
    kept_idx = np.sort(np.asarray(kept, dtype=np.int64))
    return np.stack([a[kept_idx], b[kept_idx]], axis=1).astype(np.int64).reshape(-1, 2)


# ---------------------------------------------------------------- §3.2 Poincaré ball, curvature -1

def _torch(x: np.ndarray | torch.Tensor) -> torch.Tensor:
    import torch

    if isinstance(x, torch.Tensor):
        return x
    # torch cannot share read-only numpy memory (broadcast views, frozen caches) without a warning.
    return torch.from_numpy(x if x.flags.writeable else x.copy())


def _like(result: torch.Tensor, reference: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
    return result.numpy() if isinstance(reference, np.ndarray) else result


def _sqnorm(x: ArrayT) -> ArrayT:
    return (x * x).sum(-1)[..., None]


def _project(x: torch.Tensor) -> torch.Tensor:
    import torch

    norm = x.norm(dim=-1, keepdim=True).clamp_min(_MIN_NORM)
    return torch.where(norm > 1 - BALL_EPS, x / norm * (1 - BALL_EPS), x)


def _distance(x: ArrayT, y: ArrayT) -> ArrayT:
    """Two tensors or two numpy arrays (the same arithmetic in either)."""
    z = 2 * _sqnorm(x - y) / ((1 - _sqnorm(x)) * (1 - _sqnorm(y)))
    # arccosh(1 + z) written as log1p so small z keeps precision; the clamp makes coincident
    # points (duplicate passages) give a zero gradient instead of 0 * inf.
    z = z.squeeze(-1).clip(min=_MIN_NORM)
    if isinstance(z, (np.ndarray, np.generic)):  # a numpy scalar for two single points
        return np.log1p(z + np.sqrt(z * (z + 2)))
    return (z + (z * (z + 2)).sqrt()).log1p()


def _mobius_add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    xy = (x * y).sum(-1, keepdim=True)
    x2, y2 = _sqnorm(x), _sqnorm(y)
    return ((1 + 2 * xy + y2) * x + (1 - x2) * y) / (1 + 2 * xy + x2 * y2).clamp_min(_MIN_NORM)


def _exp_map(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    import torch

    v_norm = v.norm(dim=-1, keepdim=True).clamp_min(_MIN_NORM)
    lam = 2 / (1 - _sqnorm(x))
    return _mobius_add(x, torch.tanh(lam * v_norm / 2) * v / v_norm)


def _rgrad(x: torch.Tensor, egrad: torch.Tensor) -> torch.Tensor:
    return egrad * (1 - _sqnorm(x)) ** 2 / 4


def _transport(x: torch.Tensor, y: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Parallel transport of v from T_x to T_y: gyr[y, -x] v scaled by lambda_x / lambda_y."""
    u, w = y, -x
    uw, vw = (u * v).sum(-1, keepdim=True), (w * v).sum(-1, keepdim=True)
    uu, ww, uw_ = _sqnorm(u), _sqnorm(w), (u * w).sum(-1, keepdim=True)
    a = -uw * ww + vw + 2 * uw_ * vw
    b = -vw * uu - uw
    d = (1 + 2 * uw_ + uu * ww).clamp_min(_MIN_NORM)
    gyr = v + 2 * (a * u + b * w) / d
    return gyr * (1 - _sqnorm(y)) / (1 - _sqnorm(x))


def project_to_ball(x: ArrayT) -> ArrayT:
    """§3.2: rescale rows whose norm exceeds 1 - BALL_EPS back onto that radius; others unchanged."""
    return _like(_project(_torch(x)), x)


def poincare_distance(x: ArrayT, y: ArrayT) -> ArrayT:
    """§3.2 d_B(x, y) = arccosh(1 + 2|x-y|^2 / ((1-|x|^2)(1-|y|^2))), broadcast over leading axes.

    Two numpy arrays are measured in numpy (serving: no torch in the process); otherwise in torch."""
    if isinstance(x, np.ndarray) and isinstance(y, np.ndarray):
        return _distance(x, y)
    return _like(_distance(_torch(x), _torch(y)), x)


def exp_map(x: ArrayT, v: ArrayT) -> ArrayT:
    """§3.2 Riemannian Adam step: the ball's exponential map exp_x(v) = x ⊕ tanh(lambda_x |v| / 2) v / |v|.

    lambda_x = 2 / (1 - |x|^2) is the conformal factor; ⊕ is Möbius addition.
    """
    return _like(_exp_map(_torch(x), _torch(v)), x)


def riemannian_grad(x: ArrayT, egrad: ArrayT) -> ArrayT:
    """§3.2 Riemannian Adam gradient: the Euclidean gradient rescaled by (1 - |x|^2)^2 / 4."""
    return _like(_rgrad(_torch(x), _torch(egrad)), x)


@lru_cache(maxsize=8)
def _projection(in_dim: int, dim: int, seed: int) -> np.ndarray:
    matrix = np.random.default_rng(seed).standard_normal((in_dim, dim))
    matrix.setflags(write=False)
    return matrix


def init_from_text(embeddings: np.ndarray, dim: int, seed: int) -> np.ndarray:
    """§3.2 initialization: text embeddings -> Poincaré points on the sphere of radius INIT_RADIUS.

    A fixed Gaussian random projection (numpy PCG64 seeded by `seed`, so identical on every
    machine) to `dim` dimensions, then each row rescaled to norm INIT_RADIUS. Row-wise, so a query
    mapped alone lands exactly where it would in a batch. On a sphere the Poincaré distance grows
    with the angle, so before training distance ranking equals cosine ranking of the projections.
    A zero embedding maps to the origin.
    """
    emb = np.asarray(embeddings, dtype=np.float64)
    squeeze = emb.ndim == 1
    emb = emb.reshape(1, -1) if squeeze else emb
    y = emb @ _projection(emb.shape[1], dim, seed)
    norms = np.linalg.norm(y, axis=1, keepdims=True)
    points = INIT_RADIUS * y / np.where(norms > 0, norms, 1.0)
    return points[0] if squeeze else points


# ---------------------------------------------------------------- §3.2-3.3 contrastive training

def _loss(table: torch.Tensor, u: torch.Tensor, v: torch.Tensor, neg: torch.Tensor,
          neg_valid: torch.Tensor) -> torch.Tensor:
    import torch

    cand = torch.cat([v[:, None], neg], dim=1)
    logits = -_distance(table[u][:, None, :], table[cand])
    mask = torch.cat([torch.ones_like(v, dtype=torch.bool)[:, None], neg_valid], dim=1)
    logits = logits.masked_fill(~mask, float("-inf"))
    return (torch.logsumexp(logits, dim=1) - logits[:, 0]).mean()


def _directed(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    e = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    e = e[e[:, 0] != e[:, 1]]
    return np.concatenate([e[:, 0], e[:, 1]]), np.concatenate([e[:, 1], e[:, 0]])


def _negative_mask(u: np.ndarray, neg: np.ndarray, n: int, positive_keys: np.ndarray) -> np.ndarray:
    """False where a sampled negative is u itself or one of u's positives (not a true negative)."""
    keys = u[:, None] * n + neg
    pos = np.minimum(np.searchsorted(positive_keys, keys), max(len(positive_keys) - 1, 0))
    is_positive = positive_keys[pos] == keys if len(positive_keys) else np.zeros(keys.shape, dtype=bool)
    return (neg != u[:, None]) & ~is_positive


def contrastive_loss(points: np.ndarray, edges: np.ndarray, negatives: np.ndarray) -> float:
    """§3.2-3.3 loss: mean over positives (u, v) of -log(e^{-d(u,v)} / sum over {v} ∪ N(u) of e^{-d(u,.)}).

    `edges` (m, 2) are undirected positives, used in both directions (2m rows); `negatives` is
    (2m, K) node ids aligned with rows [edges; reversed edges]. Negatives that are u itself or a
    positive of u are left out of the softmax.
    """
    n = len(points)
    u, v = _directed(edges)
    neg = np.asarray(negatives, dtype=np.int64)
    valid = _negative_mask(u, neg, n, np.unique(u * n + v))
    import torch

    table = torch.from_numpy(np.asarray(points, dtype=np.float64))
    with torch.no_grad():
        loss = _loss(table, torch.from_numpy(u), torch.from_numpy(v), torch.from_numpy(neg),
                     torch.from_numpy(valid))
    return float(loss)


class _RiemannianAdam:
    """Riemannian Adam (Bécigneul & Ganea 2019) on a ball-valued parameter, one manifold per row.

    Rows are updated lazily: only rows touched by the batch move, so frozen and untouched rows keep
    their exact values. The second moment is the squared Riemannian norm of the row's gradient
    (a scalar per row), the step follows the exponential map, and the first moment is parallel
    transported to the new point.
    """

    def __init__(self, param: torch.Tensor, lr: float, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        import torch

        self.param, self.lr, self.betas, self.eps = param, lr, betas, eps
        self.m = torch.zeros_like(param)
        self.v = torch.zeros(param.shape[0], 1, dtype=param.dtype, device=param.device)
        self.t = torch.zeros(param.shape[0], 1, dtype=param.dtype, device=param.device)

    def step(self, rows: torch.Tensor, grad: torch.Tensor) -> None:
        """Moves `rows` (distinct) of the parameter along `grad`, their Euclidean gradient, one row each."""
        import torch

        with torch.no_grad():
            self._step(rows, grad)

    def _step(self, rows: torch.Tensor, grad: torch.Tensor) -> None:
        b1, b2 = self.betas
        x = self.param[rows]
        g = _rgrad(x, grad)
        lam2 = (2 / (1 - _sqnorm(x))) ** 2
        m = b1 * self.m[rows] + (1 - b1) * g
        v = b2 * self.v[rows] + (1 - b2) * lam2 * _sqnorm(g)
        t = self.t[rows] + 1
        direction = (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + self.eps)
        x_new = _project(_exp_map(x, -self.lr * direction))
        self.m[rows] = _transport(x, x_new, m)
        self.v[rows], self.t[rows] = v, t
        self.param[rows] = x_new


def _fit(points: np.ndarray, u: np.ndarray, v: np.ndarray, trainable: np.ndarray, batches: Iterable[np.ndarray],
         lr: float, negatives: int, rng: np.random.Generator, device: str) -> np.ndarray:
    """Shared loop of global training and incremental steps; returns the trained trainable rows."""
    n = len(points)
    train_idx = np.flatnonzero(trainable)
    param_row = np.full(n, -1, dtype=np.int64)
    param_row[train_idx] = np.arange(len(train_idx))
    positive_keys = np.unique(u * n + v)
    import torch

    dev = torch.device(device)
    base = torch.from_numpy(points).to(dev)
    param = _project(base[torch.from_numpy(train_idx).to(dev)].clone())
    opt = _RiemannianAdam(param, lr)
    for batch in batches:
        bu, bv = u[batch], v[batch]
        neg = rng.integers(0, n, size=(len(batch), negatives))
        valid = _negative_mask(bu, neg, n, positive_keys)
        # The loss only sees the batch's rows: gather those into a small table (trainable rows
        # from the parameter, frozen rows as constants) so a step costs O(batch), not O(n).
        ids = np.unique(np.concatenate([bu, bv, neg.ravel()]))
        prow = param_row[ids]
        slots = np.flatnonzero(prow >= 0)
        rows = torch.from_numpy(prow[slots]).to(dev)
        # The batch's trainable rows as a leaf of their own: its gradient is (rows, dim). A gradient taken
        # through `param[rows]` would be a dense (trainable rows, dim) tensor, zeroed and filled every batch,
        # which made training quadratic in the corpus (batches grow with it, and so did each one's cost).
        moving = param[rows].requires_grad_(True)
        table = base[torch.from_numpy(ids).to(dev)].index_put((torch.from_numpy(slots).to(dev),), moving)
        local = [torch.from_numpy(np.searchsorted(ids, a)).to(dev) for a in (bu, bv, neg)]
        loss = _loss(table, *local, torch.from_numpy(valid).to(dev))
        loss.backward()
        opt.step(rows, moving.grad)
    return param.cpu().numpy()


def _epoch_batches(n_pos: int, epochs: int, batch_size: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    for _ in range(epochs):
        perm = rng.permutation(n_pos)
        for start in range(0, n_pos, batch_size):
            yield perm[start:start + batch_size]


def train_poincare(init: np.ndarray, edges: np.ndarray, epochs: int = 3, lr: float = 0.01, negatives: int = 10,
                   batch_size: int = 512, seed: int = 0, device: str = "cpu",
                   trainable_mask: np.ndarray | None = None) -> np.ndarray:
    """§3.2 training: minimize the contrastive loss over `edges` with Riemannian Adam, rows kept in the ball.

    Positives are the undirected `edges` in both directions, each with `negatives` uniform samples
    (u itself and u's positives are excluded from its softmax). Only rows where `trainable_mask`
    is True move; the others are returned bit-identical. Returns float64 (n, dim).
    """
    points = np.asarray(init, dtype=np.float64)
    out = points.copy()
    n = len(points)
    trainable = np.ones(n, dtype=bool) if trainable_mask is None else np.asarray(trainable_mask, dtype=bool)
    u, v = _directed(edges)
    useful = trainable[u] | trainable[v]
    u, v = u[useful], v[useful]
    if not len(u) or epochs <= 0 or not trainable.any():
        return out
    rng = np.random.default_rng(seed)
    out[trainable] = _fit(points, u, v, trainable, _epoch_batches(len(u), epochs, batch_size, rng),
                          lr, negatives, rng, device)
    return out


def incremental_step(points: np.ndarray, subgraph_edges: np.ndarray, neighbours: np.ndarray, steps: int = 10,
                     lr: float = 0.01, negatives: int = 10, seed: int = 0,
                     frozen: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """§3.3 Phase 1, L_inc: fine-tune only V_Δ (nodes of the query's implicit subgraph) and N(V_Δ).

    `neighbours` are the one-hop neighbours of V_Δ found by the caller; `frozen` rows stay fixed even
    inside the subgraph (a query placed as an anchor). Every step uses all of
    ΔG_t's edges (both directions) with fresh negatives; everything else is frozen. Runs on CPU:
    the subgraph is tiny and a device round trip would cost more than the work. Returns the new
    points and the sorted indices of rows whose values changed (a trainable neighbour that never
    enters the loss stays put and is not listed).
    """
    pts = np.asarray(points, dtype=np.float64)
    trainable = np.zeros(len(pts), dtype=bool)
    trainable[np.asarray(subgraph_edges, dtype=np.int64).ravel()] = True
    trainable[np.asarray(neighbours, dtype=np.int64)] = True
    if frozen is not None:
        trainable[np.asarray(frozen, dtype=np.int64)] = False
    u, v = _directed(subgraph_edges)
    out = pts.copy()
    if not len(u) or steps <= 0:
        return out, np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng(seed)
    full_batch = np.arange(len(u))
    out[trainable] = _fit(pts, u, v, trainable, (full_batch for _ in range(steps)), lr, negatives, rng, "cpu")
    changed = np.flatnonzero(np.any(out != pts, axis=1))
    return out, changed


# ---------------------------------------------------------------- serving: Lorentz lift for L2 / IP indexes

def lorentz_lift(points: np.ndarray) -> np.ndarray:
    """Serving lift (ARCHITECTURE §5): hyperboloid coordinates x = (1 + |p|^2, 2p) / (1 - |p|^2).

    x0^2 - |x_1:n|^2 = 1, and x0 y0 - <x_1:n, y_1:n> = cosh d_B(p, q): the lift is an isometry.
    """
    p = np.asarray(points, dtype=np.float64)
    sq = np.sum(p * p, axis=-1, keepdims=True)
    return np.concatenate([1 + sq, 2 * p], axis=-1) / (1 - sq)


def norm_bound(lifted: np.ndarray) -> float:
    """M >= max Euclidean norm of the lifted vectors, with a 1e-6 relative margin against rounding."""
    norms = np.linalg.norm(np.asarray(lifted, dtype=np.float64).reshape(-1, np.shape(lifted)[-1]), axis=1)
    return float(norms.max(initial=1.0) * (1 + 1e-6))


def storage_vectors(points: np.ndarray, m: float) -> np.ndarray:
    """Stored vectors s(p) = (x, sqrt(M^2 - |x|^2)), x = lorentz_lift(p): every s has norm exactly M.

    With t = query_vector(q): |s - t|^2 = M^2 + |t|^2 + 2 cosh d(p, q) and <s, t> = -cosh d(p, q),
    so ascending L2 and descending inner product both rank by Poincaré distance. For float32 indexes
    the inner product is the better-conditioned of the two (no M^2 offset to cancel).
    """
    x = lorentz_lift(points)
    sq = np.sum(x * x, axis=-1, keepdims=True)
    if np.any(sq > m * m):
        raise ValueError(f"norm bound M={m} is below the largest lifted norm {float(np.sqrt(sq.max()))}")
    return np.concatenate([x, np.sqrt(m * m - sq)], axis=-1)


def from_storage(vectors: np.ndarray) -> np.ndarray:
    """Inverse of `storage_vectors` (ARCHITECTURE §5): p = x_1:n / (1 + x0) from the lifted part x of s."""
    x = np.asarray(vectors, dtype=np.float64)[..., :-1]
    return x[..., 1:] / (1.0 + x[..., :1])


def fit_under_bound(points: np.ndarray, m: float) -> np.ndarray:
    """Pull rows whose lift would exceed M back onto the largest radius that fits (§3.3 steps between recalibrations).

    |lift(p)|^2 = (1 + 6s + s^2) / (1 - s)^2 with s = |p|^2 grows with s, so the bound is a radius:
    the smaller root of (M^2 - 1) s^2 - (2 M^2 + 6) s + (M^2 - 1) = 0. A hair inside it, so the
    lifted norm stays below M after rounding.
    """
    p = np.asarray(points, dtype=np.float64)
    a, b = m * m - 1.0, 2.0 * m * m + 6.0
    if a <= 0:
        return np.zeros_like(p)
    s_max = (b - np.sqrt(b * b - 4.0 * a * a)) / (2.0 * a)
    r_max = np.sqrt(s_max) * (1.0 - 1e-9)
    norms = np.linalg.norm(p, axis=-1, keepdims=True)
    return np.where(norms > r_max, p * (r_max / np.maximum(norms, 1e-300)), p)


def query_vector(point: np.ndarray) -> np.ndarray:
    """Query vector t(q) = (-y0, y_1:n, 0) with y = lorentz_lift(q), for one point (d,) or a batch (b, d)."""
    y = lorentz_lift(point)
    t = np.concatenate([y, np.zeros(y.shape[:-1] + (1,))], axis=-1)
    t[..., 0] = -t[..., 0]
    return t


def sample_present(ids: Sequence[str | None], k: int, rng: np.random.Generator, exclude: set[str]) -> list[str]:
    """Up to `k` distinct ids drawn uniformly from those of `ids` that are present (not None: a removed chunk's
    number) and not in `exclude`, in their order in `ids`: an online step's negatives.

    Positions are drawn at random and a repeat, a removed or an excluded one rejected, so a step costs O(k)
    draws, not a pass over every chunk (10^6 of them in a large index); each accepted position is uniform
    over those not taken yet, so the k of them are a uniform k-subset. When few positions qualify (the draws
    run past their budget) one pass lists them and draws from the list instead."""
    n = len(ids)
    if k <= 0 or n == 0:
        return []
    picked: set[int] = set()
    budget = 4 * k + 64
    while len(picked) < k and budget > 0:
        for i in rng.integers(0, n, size=min(budget, 2 * (k - len(picked)))).tolist():
            budget -= 1
            c = ids[i]
            if c is not None and c not in exclude:
                picked.add(i)
                if len(picked) == k:
                    break
    if len(picked) < k:
        qualify = [i for i, c in enumerate(ids) if c is not None and c not in exclude]
        picked = {qualify[j] for j in rng.choice(len(qualify), size=min(k, len(qualify)), replace=False).tolist()}
    return [ids[i] for i in sorted(picked)]  # type: ignore[misc]
