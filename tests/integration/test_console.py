"""The web console at `/` in a real browser (Debian's Chromium driven by Playwright) against `hygraph serve`
as a user runs it, with an API key configured: ask a question and see the answer, its passages and the
graph; upload a .txt file and follow its job to done; find the document in the list, open it, delete it.

Screenshots go to $HYGRAPH_SCREENSHOTS (default: the test's tmp dir)."""

from __future__ import annotations

import http.client
import os
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.integration.conftest import WRITER_KEY

pytestmark = pytest.mark.integration
KEY = WRITER_KEY
CHROMIUM = Path("/usr/bin/chromium")
QUESTION = "Which magazine was started first, Arthur's Magazine or First for Women?"
UPLOAD_TEXT = ("The Quillimant Observatory stands on Mount Varrel. It was founded in 1911 by the astronomer "
               "Edda Quillimant, who catalogued the variable stars of the southern sky from its dome.\n")


@pytest.fixture(scope="module")
def console_server(writable_server_handle):
    """The session's writable server (a copy of its index, shared with the hostile-input module): this module
    writes and deletes documents, and the other modules expect the index as built."""
    return writable_server_handle.get()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        pytest.skip(f"Chromium is not installed ({CHROMIUM}); `make test` installs it "
                    "(apt-get install -y --no-install-recommends chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM))
        yield browser
        browser.close()


@pytest.fixture()
def shots(tmp_path) -> Path:
    out = Path(os.environ.get("HYGRAPH_SCREENSHOTS") or tmp_path / "screenshots")
    out.mkdir(parents=True, exist_ok=True)
    return out


def test_console_asks_uploads_lists_opens_and_deletes(console_server, browser, shots, tmp_path):
    from playwright.sync_api import expect

    url = console_server["url"]
    before = httpx.get(f"{url}/v1/stats", timeout=30).json()
    count = before["documents"]
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.set_default_timeout(30_000)
    page.goto(url + "/")
    expect(page).to_have_title("hygraph console")

    page.get_by_label("API key").fill(KEY)
    page.get_by_role("button", name="Use key").click()
    expect(page.locator("#key-state")).to_have_text("key set for this tab")
    expect(page.locator('[data-stat="documents"]')).to_have_text(str(count))

    # Ask: the answer, its passages, the context and the graph with a node's description.
    page.get_by_label("Question").fill(QUESTION)
    page.get_by_label("Mode").select_option("hybrid")
    page.get_by_role("button", name="Ask", exact=True).click()
    expect(page.locator("#ask-status")).to_contain_text("Answered from", timeout=60_000)
    expect(page.locator("#answer")).not_to_be_empty()
    expect(page.get_by_role("list", name="Passages").get_by_role("listitem")).to_have_count(5)
    expect(page.get_by_role("list", name="Relations").first).to_be_visible()
    nodes = page.locator("#graph .node.entity")
    assert nodes.count() >= 2
    assert page.locator("#graph line.relation").count() >= 1
    nodes.first.locator("circle").click()
    expect(page.locator("#node-detail h4")).not_to_be_empty()
    expect(page.locator("#node-detail")).not_to_contain_text("null")
    page.screenshot(path=str(shots / "console-question-graph.png"), full_page=True)

    # Unstreamed, in hypergraph mode: hyperedge facts joined to their member entities.
    page.get_by_label("Mode").select_option("hypergraph")
    page.get_by_label("Stream the answer").uncheck()
    page.get_by_role("button", name="Ask", exact=True).click()
    expect(page.locator("#answer-meta")).to_contain_text("mode hypergraph", timeout=60_000)
    expect(page.locator("#graph .node.hyperedge").first).to_be_visible()
    assert page.locator("#graph line.member").count() >= 1
    page.locator("#graph-figure").screenshot(path=str(shots / "console-hypergraph.png"))

    # Upload a .txt file and follow its job until the version holding it is served.
    upload = tmp_path / "quillimant-notes.txt"
    upload.write_text(UPLOAD_TEXT)
    page.get_by_label("Files (.txt, .md, .jsonl)").set_input_files(str(upload))
    page.get_by_role("button", name="Upload").click()
    expect(page.locator("#add-status")).to_contain_text("Accepted 1 document(s): ")
    doc_id = page.locator("#add-status").inner_text().rsplit(": ", 1)[1]
    page.locator("#add").screenshot(path=str(shots / "console-upload-progress.png"))
    job = page.locator(".job").first
    expect(job).to_have_attribute("data-status", "done", timeout=120_000)
    expect(job.locator(".job-state")).to_contain_text("done (index version ")
    page.locator("#add").screenshot(path=str(shots / "console-upload-job.png"))

    # The list holds it (ids sort before the corpus's `hotpotqa_...`: the first page); open it.
    row = page.locator(f'tr[data-doc-id="{doc_id}"]')
    expect(row).to_contain_text("quillimant-notes")
    expect(page.locator('[data-stat="documents"]')).to_have_text(str(count + 1))
    page.locator("#documents").screenshot(path=str(shots / "console-documents.png"))
    page.get_by_role("button", name=f"Open {doc_id}").click()
    expect(page.locator("#doc-view-text")).to_have_text(UPLOAD_TEXT)

    # Delete it, confirming the dialog; its job is followed and the row goes.
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name=f"Delete {doc_id}").click()
    expect(page.locator(".job").first).to_have_attribute("data-status", "done", timeout=120_000)
    expect(row).to_have_count(0)
    expect(page.locator('[data-stat="documents"]')).to_have_text(str(count))
    assert httpx.get(f"{url}/v1/documents/{doc_id}", timeout=30).status_code == 404
    assert errors == []
    page.close()


def _raw_get(url: str, path: str) -> tuple[int, dict[str, str], bytes]:
    """GET `path` exactly as written (no client-side normalization of `..` or percent-escapes)."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("path", [
    "/console/../../etc/passwd", "/console/..%2f..%2fetc%2fpasswd", "/console/%2e%2e/%2e%2e/etc/passwd",
    "/console/%2e%2e%2fhttp.py", "/console//etc/passwd", "/console/app.js%00", "/console/index.html",
    "/console/", "/console/..", "/console/%2fetc%2fpasswd", "/console/..\\..\\etc\\passwd", "/console/APP.JS",
])
def test_hostile_console_paths_are_404_through_the_proxy(console_server, path):
    status, headers, body = _raw_get(console_server["url"], path)
    assert status == 404, (path, body[:200])
    assert b"root:" not in body and headers["content-type"].startswith("application/json")


def test_the_page_and_its_files_need_no_key_and_carry_the_csp(console_server):
    for path, kind in (("/", "text/html"), ("/console/app.js", "text/javascript"),
                       ("/console/console.css", "text/css")):
        status, headers, body = _raw_get(console_server["url"], path)
        assert status == 200 and headers["content-type"].startswith(kind), (path, status)
        assert "script-src 'self'" in headers["content-security-policy"]
        assert headers["x-content-type-options"] == "nosniff"
    assert _raw_get(console_server["url"], "/v1/jobs/x")[0] == 401  # the API itself still wants the key
