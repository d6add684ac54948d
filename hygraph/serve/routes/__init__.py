"""The HTTP routes, one router per endpoint group, and the dependencies they share."""

from __future__ import annotations

from fastapi import Header, Request

from hygraph.serve.gateway import Gateway
from hygraph.serve.http import check_key


def gateway(request: Request) -> Gateway:
    return request.app.state.gateway


async def read_access(request: Request, authorization: str = Header("", include_in_schema=False)) -> None:
    """Reads need a key only when `serve.require_key_for_reads` is set (and keys are configured)."""
    gw = gateway(request)
    check_key(authorization, gw.keys, gw.cfg.serve.require_key_for_reads)


async def write_access(request: Request, authorization: str = Header("", include_in_schema=False)) -> None:
    """Writes need a key whenever keys are configured."""
    check_key(authorization, gateway(request).keys, True)


async def status_access(request: Request, authorization: str = Header("", include_in_schema=False)) -> None:
    """Operational status (the updater's recent jobs and errors, a job's outcome) names jobs and what
    failed: it needs a key whenever keys are configured, whatever `require_key_for_reads` says."""
    check_key(authorization, gateway(request).keys, True)
