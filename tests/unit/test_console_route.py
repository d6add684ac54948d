"""The console's static route: the packaged page at `/`, its files by exact name under `/console/`, a
strict CSP, no key needed, and nothing outside the static directory reachable by any path a client sends
(requests are built as raw ASGI scopes, so no client normalizes `..` or percent-escapes first)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from urllib.parse import unquote

import pytest

from hygraph.config import HygraphConfig
from hygraph.serve.http import HttpLimits
from hygraph.serve.ingress import build_api
from hygraph.serve.routes import console


@pytest.fixture(scope="module")
def api():
    # Keys are configured and required for reads: the console's files must still be served without one.
    cfg = HygraphConfig.model_validate({"serve": {"require_key_for_reads": True}})
    gateway = SimpleNamespace(cfg=cfg, keys=frozenset({"k-1"}))
    return build_api(gateway, HttpLimits(max_body_bytes=8192, body_timeout_s=1.0, max_header_bytes=8192,
                                          on_request=lambda endpoint: None, on_error=lambda endpoint, err: None))


def get(api, raw_path: str) -> tuple[int, dict[str, str], bytes]:
    """GET with this exact raw path; `path` decoded the way ASGI servers decode it."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
             "path": unquote(raw_path), "raw_path": raw_path.encode(), "root_path": "", "query_string": b"",
             "headers": [(b"host", b"testserver")], "client": ("127.0.0.1", 1), "server": ("testserver", 80)}
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(api(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


def test_the_page_and_its_files_are_served_with_their_types_and_the_csp(api):
    status, headers, body = get(api, "/")
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    assert body == (console.STATIC_DIR / "index.html").read_bytes()
    for name, kind in (("app.js", "text/javascript"), ("api.js", "text/javascript"), ("graph.js", "text/javascript"),
                       ("console.css", "text/css"), ("icon.svg", "image/svg+xml")):
        status, headers, body = get(api, f"/console/{name}")
        assert status == 200 and headers["content-type"].startswith(kind), name
        assert body == (console.STATIC_DIR / name).read_bytes()
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert headers["x-content-type-options"] == "nosniff"


def test_the_page_loads_no_inline_script_or_style_and_nothing_from_elsewhere():
    page = (console.STATIC_DIR / "index.html").read_text()
    assert "<script>" not in page and "style=" not in page and "<style" not in page
    assert "http://" not in page and "https://" not in page
    for name in console.FILES:
        assert "https://" not in (console.STATIC_DIR / name).read_text()


@pytest.mark.parametrize("raw_path", [
    "/console/../../etc/passwd", "/console/..%2F..%2Fetc%2Fpasswd", "/console/%2e%2e/%2e%2e/etc/passwd",
    "/console/%2e%2e%2fhttp.py", "/console/..%2fhttp.py", "/console/..%5chttp.py", "/console//etc/passwd",
    "/console/%2Fetc%2Fpasswd", "/console/app.js%00", "/console/app.js%2500", "/console/./app.js/",
    "/console/APP.JS", "/console/index.html", "/console/", "/console/..", "/console/.", "/console/__init__.py",
    "/console/%252e%252e%252fhttp.py", "/console/app.js/..%2f..%2fhttp.py", "/etc/passwd", "/console",
])
def test_no_path_reaches_outside_the_listed_files(api, raw_path):
    status, headers, body = get(api, raw_path)
    assert status == 404, raw_path
    assert headers["content-type"] == "application/json"


def test_only_regular_files_of_known_types_are_listed():
    assert set(console.FILES) == {"index.html", "app.js", "api.js", "graph.js", "console.css", "icon.svg"}
    assert all(p.parent == console.STATIC_DIR and p.is_file() for p in console.FILES.values())
