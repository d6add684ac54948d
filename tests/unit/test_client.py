"""The Python client's job polling (hygraph/client.py) against canned HTTP answers (httpx's MockTransport)."""

from __future__ import annotations

import httpx
import pytest

from hygraph.client import ApiError, Client


def _client(answers: list[httpx.Response]) -> tuple[Client, list[str]]:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        return answers.pop(0)

    client = Client("http://127.0.0.1:9")
    client._http = httpx.Client(base_url="http://127.0.0.1:9", transport=httpx.MockTransport(handler))
    return client, asked


def _unavailable(retry_after: str) -> httpx.Response:
    body = {"error": {"code": "store_unavailable", "message": "the bucket is away"}}
    return httpx.Response(503, json=body, headers={"Retry-After": retry_after})


def test_wait_rides_out_503_answers_and_records_the_version():
    client, asked = _client([_unavailable("0"), _unavailable("0.01"), httpx.Response(200, json={"status": "queued"}),
                             httpx.Response(200, json={"status": "done", "index_version": 7})])
    assert client.wait("j1", timeout_s=5, poll_s=0.01)["index_version"] == 7
    assert asked == ["/v1/jobs/j1"] * 4 and client.seen_version == 7


def test_wait_gives_up_on_503_after_its_timeout_and_never_retries_other_errors():
    client, _ = _client([_unavailable("0.01")] * 1000)
    with pytest.raises(ApiError) as err:
        client.wait("j1", timeout_s=0.05, poll_s=0.01)
    assert err.value.status == 503
    client, asked = _client([httpx.Response(404, json={"error": {"code": "not_found", "message": "no job"}})])
    with pytest.raises(ApiError) as err:
        client.wait("j1", timeout_s=5)
    assert err.value.status == 404 and len(asked) == 1
    client, _ = _client([httpx.Response(200, json={"status": "failed", "error": "bad document"})])
    with pytest.raises(ApiError) as err:
        client.wait("j1", timeout_s=5)
    assert err.value.code == "job_failed" and "bad document" in err.value.message
