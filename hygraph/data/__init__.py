"""Data shipped with the package: the bundled demo corpus (hotpotqa_train100) and its questions."""

from __future__ import annotations

from pathlib import Path

DEMO_DIR = Path(__file__).resolve().parent / "demo"
