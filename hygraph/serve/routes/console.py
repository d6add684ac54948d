"""The web console: `GET /` serves its page and `GET /console/{name}` its scripts and stylesheet, the files
packaged in `serve/static/` (no CDN, no build step: it works offline).

The page and its files are public: they hold no data, and every API call the page makes carries the key
the user typed (`Authorization: Bearer`). Only the files listed at start are served, by exact name, so
no path a client sends (`..`, encoded separators, absolute paths) can reach anything else. A strict
Content-Security-Policy allows scripts, styles and requests from this origin only and no inline code.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from hygraph.serve.http import ApiError

STATIC_DIR = Path(__file__).resolve().parents[1] / "static"
CONTENT_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                 ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'none'; base-uri 'none'; frame-ancestors 'none'")
SECURITY_HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY", "Cache-Control": "no-cache"}
PAGE = "index.html"
# name -> file: the regular files directly in STATIC_DIR with a known type; nothing else is reachable.
FILES = {p.name: p for p in sorted(STATIC_DIR.iterdir()) if p.is_file() and p.suffix in CONTENT_TYPES}

router = APIRouter(tags=["console"], include_in_schema=False)


def _file(name: str) -> Response:
    path = FILES[name]
    return Response(path.read_bytes(), media_type=CONTENT_TYPES[path.suffix], headers=SECURITY_HEADERS)


@router.get("/")
async def page() -> Any:
    return _file(PAGE)


@router.get("/console/{name}")
async def asset(name: str) -> Any:
    if name not in FILES or name == PAGE:  # the page itself is served at `/` only
        raise ApiError(404, "not_found", "no such console file")
    return _file(name)
