"""The retrieval modes by name: what each one runs, what it needs of an index version, what it asks of a request.

One table instead of an if-chain: the engine runs `retrieve(name, ...)`, the API, the CLI and the config list
`MODE_NAMES`, and the pipeline asks `MODES[name].question_vector` before embedding a question. A mode's
function takes a `Request` (the question, its vector, the view and the request's searches and model calls)
so every mode is called the same way and testable on a hand-made view.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Container, Mapping

import numpy as np

from hygraph.core.retrieval.collapsed import collapsed
from hygraph.core.retrieval.context import Context, Search
from hygraph.core.retrieval.dense import dense
from hygraph.core.retrieval.hybrid import hybrid
from hygraph.core.retrieval.hyperbolic import hyperbolic
from hygraph.core.retrieval.hypergraph import hypergraph
from hygraph.core.retrieval.lexical import bm25, dense_bm25
from hygraph.core.retrieval.local_global import global_, local
from hygraph.core.retrieval.ppr import ppr
from hygraph.core.retrieval.routing import routed_mode
from hygraph.core.retrieval.view import Decompose, Embed, IndexView, Points, QuestionEntities


@dataclass(frozen=True)
class Request:
    """What a mode may use to answer one question."""

    question: str
    query_vec: np.ndarray | None  # None only for a mode without `question_vector`
    k: int
    view: IndexView
    search: Search
    embed: Embed  # texts -> vectors, for modes that embed more than the question
    question_entities: QuestionEntities  # the `extract` role on the question
    decompose: Decompose  # the `decompose` role
    route: Callable[[str], str]  # the `route` role: the question's type
    points: Points  # live Poincaré points of chunks (hyperbolic)
    settings: Mapping[str, Any]  # the retrieval settings (config `retrieval`), by name


@dataclass(frozen=True)
class Mode:
    name: str
    run: Callable[[Request], Context] | None  # None: a router, which picks another mode per question
    collection: str | None = None  # the vector collection it needs besides the chunks' (a graph index has it)
    lexical: bool = False  # ranks with the BM25 channel, which an index version may have been built without
    question_vector: bool = True  # searches by the question's vector


class ModeUnavailable(ValueError):
    """The index version lacks what the mode needs; the message says what and how to get it."""


def _collapsed(r: Request) -> Context:
    s = r.settings
    return collapsed(r.query_vec, r.k, r.view, r.search, bias=s["collapsed_bias"], p=s["collapsed_p"],
                     max_tokens=s["max_context_tokens"])


def _hypergraph(r: Request) -> Context:
    s = r.settings
    return hypergraph(r.question, r.query_vec, r.k, r.view, r.search, r.embed, r.question_entities,
                      k_v=s["k_v"], tau_v=s["tau_v"], k_h=s["k_h"], tau_h=s["tau_h"])


_TABLE = (
    Mode("dense", lambda r: dense(r.query_vec, r.k, r.search, r.view.chunk_text, r.view.chunk_doc, r.view.titles)),
    Mode("bm25", lambda r: bm25(r.question, r.k, r.view), lexical=True, question_vector=False),
    Mode("dense+bm25", lambda r: dense_bm25(r.question, r.query_vec, r.k, r.view, r.search), lexical=True),
    Mode("hybrid", lambda r: hybrid(r.question, r.query_vec, r.k, r.view, r.search, r.question_entities),
         collection="relations", lexical=True),
    Mode("ppr", lambda r: ppr(r.question, r.query_vec, r.k, r.view, r.search, r.question_entities),
         collection="relations", lexical=True),
    Mode("collapsed", _collapsed, collection="summaries"),
    Mode("hypergraph", _hypergraph, collection="hyperedges"),
    Mode("hyperbolic", lambda r: hyperbolic(r.question, r.query_vec, r.k, r.view, r.search, r.embed, r.decompose,
                                            r.points, r.question_entities),
         collection="hyperbolic", lexical=True),
    Mode("local", lambda r: local(r.question, r.query_vec, r.k, r.view, r.search, r.question_entities),
         collection="entities"),
    Mode("global", lambda r: global_(r.query_vec, r.k, r.view, r.search), collection="summaries"),
    Mode("auto", None),  # the `route` role types the question; routing.py says which mode answers each type
)
MODES: dict[str, Mode] = {m.name: m for m in _TABLE}
MODE_NAMES: tuple[str, ...] = tuple(MODES)  # `dense` first: the baseline every evaluation compares against


def unavailable(mode: Mode, view: IndexView, collections: Container[str]) -> str | None:
    """Why this index version (its view and vector collections) cannot answer `mode`; None when it can."""
    if mode.lexical and view.chunk_lexical is None:
        return (f"'{mode.name}' needs the lexical (BM25) index, and index version {view.version} was built "
                f"without it (rebuild with `hygraph index`)")
    if mode.collection is not None and mode.collection not in collections:
        return (f"'{mode.name}' needs the {mode.collection} of a graph index; index version {view.version} was "
                f"built without them (rebuild without --dense-only)")
    return None


def retrieve(name: str, r: Request, collections: Container[str]) -> Context:
    """Mode `name`'s context and passages for `r`; ModeUnavailable when the version lacks what it needs.
    A router (`auto`) runs the mode it picks and notes the question type and that mode in the context."""
    mode = MODES[name]
    if mode.run is None:
        question_type = r.route(r.question)
        chosen = routed_mode(question_type)
        ctx = retrieve(chosen, r, collections)
        ctx.notes.update(route=question_type, routed_mode=chosen)
        return ctx
    problem = unavailable(mode, r.view, collections)
    if problem is not None:
        raise ModeUnavailable(problem)
    return mode.run(r)
