"""The LLM roles behind one Protocol (base.py) and the one factory that picks a backend from config."""

from __future__ import annotations

from hygraph.backends.llm.base import LLM
from hygraph.config import LLMConfig
from hygraph.errors import ConfigError


def make_llm(cfg: LLMConfig, cache_dir: str | None = None) -> LLM:
    """The backend `cfg.backend` names. Replies are cached under `cfg.cache_dir` when set, else
    under `cache_dir` (the caller's default, <index_dir>/llm_cache).

    `vllm` is served by the serving layer through ray.serve.llm behind an OpenAI-compatible
    endpoint, so here it is that endpoint's client and needs `llm.base_url`.
    """
    if cfg.backend == "extractive":
        from hygraph.backends.llm.extractive import ExtractiveLLM

        return ExtractiveLLM(summary_max_tokens=cfg.summary_max_tokens, answer_max_tokens=cfg.answer_max_tokens)
    if cfg.backend == "vllm" and not cfg.base_url:
        raise ConfigError("llm.base_url: required for the vllm backend (the endpoint ray.serve.llm exposes)")
    from hygraph.backends.llm.openai_compat import OpenAICompatLLM

    return OpenAICompatLLM(cfg, cache_dir=cfg.cache_dir or cache_dir)
