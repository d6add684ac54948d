"""Embedding during a build: Ray Data for bulk texts, one long-lived actor for small sequential calls."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from hygraph.config import EmbedderConfig
from hygraph.indexing.progress import Stages
from hygraph.indexing.stages import EmbedStage


def embed_bulk(cfg: EmbedderConfig, texts: Sequence[str], stages: Stages, desc: str,
               batch_size: int) -> np.ndarray:
    """Ray Data batch inference over `texts` (order preserved) on the configured actor pool."""
    import ray.data

    if not texts:
        return np.zeros((0, 0), np.float32)
    # Length-sorted blocks pad less: a batch of short entity names no longer waits on a long fact.
    order = np.argsort([len(t) for t in texts], kind="stable")
    # Blocks of about 500 texts: progress moves as each block lands, not once per several thousand.
    ds = ray.data.from_items([{"text": texts[i]} for i in order],
                             override_num_blocks=max(1, min(400, -(-len(texts) // 500))))
    ds = ds.map_batches(EmbedStage, batch_size=batch_size, compute=ray.data.ActorPoolStrategy(size=cfg.pool_size),
                        num_cpus=cfg.num_cpus, num_gpus=cfg.num_gpus or None,
                        fn_constructor_kwargs={"embedder": cfg.model_dump(), "threads": cfg.num_cpus})
    parts: list[np.ndarray] = []
    with stages.bar(len(texts), desc) as bar:
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            parts.append(np.asarray(batch["embedding"], dtype=np.float32))
            bar.update(len(parts[-1]))
    out = np.empty((len(texts), parts[0].shape[1]), np.float32)
    out[order] = np.vstack(parts)
    return out


class _EncoderActor:
    def __init__(self, embedder: dict[str, Any], threads: float) -> None:
        from hygraph.backends.embedder import make_embedder

        self.embedder = make_embedder(EmbedderConfig(**embedder), threads=threads)

    def encode(self, texts: list[str]) -> np.ndarray:
        return self.embedder.encode(texts)


class Encoder:
    """`embedder.pool_size` Ray actors holding the model, for the hierarchy's per-layer summaries.

    Each call splits its texts evenly over the actors, so small sequential calls still use
    the whole pool; the actors live for one build and are killed by `close`.
    """

    def __init__(self, cfg: EmbedderConfig) -> None:
        import ray

        self._ray = ray
        remote = ray.remote(num_cpus=cfg.num_cpus, num_gpus=cfg.num_gpus)(_EncoderActor)
        self.actors = [remote.remote(cfg.model_dump(), cfg.num_cpus) for _ in range(cfg.pool_size)]

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        parts = np.array_split(np.arange(len(texts)), len(self.actors))
        refs = [a.encode.remote([texts[i] for i in idx]) for a, idx in zip(self.actors, parts) if len(idx)]
        return np.vstack(self._ray.get(refs))

    def close(self) -> None:
        for actor in self.actors:
            self._ray.kill(actor)
