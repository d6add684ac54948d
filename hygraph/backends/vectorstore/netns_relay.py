"""The first process of a private network namespace: runs one server in it and relays connections in.

Started as `unshare -rn python -I -S netns_relay.py --forward FD:PORT [...] -- COMMAND ...` by a
parent that created each listening socket FD in its own (host) network namespace and passed it
down. A socket keeps the namespace it was created in, so the relay accepts host-side connections
on those sockets and forwards each one to 127.0.0.1:PORT inside the namespace, where nothing from
outside can connect. The relay:

- refuses to run unless its namespace holds nothing but `lo` (the server would otherwise bind the
  host's interfaces), and brings `lo` up (a new namespace starts with it down);
- starts COMMAND as its child, which gets SIGKILL if the relay dies (PR_SET_PDEATHSIG), so killing
  the relay's pid takes the whole server down;
- forwards SIGTERM and SIGINT to the child, stops accepting, and exits with the child's status
  once it has exited (128 + signal number if it was killed by one).

Standard library only, and run with `-I -S`: it must import nothing the server's environment
could redirect, and start in tens of milliseconds.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import errno
import fcntl
import os
import signal
import socket
import struct
import subprocess
import sys

SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
PR_SET_PDEATHSIG = 1
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# accept() failures that pass once connections close or memory frees: wait and accept again.
TRANSIENT_ACCEPT = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def private_namespace() -> bool:
    """Whether this network namespace has no interface but loopback, as a new one made by
    `unshare -n` has."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        ifreq = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack_from("16sH", fcntl.ioctl(s.fileno(), SIOCGIFFLAGS, ifreq))[1]
        fcntl.ioctl(s.fileno(), SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))


def _die_with_parent(libc: ctypes.CDLL, parent: int) -> None:
    """In the child between fork and exec: SIGKILL when the relay dies, including before this ran."""
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0 or os.getppid() != parent:
        os._exit(127)


class _Half(asyncio.Protocol):
    """One end of a relayed connection: what it receives is written to the other end, an EOF is
    passed on as a half-close, and a reset or close of either end closes both."""

    def __init__(self) -> None:
        self.peer: _Half | None = None
        self.transport: asyncio.Transport | None = None
        self.read_done = self.write_done = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.peer.transport is None:
            transport.pause_reading()  # nowhere to write yet: `_relay` resumes it
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # Small gRPC frames must not wait for Nagle's delayed ACKs (40 ms).
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.peer.transport.write(data)

    def eof_received(self) -> bool:
        self.read_done = True
        self.peer.transport.write_eof()  # after what is still buffered
        self.peer.write_done = True
        self._close_if_done()
        self.peer._close_if_done()
        return True

    def _close_if_done(self) -> None:
        if self.read_done and self.write_done:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer.transport is not None and not self.peer.transport.is_closing():
            if exc is None:
                self.peer.transport.close()
            else:
                self.peer.transport.abort()

    # Backpressure: while this end cannot keep up, stop reading from the other.
    def pause_writing(self) -> None:
        self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        self.peer.transport.resume_reading()


async def _relay(conn: socket.socket, port: int) -> None:
    """Connect `conn` to 127.0.0.1:`port`; the two `_Half` protocols relay from then on."""
    loop = asyncio.get_running_loop()
    client, upstream = _Half(), _Half()
    client.peer, upstream.peer = upstream, client
    try:
        await loop.create_connection(lambda: upstream, "127.0.0.1", port)
    except OSError:
        conn.close()  # the server is not listening (yet): the client sees its connection closed
        return
    try:
        await loop.connect_accepted_socket(lambda: client, sock=conn)
    except BaseException as exc:
        upstream.transport.abort()
        conn.close()
        if isinstance(exc, OSError):
            return  # the client is gone already
        raise
    upstream.transport.resume_reading()  # what the server sent meanwhile can go to the client now


async def _serve(listener: socket.socket, port: int, conns: set[asyncio.Task]) -> None:
    """Accept and relay until cancelled; then close the listener, so that new clients are refused."""
    loop = asyncio.get_running_loop()
    try:
        while True:
            try:
                conn, _ = await loop.sock_accept(listener)
            except (ConnectionAbortedError, InterruptedError):
                continue
            except OSError as exc:
                if exc.errno not in TRANSIENT_ACCEPT:
                    raise
                print(f"netns_relay: accept on port {port}: {exc}", file=sys.stderr, flush=True)
                await asyncio.sleep(0.5)
                continue
            conn.setblocking(False)
            task = asyncio.ensure_future(_relay(conn, port))
            conns.add(task)
            task.add_done_callback(conns.discard)
    finally:
        listener.close()


async def run(forwards: list[tuple[socket.socket, int]], child: subprocess.Popen, pending: list[int]) -> int:
    """Relay until the child exits; `pending`: stop signals that arrived before this loop ran."""
    loop = asyncio.get_running_loop()
    exited = loop.create_future()
    pidfd = os.pidfd_open(child.pid)
    loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))
    conns: set[asyncio.Task] = set()
    servers = [asyncio.ensure_future(_serve(sock, port, conns)) for sock, port in forwards]

    def stop_accepting() -> None:
        for s in servers:
            s.cancel()

    def forward(signum: int) -> None:
        stop_accepting()  # new clients are refused while the server shuts down
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    def failed(task: asyncio.Task) -> None:
        # A listener that can no longer accept makes the server unreachable: stop it, so that the
        # next client's connect starts a new one.
        if not task.cancelled() and task.exception() is not None:
            print(f"netns_relay: stopped accepting: {task.exception()!r}; stopping the server",
                  file=sys.stderr, flush=True)
            forward(signal.SIGTERM)

    for s in servers:
        s.add_done_callback(failed)
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, forward, signum)
    for signum in pending:
        forward(signum)
    try:
        await exited
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        stop_accepting()
        for task in list(conns):
            task.cancel()
        await asyncio.gather(*servers, *conns, return_exceptions=True)
    code = child.wait()
    return 128 - code if code < 0 else code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="netns_relay", description=__doc__.splitlines()[0])
    ap.add_argument("--forward", action="append", default=[], metavar="FD:PORT",
                    help="an inherited listening socket, relayed to 127.0.0.1:PORT in this namespace")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- the server command")
    args = ap.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no server command after --")
    if not private_namespace():
        print(f"netns_relay: not in a private network namespace (interfaces: "
              f"{', '.join(n for _, n in socket.if_nameindex())}); refusing to start the server",
              file=sys.stderr, flush=True)
        return 2
    loopback_up()
    forwards = []
    for spec in args.forward:
        fd, port = (int(x) for x in spec.split(":", 1))
        sock = socket.socket(fileno=fd)
        sock.setblocking(False)
        forwards.append((sock, port))
    # A stop asked for while the server starts is kept and forwarded, so the relay never exits
    # before its server has.
    pending: list[int] = []
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda signum, frame: pending.append(signum))
    libc, parent = ctypes.CDLL(None, use_errno=True), os.getpid()  # loaded here, not in the forked child
    child = subprocess.Popen(command, stdin=subprocess.DEVNULL, preexec_fn=lambda: _die_with_parent(libc, parent))
    return asyncio.run(run(forwards, child, pending))


if __name__ == "__main__":
    sys.exit(main())
