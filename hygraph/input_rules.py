"""The rules every user string meets before it is journaled, indexed or answered.

One definition, used by the HTTP schemas, the CLI loaders, the journal and the client, so a
value one of them accepts is accepted by all and never fails later inside the index or the
vector store. Violations are InputErrors whose message names the field and never echoes
more than a few characters of the input.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from typing import Any

from hygraph.errors import InputError

# A document id with room for chunk suffixes (`{doc_id}:{ordinal}`) under every store's key limit.
MAX_ID_CHARS = 256
# Structured values (document metadata, chat content parts): nesting and serialized size.
MAX_DEPTH = 16
MAX_METADATA_BYTES = 16_384

# Unicode categories Cc (controls) and Cs (surrogates, which UTF-8 cannot encode); text keeps tab,
# newline and carriage return. Ids also refuse those three and the line and paragraph separators,
# which break line-oriented logs and files as a newline would.
_TEXT_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_ID_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
# Unicode category Cf (format: zero-width spaces and joiners, bidi overrides, the BOM, soft hyphens):
# invisible, so two ids that look the same would differ, and a right-to-left override makes
# `invoice-\u202egnp.exe` read as `invoice-exe.png`. Ids refuse them; texts keep them (emoji
# sequences, Arabic and Hebrew need joiners and direction marks).
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp", "Zs"})


def preview(value: str, limit: int = 40) -> str:
    """A bounded, printable rendering of user input for messages and logs."""
    text = value if len(value) <= limit else value[:limit] + "…"
    return ascii(text)[1:-1] if not text.isprintable() else text


def _bad_char(value: str, forbidden: re.Pattern[str]) -> int:
    found = forbidden.search(value)
    return found.start() if found else -1


def _format_char(value: str) -> int:
    return next((i for i, c in enumerate(value) if unicodedata.category(c) == "Cf"), -1)


def check_id(value: Any, field: str) -> str:
    """A document id: 1-256 characters, no control characters, surrogates, line separators or format
    characters (Cf), no leading or trailing whitespace, and not `.` or `..` (which URL paths cannot carry)."""
    if not isinstance(value, str):
        raise InputError(f"{field}: must be a string")
    if not value:
        raise InputError(f"{field}: must not be empty")
    if len(value) > MAX_ID_CHARS:
        raise InputError(f"{field}: {len(value)} characters exceeds the limit of {MAX_ID_CHARS}")
    at = _bad_char(value, _ID_FORBIDDEN)
    if at >= 0:
        raise InputError(f"{field}: character U+{ord(value[at]):04X} at position {at} is not allowed in an id")
    at = _format_char(value)
    if at >= 0:
        raise InputError(f"{field}: invisible format character U+{ord(value[at]):04X} at position {at} "
                         "is not allowed in an id")
    if value != value.strip():
        raise InputError(f"{field}: must not start or end with whitespace")
    if value in (".", ".."):
        raise InputError(f"{field}: '{value}' is not a valid id")
    return value


def check_text(value: Any, field: str, max_chars: int | None = None) -> str:
    """Free text (a document, a title, a question): no NUL or other control characters except tab and
    newlines, no lone surrogates (which cannot be encoded as UTF-8), at most `max_chars` characters."""
    if not isinstance(value, str):
        raise InputError(f"{field}: must be a string")
    if max_chars is not None and len(value) > max_chars:
        raise InputError(f"{field}: {len(value)} characters exceeds the limit of {max_chars}")
    at = _bad_char(value, _TEXT_FORBIDDEN)
    if at >= 0:
        kind = "a lone surrogate" if 0xD800 <= ord(value[at]) <= 0xDFFF else "a control character"
        raise InputError(f"{field}: {kind} (U+{ord(value[at]):04X}) at position {at} is not allowed")
    return value


def check_nonblank_text(value: Any, field: str, max_chars: int | None = None) -> str:
    """`check_text` holding at least one visible character: whitespace, controls and format characters
    alone (a question of zero-width spaces) are empty."""
    text = check_text(value, field, max_chars)
    if not text.strip():
        raise InputError(f"{field}: must not be empty")
    if all(unicodedata.category(c) in _INVISIBLE for c in text):
        raise InputError(f"{field}: must hold a visible character")
    return text


def depth(value: Any) -> int:
    """Nesting depth of a JSON value (a scalar is 0), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, level + 1)
        stack.extend((child, level + 1) for child in children)
    return deepest


def check_json(value: Any, field: str, max_depth: int = MAX_DEPTH) -> Any:
    """A JSON value whose strings (keys included) follow `check_text`, whose numbers are finite (NaN and
    Infinity are not JSON, whatever Python's parser accepts) and whose nesting is bounded."""
    if depth(value) > max_depth:
        raise InputError(f"{field}: nested deeper than {max_depth} levels")
    stack = [(value, field)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            check_text(node, where)
        elif isinstance(node, float) and not math.isfinite(node):
            raise InputError(f"{where}: {node} is not a JSON number")
        elif isinstance(node, dict):
            for key, child in node.items():
                check_text(key, f"{where} (a key)")
                stack.append((child, f"{where}.{preview(str(key), 20)}"))
        elif isinstance(node, list):
            stack.extend((child, f"{where}.{i}") for i, child in enumerate(node))
    return value


def check_metadata(value: Any, field: str) -> dict[str, Any]:
    """Document metadata: a JSON object under MAX_DEPTH levels and MAX_METADATA_BYTES serialized."""
    if not isinstance(value, dict):
        raise InputError(f"{field}: must be an object")
    check_json(value, field)
    size = len(json.dumps(value, ensure_ascii=False).encode())
    if size > MAX_METADATA_BYTES:
        raise InputError(f"{field}: {size} bytes exceeds the limit of {MAX_METADATA_BYTES}")
    return value


# A query's metadata filter (core/retrieval/filtering.py): how many keys it names and values one key lists.
MAX_FILTER_KEYS = 32
MAX_FILTER_VALUES = 256


def _check_scalar(value: Any, field: str) -> None:
    if isinstance(value, str):
        check_text(value, field)
    elif isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{field}: {value} is not a JSON number")
    elif value is not None and not isinstance(value, (bool, int, float)):
        kind = "an object" if isinstance(value, dict) else "a list inside a list" if isinstance(value, list) else \
            type(value).__name__
        raise InputError(f"{field}: {kind} is not a filter value (a string, number, boolean or null, or a list "
                         "of them)")


def check_filter(value: Any, field: str = "filter") -> dict[str, Any]:
    """A metadata filter: an object of at most MAX_FILTER_KEYS top-level metadata keys, each mapped to a scalar
    (string, number, boolean, null: equality) or a list of at most MAX_FILTER_VALUES scalars (any of them).
    Data, never code: values are compared, nothing is parsed or evaluated."""
    if not isinstance(value, dict):
        raise InputError(f"{field}: must be an object")
    if len(value) > MAX_FILTER_KEYS:
        raise InputError(f"{field}: {len(value)} keys exceeds the limit of {MAX_FILTER_KEYS}")
    for key, wanted in value.items():
        check_text(key, f"{field} (a key)")
        where = f"{field}.{preview(str(key), 40)}"
        if isinstance(wanted, list):
            if len(wanted) > MAX_FILTER_VALUES:
                raise InputError(f"{where}: {len(wanted)} values exceeds the limit of {MAX_FILTER_VALUES}")
            for i, item in enumerate(wanted):
                _check_scalar(item, f"{where}.{i}")
        else:
            _check_scalar(wanted, where)
    return value
