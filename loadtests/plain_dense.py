"""The baseline of `bench_serve.py`: the dense RAG server a team writes in an afternoon, no Ray, no hygraph.

A FastAPI app under uvicorn (one worker process per core, torch at one thread each): the question is
embedded with sentence-transformers (the bundled MiniLM on torch, as such a team would load it) and
searched in the same Milvus chunk collection hygraph's dense mode searches, with pymilvus; the
passages' titles and texts come from a JSON file loaded at start. It answers nothing: a dense
server's answer would be the LLM's, and hygraph's extractive answer costs well under a millisecond.

Configured by environment variables (set by `bench_serve.py`):
PLAIN_MILVUS_URI, PLAIN_MILVUS_TOKEN, PLAIN_COLLECTION, PLAIN_PASSAGES (a JSON file {id: [title, text]}),
PLAIN_MODEL (the model directory).

    uvicorn loadtests.plain_dense:app --workers 2 --host 127.0.0.1 --port 8100
"""

from __future__ import annotations

import json
import os
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator

from fastapi import FastAPI
from pydantic import BaseModel, Field

state: dict[str, Any] = {}


@asynccontextmanager
async def lifespan(_: FastAPI) -> AsyncIterator[None]:
    import torch
    from pymilvus import MilvusClient
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(1)  # one worker per core: more threads per worker only contend
    state["model"] = SentenceTransformer(os.environ["PLAIN_MODEL"], device="cpu")
    client = MilvusClient(uri=os.environ["PLAIN_MILVUS_URI"], token=os.environ.get("PLAIN_MILVUS_TOKEN", ""))
    collection = os.environ["PLAIN_COLLECTION"]
    index = client.describe_index(collection, client.list_indexes(collection)[0])
    state.update(client=client, collection=collection, metric=index["metric_type"])
    with open(os.environ["PLAIN_PASSAGES"]) as fh:
        state["passages"] = json.load(fh)
    yield
    client.close()


app = FastAPI(lifespan=lifespan)


class Query(BaseModel):
    question: str = Field(min_length=1, max_length=2000)
    top_k: int = Field(5, ge=1, le=100)
    mode: str | None = None  # accepted so that hygraph's request bodies can be replayed unchanged


@app.post("/v1/query")
def query(q: Query) -> dict[str, Any]:
    vec = state["model"].encode([q.question], normalize_embeddings=True)[0]
    hits = state["client"].search(state["collection"], data=[vec.tolist()], limit=q.top_k,
                                  output_fields=["item_id"], search_params={"metric_type": state["metric"]})[0]
    passages = []
    for h in hits:
        pid = h["entity"]["item_id"]
        title, text = state["passages"].get(pid, ("", ""))
        passages.append({"id": pid, "title": title, "text": text, "score": float(h["distance"])})
    return {"passages": passages}
