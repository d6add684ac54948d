"""OpenAI's chat-completions shapes, made from a CONTRACT query result: the whole completion, the streamed
chunks, and the `hygraph` field that says what the answer was retrieved from."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


def extension(out: dict[str, Any]) -> dict[str, Any]:
    """The `hygraph` field of a chat completion: what the answer was retrieved from."""
    return {"mode": out["mode"], "passages": out["passages"], "index_version": out["index_version"],
            "citations": out["context"]["citations"], "timings_ms": out["timings_ms"]}


def usage(out: dict[str, Any]) -> dict[str, int]:
    prompt, completion = out["usage"]["prompt_tokens"], out["usage"]["completion_tokens"]
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


@dataclass(frozen=True)
class Completion:
    """One chat completion's identity, shared by its whole body or by each of its streamed chunks."""

    id: str
    created: int
    model: str
    # As OpenAI sends it: with `stream_options.include_usage` every chunk has `usage: null` and one last
    # chunk, `choices: []`, carries the usage.
    include_usage: bool = False

    def whole(self, out: dict[str, Any]) -> dict[str, Any]:
        return {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": out["answer"]}}],
                "usage": usage(out), "hygraph": extension(out)}

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        obj = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
               "choices": choices, **({"usage": None} if self.include_usage else {}), **extra}
        return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()

    def first(self) -> bytes:
        return self.chunk(_choice({"role": "assistant", "content": ""}))

    def piece(self, text: str) -> bytes:
        return self.chunk(_choice({"content": text}))

    def last(self, out: dict[str, Any]) -> list[bytes]:
        """The closing chunk with the `hygraph` field, then the usage chunk when asked for."""
        done = [self.chunk(_choice({}, "stop"), hygraph=extension(out))]
        return done + ([self.chunk([], usage=usage(out))] if self.include_usage else [])


def _choice(delta: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
    return [{"index": 0, "delta": delta, "finish_reason": finish}]


DONE = b"data: [DONE]\n\n"


def stream_error(body: dict[str, Any]) -> bytes:
    """A failure after the 200 was sent: the error object as a data line, then the end of the stream."""
    return f"data: {json.dumps(body)}\n\n".encode() + DONE
