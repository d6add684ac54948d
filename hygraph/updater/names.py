"""Names of the updater's actors, in a module of their own: a Serve replica that looks an actor up
imports this and not the actor's module (which brings the whole update path: indexing, torch)."""

from __future__ import annotations

import hashlib
from pathlib import Path

from hygraph.store.objects import index_uri


def updater_name(index_dir: str | Path) -> str:
    """One name per index directory, known before its first build (pods mount it at one path)."""
    return f"hygraph-updater-{hashlib.sha1(index_uri(index_dir).encode()).hexdigest()[:12]}"
