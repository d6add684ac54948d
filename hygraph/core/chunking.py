"""Token windows with overlap (HyGRAG §4.1.3: 1,200-token chunks, 100-token overlap)."""

from __future__ import annotations


def token_windows(n_tokens: int, size: int, overlap: int) -> list[tuple[int, int]]:
    """Fixed-size token windows [start, end) stepping by size - overlap; a short text stays one window.

    The last window is shifted back to end at the text's end instead of leaving a short
    tail, so every window but a lone short one carries `size` tokens of context.
    """
    if size <= 0:
        raise ValueError("size must be positive")
    if not 0 <= overlap < size:
        raise ValueError("overlap must be in [0, size)")
    if n_tokens <= size:
        return [(0, n_tokens)]
    step = size - overlap
    starts = list(range(0, n_tokens - size, step))
    starts.append(n_tokens - size)
    return [(s, s + size) for s in starts]
