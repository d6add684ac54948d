"""Adapters to outside systems. One factory per backend kind; `auto` devices are resolved once here."""

from __future__ import annotations


def resolve_device(device: str) -> str:
    """`auto` -> `cuda` when torch sees a GPU, else `cpu`; explicit values pass through."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


# /proc/cpuinfo flags of native bfloat16 arithmetic (without them torch emulates it, slower than float32).
CPU_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The processor's feature flags (empty where the file is missing or unreadable, e.g. off Linux)."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def resolve_precision(precision: str, device: str, flags: frozenset[str] | None = None) -> str:
    """`auto` -> `bfloat16` where `device` has native bfloat16 (CPU flags, or a CUDA GPU that reports it),
    else `float32`; explicit values pass through."""
    if precision != "auto":
        return precision
    if device == "cuda":
        import torch

        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    return "bfloat16" if CPU_BF16_FLAGS & (cpu_flags() if flags is None else flags) else "float32"
