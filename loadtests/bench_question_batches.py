"""CPU per question of the ONNX question encoder on batches as a Retriever's batcher forms them, and the cost
model `length_groups` cuts them by.

A served replica embeds the questions that arrive together in one `encode` call (serve/batching.py); this
draws such batches (sizes 16, 8, 4, 2, 1) at random from the dev sets' questions and prints the process CPU
per question of `OnnxEmbedder.encode` on them, one thread as in a replica. Run it with `PYTHONPATH` at two
trees to compare their encoders. `--fit` times calls of n equal texts of L tokens and
prints the least-squares fit of ms = a + b*n*L + c*n*L^2 that hygraph/backends/onnx_embedder.py's constants
come from.

    python loadtests/bench_question_batches.py [--fit] [--dev ../shared/data/dev]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `python loadtests/x.py` finds the package

from hygraph.backends.embedder import model_path  # noqa: E402
from hygraph.backends.onnx_embedder import OnnxEmbedder  # noqa: E402
from hygraph.config import load_config  # noqa: E402

DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "dev"  # beside the checkout, as bench_scale finds it
SETS = ("musique_train100", "2wiki_dev", "hotpotqa_train100")


def questions(dev: Path) -> list[str]:
    out: list[str] = []
    for name in SETS:
        with open(dev / f"{name}.questions.jsonl") as f:
            out += [json.loads(line)["question"] for line in f if line.strip()]
    return out


def per_question_ms(model: OnnxEmbedder, pool: list[str], size: int, rng: random.Random) -> float:
    batches = [rng.sample(pool, size) for _ in range(max(8, 160 // size))]
    model.encode(batches[0])  # warm-up
    t0 = time.process_time()
    for batch in batches:
        model.encode(batch)
    return (time.process_time() - t0) / (len(batches) * size) * 1e3


def fit(model: OnnxEmbedder) -> None:
    """Time `encode` on n equal texts of L tokens (L - 2 words that are one token each, plus the two markers):
    one model call each, unpadded. Print each and the fitted model."""
    rows = []
    for width in (8, 16, 24, 32, 48, 64):
        for n in (1, 2, 4, 8, 16):
            texts = [" ".join(["house"] * (width - 2))] * n
            model.encode(texts)
            reps = max(3, 40 // n)
            t0 = time.process_time()
            for _ in range(reps):
                model.encode(texts)
            rows.append((n, width, (time.process_time() - t0) / reps * 1e3))
    design = np.array([[1.0, n * w, n * w * w] for n, w, _ in rows])
    coef, *_ = np.linalg.lstsq(design, np.array([ms for *_, ms in rows]), rcond=None)
    for (n, w, ms), predicted in zip(rows, design @ coef):
        print(f"n={n:2d} L={w:2d}: {ms:7.2f} ms (fit {predicted:7.2f})")
    print(f"fit: ms = {coef[0]:.3f} + {coef[1]:.5f}*n*L + {coef[2]:.7f}*n*L^2 "
          f"(a call's fixed cost = {coef[0] / coef[1]:.1f} tokens)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fit", action="store_true", help="also fit the call cost model")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--dev", type=Path, default=DEV, help="the dev sets' directory")
    args = ap.parse_args()
    cfg = load_config()
    model = OnnxEmbedder(cfg.embedder, model_path(cfg.embedder), threads=1)
    pool = questions(args.dev)
    rng = random.Random(args.seed)
    figures = {size: per_question_ms(model, pool, size, rng) for size in (16, 8, 4, 2, 1)}
    print("ms CPU per question, by batch size: " + ", ".join(f"{k}: {v:.2f}" for k, v in figures.items()))
    if args.fit:
        fit(model)


if __name__ == "__main__":
    main()
