"""Index stages, one module each, with the build step and the update step side by side.

A build is the Ray Data ingest (`ingest`) followed by every stage's build; an update runs the
same stages' updates on the change, in the same order: knowledge, graph, structure (Cleora),
vectors, hierarchy, hyperbolic, lexical (BM25). Each update reads and writes the index through an
`IndexState` (indexing/state.py), so its cost follows the change, not the corpus.
"""
