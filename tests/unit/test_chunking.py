import pytest

from hygraph.core.chunking import token_windows


def test_short_text_is_one_window():
    assert token_windows(10, 1200, 100) == [(0, 10)]
    assert token_windows(1200, 1200, 100) == [(0, 1200)]


def test_windows_overlap_and_cover_everything():
    w = token_windows(25, 10, 3)
    assert w == [(0, 10), (7, 17), (14, 24), (15, 25)]
    covered = set()
    for s, e in w:
        assert e - s == 10
        covered |= set(range(s, e))
    assert covered == set(range(25))


def test_invalid_parameters():
    with pytest.raises(ValueError):
        token_windows(10, 5, 5)
    with pytest.raises(ValueError):
        token_windows(10, 0, 0)


def test_the_ingest_starts_no_more_embedding_actors_than_its_chunks_can_fill():
    from hygraph.config import HygraphConfig
    from hygraph.indexing.chunker import chunk_documents
    from hygraph.indexing.stages.ingest import embed_actors, tokenizer
    from hygraph.model import Document

    cfg = HygraphConfig()  # pool_size 2, batches of 256 chunks, 1,200-token chunks stepping by 1,100

    def sizes(docs: list[Document]) -> list[int]:  # what the corpus scan keeps: each text's UTF-8 bytes
        return [len(d.full_text.encode()) for d in docs]

    assert embed_actors(cfg, sizes([Document(str(i), text="a short passage") for i in range(256)]), 256) == 1
    assert embed_actors(cfg, sizes([Document(str(i), text="x") for i in range(257)]), 257) == 2  # two batches
    # Bytes bound the tokens: 1,150 two-byte letters may be 2,300 tokens, two windows, so 128 documents
    # may fill one batch and 129 two.
    assert embed_actors(cfg, sizes([Document(str(i), text="é" * 1150) for i in range(128)]), 128) == 1
    assert embed_actors(cfg, sizes([Document(str(i), text="é" * 1150) for i in range(129)]), 129) == 2
    assert embed_actors(cfg, [], 0) == 1
    # A resumed ingest streams only `todo` documents; the bound counts the largest of them.
    assert embed_actors(cfg, sizes([Document(str(i), text="é" * 1150) for i in range(129)]), 1) == 1
    # The bound holds where it is tightest: one token per byte (digits split apart, multi-byte letters).
    docs = [Document("a", text="1 " * 3000), Document("b", text="ж" * 5000, title="t")]
    chunks = chunk_documents(docs, tokenizer(cfg.embedder.model), 1200, 100)
    assert len(chunks) <= sum(len(token_windows(len(d.full_text.encode()), 1200, 100)) for d in docs)
