"""hygraph: a Graph-RAG serving system on Ray."""

__version__ = "0.1.0"
