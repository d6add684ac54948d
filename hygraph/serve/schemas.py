"""Request bodies of the HTTP API (CONTRACT.md), validated under hygraph's input rules before any work.

Every string field goes through `hygraph.input_rules`, the same checks the CLI loaders and the
journal apply, so the HTTP layer never accepts what the index would later refuse.
"""

from __future__ import annotations

from typing import Annotated, Any, Callable, Literal, Optional, Union

from pydantic import (AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr,
                      WithJsonSchema, create_model)

from hygraph.config import Mode
from hygraph.errors import InputError
from hygraph.input_rules import (MAX_FILTER_KEYS, MAX_FILTER_VALUES, MAX_ID_CHARS, check_id, check_json, check_metadata,
                                 check_nonblank_text, check_text)


def _rule(check: Callable[[Any, str], Any]) -> AfterValidator:
    """A pydantic validator from an input rule; the rule's message (field already in the loc) is kept."""
    def validate(value: Any) -> Any:
        try:
            return check(value, "value")
        except InputError as exc:
            raise ValueError(str(exc).removeprefix("value: ")) from None
    return AfterValidator(validate)


id_rule = _rule(check_id)
Text = Annotated[StrictStr, _rule(check_text)]
DocId = Annotated[StrictStr, Field(min_length=1, max_length=MAX_ID_CHARS), id_rule]
Metadata = Annotated[dict[str, Any], _rule(check_metadata)]


NonBlankText = Annotated[StrictStr, Field(min_length=1), _rule(check_nonblank_text)]
_SCALAR = [{"type": "string"}, {"type": "number"}, {"type": "boolean"}, {"type": "null"}]
# Checked by input_rules.check_filter where the request is made (its messages name `filter.<key>`); the schema
# tells clients and the fuzzer the shape.
Filter = Annotated[dict[str, Any], WithJsonSchema({
    "type": "object", "maxProperties": MAX_FILTER_KEYS,
    "description": "Metadata filter: a top-level metadata key -> a string, number, boolean or null (equal to it) or "
                   "a list of them (equal to any); every key must match.",
    "additionalProperties": {"anyOf": [*_SCALAR, {"type": "array", "maxItems": MAX_FILTER_VALUES,
                                                   "items": {"anyOf": _SCALAR}}]}})]


class QueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: NonBlankText
    mode: Optional[Mode] = None
    top_k: Optional[StrictInt] = Field(None, ge=1, le=200)
    stream: StrictBool = False
    # Read-your-writes: answer from this index version or a newer one (a done job's `index_version`).
    min_index_version: Optional[StrictInt] = Field(None, ge=0)
    # Passages only from documents whose metadata matches (input_rules.check_filter, core/retrieval/filter.py).
    filter: Optional[Filter] = None


class ContentPart(BaseModel):
    """An OpenAI content part; only `text` parts carry the question."""

    model_config = ConfigDict(extra="allow")

    type: StrictStr
    text: Optional[Text] = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: Union[Text, list[ContentPart], None] = None

    def text(self) -> str:
        """The message's text; OpenAI content parts of type `text` are joined."""
        if isinstance(self.content, list):
            return "".join(p.text or "" for p in self.content if p.type == "text")
        return self.content or ""


class HygraphOptions(BaseModel):
    """The `hygraph` extension of a chat request: retrieval mode, depth, version floor and metadata filter."""

    model_config = ConfigDict(extra="forbid")

    mode: Optional[Mode] = None
    top_k: Optional[StrictInt] = Field(None, ge=1, le=200)
    min_index_version: Optional[StrictInt] = Field(None, ge=0)
    filter: Optional[Filter] = None


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # OpenAI's: one more chunk before `[DONE]`, `choices: []` and the request's `usage`.
    include_usage: StrictBool = False
    include_obfuscation: StrictBool = False  # accepted; no obfuscation padding is sent


def _sampling(low: float, high: float) -> Any:
    """An optional OpenAI sampling number within its documented range (finite)."""
    return Field(None, ge=low, le=high, allow_inf_nan=False)


# OpenAI's chat-completions request fields other than model, messages and stream: clients send them, and they
# are accepted under the input rules and passed to nothing (the answer comes from the configured `answer`
# role); those with a documented range are checked against it in ChatRequest. Any other field is refused by
# name: nothing a client sends is silently ignored.
OPENAI_FIELDS = ("audio", "frequency_penalty", "function_call", "functions", "logit_bias", "logprobs",
                 "max_completion_tokens", "max_tokens", "metadata", "modalities", "n", "parallel_tool_calls",
                 "prediction", "presence_penalty", "prompt_cache_key", "reasoning_effort", "response_format",
                 "safety_identifier", "seed", "service_tier", "stop", "store", "stream_options", "temperature",
                 "tool_choice", "tools", "top_logprobs", "top_p", "user", "verbosity", "web_search_options")
OpenAIValue = Annotated[Any, _rule(check_json)]
_OpenAIFields: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "OpenAIFields", __config__=ConfigDict(extra="forbid"), **{name: (OpenAIValue, None) for name in OPENAI_FIELDS})


class ChatRequest(_OpenAIFields):  # type: ignore[misc, valid-type]
    """OpenAI chat-completions request. Sampling fields are checked against OpenAI's ranges (clients always
    send some) and passed to nothing. One choice is made (`n` above 1 is refused). `hygraph` selects the
    retrieval mode, depth, version floor and metadata filter; the same options are honoured at the top level too
    (`"mode": "ppr"` beside `messages`), and giving one in both places with different values is a 422."""

    model: StrictStr = Field("hygraph", max_length=MAX_ID_CHARS)
    messages: list[ChatMessage] = Field(min_length=1, max_length=256)
    stream: StrictBool = False
    stream_options: Optional[StreamOptions] = None
    n: Optional[StrictInt] = Field(None, ge=1, le=1, description="only 1: one answer is made per request")
    temperature: Optional[StrictFloat] = _sampling(0, 2)
    top_p: Optional[StrictFloat] = _sampling(0, 1)
    presence_penalty: Optional[StrictFloat] = _sampling(-2, 2)
    frequency_penalty: Optional[StrictFloat] = _sampling(-2, 2)
    max_tokens: Optional[StrictInt] = Field(None, ge=1)
    max_completion_tokens: Optional[StrictInt] = Field(None, ge=1)
    hygraph: Optional[HygraphOptions] = None
    mode: Optional[Mode] = None
    top_k: Optional[StrictInt] = Field(None, ge=1, le=200)
    min_index_version: Optional[StrictInt] = Field(None, ge=0)
    filter: Optional[Filter] = None

    def options(self) -> HygraphOptions:
        """The retrieval options from `hygraph` and the top level (InputError naming a conflict)."""
        nested = self.hygraph or HygraphOptions()
        merged = {}
        for name in HygraphOptions.model_fields:
            top, inner = getattr(self, name), getattr(nested, name)
            if top is not None and inner is not None and top != inner:
                raise InputError(f"{name}: given as {top!r} at the top level and {inner!r} in 'hygraph'; give one")
            merged[name] = top if top is not None else inner
        return HygraphOptions(**merged)


class DocumentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: Optional[DocId] = None
    title: Text = ""
    text: NonBlankText
    metadata: Metadata = {}


class DocumentsRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    documents: list[DocumentIn] = Field(min_length=1)
