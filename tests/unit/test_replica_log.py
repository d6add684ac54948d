"""A replica's hygraph errors reach its Serve log file at once (serve/replica_log.py)."""

import logging
import logging.handlers

import pytest

from hygraph.serve.replica_log import SERVE_LOGGER, log_to_replica_file


class _Kept(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture()
def serve_file():
    """A Serve replica's logger as Serve sets it up with a 1,000-record buffer; restored after."""
    serve, ours = logging.getLogger(SERVE_LOGGER), logging.getLogger("hygraph")
    saved = (serve.handlers[:], ours.handlers[:], ours.level, ours.propagate)
    kept = _Kept()
    serve.handlers = [logging.handlers.MemoryHandler(1000, flushLevel=logging.ERROR, target=kept)]
    yield kept
    serve.handlers, ours.handlers, level, ours.propagate = saved[0], saved[1], saved[2], saved[3]
    ours.setLevel(level)


def test_an_error_is_written_at_once_and_info_with_the_next_flush(serve_file):
    log_to_replica_file()
    log_to_replica_file()  # a second deployment in the same process adds nothing twice
    logging.getLogger("hygraph.serve").info("now serving version %d", 3)
    assert serve_file.lines == []  # buffered, as Serve buffers its own
    logging.getLogger("hygraph.serve.http").error("internal error (request %s)", "r-1")
    assert serve_file.lines == ["now serving version 3", "internal error (request r-1)"]


def test_without_serve_s_handlers_nothing_changes():
    serve, ours = logging.getLogger(SERVE_LOGGER), logging.getLogger("hygraph")
    saved = serve.handlers[:]
    serve.handlers = []
    try:
        before = (ours.handlers[:], ours.propagate)
        log_to_replica_file()
        assert (ours.handlers, ours.propagate) == before
    finally:
        serve.handlers = saved
