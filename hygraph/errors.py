"""One error type per layer. The CLI maps these to exit status 2, the HTTP layer to 4xx/503."""

from __future__ import annotations


class HygraphError(Exception):
    """Base of every error hygraph raises on purpose."""


class InputError(HygraphError):
    """Bad user input (file, line, field named in the message): exit 2 / HTTP 4xx."""


class VersionNotReady(InputError):
    """A request asked for an index version newer than the one published (HTTP 422: versions come from
    job status, which reads the same `CURRENT` the Retrievers load)."""


class ConfigError(InputError):
    """Invalid configuration (unknown key, wrong type)."""


class StoreError(HygraphError):
    """The index directory or the vector store is missing, unreachable or inconsistent."""


class IndexNotReady(StoreError):
    """The index directory holds no version yet (a first build has not landed): HTTP 503."""


class StoreUnavailable(StoreError):
    """A store (the vector store, or the object store of an index) cannot be reached right now (retryable:
    HTTP 503 with Retry-After)."""


class BackendError(HygraphError):
    """An outside model backend (embedder, LLM) failed after its retries."""
