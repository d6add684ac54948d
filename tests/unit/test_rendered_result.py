"""A served result is rendered to JSON where it is computed (pipeline.Rendered): the bytes the Ingress sends
must say exactly what `QueryResult.to_json` says, with the timings the Ingress adds last."""

import json
import pickle

import numpy as np

from hygraph.config import load_config
from hygraph.core.retrieval.context import Context, ContextItem, Passage
from hygraph.pipeline import QueryRequest, QueryResult


def _result() -> QueryResult:
    req = QueryRequest.make(load_config(None).retrieval, "Who founded Åland's \"first\" bank?", "hybrid")
    items = [ContextItem("e:å", "entity", "Åland \u2014 islands", float(np.float64(0.5)), ("d1",), number=1),
             ContextItem("d1:0", "chunk", "Line one\nline \"two\" \\ three", 0.25, ("d1",), number=2,
                         links=("a", "b"))]
    ctx = Context(entities=items[:1], chunks=items[1:], passages=[Passage("d1", "Åland", np.float64(0.123456789),
                                                                          {"year": 1919, "tags": ["x"]})])
    ctx = ctx.numbered(items)
    ctx.notes["directives"] = ["first", "second"]
    return QueryResult(req, "Åland Bank [2]", [2], ctx, 7, {"embed": 0.0012345, "retrieve": 0.5}, {"prompt_tokens": 9})


def test_the_rendered_json_says_what_to_json_says_with_the_ingress_total():
    result = _result()
    rendered = pickle.loads(pickle.dumps(result.render()))  # as a replica hands it to the Ingress
    rendered.seconds["total"] = 0.75
    sent = json.loads(rendered.json())
    result.seconds["total"] = 0.75
    assert sent == json.loads(json.dumps(result.to_json()))
    assert sent["timings_ms"] == {"embed": 1.23, "retrieve": 500.0, "total": 750.0}
    assert sent["passages"][0]["score"] == 0.123457
    assert (rendered.mode, rendered.answer) == ("hybrid", "Åland Bank [2]")
    assert rendered.retrieved == {"summaries": 0, "chunks": 1, "entities": 1, "relations": 0, "hyperedges": 0}


def test_a_replica_s_later_timing_reaches_the_sent_json():
    rendered = _result().render()
    rendered.seconds["embed"] = 0.002  # the Retriever times its embedding after the result is made
    assert json.loads(rendered.json())["timings_ms"]["embed"] == 2.0
