"""Adapters to outside systems. One factory per backend kind; `auto` devices are resolved once here."""

from __future__ import annotations


def resolve_device(device: str) -> str:
    """`auto` -> `cuda` when torch sees a GPU, else `cpu`; explicit values pass through."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
