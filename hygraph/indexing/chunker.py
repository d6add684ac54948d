"""Documents -> chunks: token windows cut at the embedder tokenizer's character offsets."""

from __future__ import annotations

from typing import Sequence

from hygraph.backends.embedder import Tokenizer
from hygraph.core.chunking import token_windows
from hygraph.model import Chunk, Document


def chunk_documents(docs: Sequence[Document], tokenizer: Tokenizer, size: int, overlap: int) -> list[Chunk]:
    texts = [d.full_text for d in docs]
    chunks: list[Chunk] = []
    for doc, text, offsets in zip(docs, texts, tokenizer.offsets(texts)):
        windows = token_windows(len(offsets), size, overlap)
        for ordinal, (start, end) in enumerate(windows):
            piece = text if len(windows) == 1 else text[offsets[start][0]:offsets[end - 1][1]]
            chunks.append(Chunk(id=Chunk.chunk_id(doc.id, ordinal), doc_id=doc.id, ordinal=ordinal,
                                text=piece, n_tokens=end - start, title=doc.title))
    return chunks
