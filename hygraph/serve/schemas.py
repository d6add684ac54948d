"""Request bodies of the HTTP API (CONTRACT.md), validated before any work is done."""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

Mode = Literal["dense", "bm25", "dense+bm25", "hybrid", "ppr", "collapsed", "hypergraph", "hyperbolic", "local",
               "global", "auto"]


class QueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: StrictStr = Field(min_length=1)
    mode: Optional[Mode] = None
    top_k: Optional[StrictInt] = Field(None, ge=1, le=200)
    stream: StrictBool = False


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: Union[StrictStr, list[dict[str, Any]], None] = None

    def text(self) -> str:
        """The message's text; OpenAI content parts of type `text` are joined."""
        if isinstance(self.content, list):
            return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        return self.content or ""


class ChatRequest(BaseModel):
    """OpenAI chat-completions request. Sampling fields are accepted (clients always send some)
    and passed to nothing: the answer comes from the configured `answer` role. `hygraph` selects
    the retrieval mode and depth."""

    model_config = ConfigDict(extra="allow")

    model: StrictStr = "hygraph"
    messages: list[ChatMessage] = Field(min_length=1)
    stream: StrictBool = False
    hygraph: Optional[dict[str, Any]] = None


class DocumentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: Optional[StrictStr] = Field(None, min_length=1, max_length=512)
    title: StrictStr = ""
    text: StrictStr = Field(min_length=1)
    metadata: dict[str, Any] = {}


class DocumentsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    documents: list[DocumentIn] = Field(min_length=1)
