"""Hand-made IndexView fields for the retrieval unit tests."""

from __future__ import annotations

from typing import Mapping


def by_doc(chunk_doc: Mapping[str, str]) -> dict[str, list[str]]:
    """`IndexView.doc_chunks` of a hand-made `chunk_doc`: each passage's chunks, in `chunk_doc`'s order."""
    out: dict[str, list[str]] = {}
    for cid, doc in chunk_doc.items():
        out.setdefault(doc, []).append(cid)
    return out
