"""A real Kubernetes control plane on loopback, the way controller-runtime's envtest runs one:
etcd, kube-apiserver (serving certificate generated here, a static bearer token in
`system:masters`) and kube-controller-manager (its namespace controller finalizes deleted
namespaces, its garbage collector follows owner references), built by kmirror_cli.deploy_tools.

`ControlPlane.start()` gives a kubeconfig; `get`/`list_names` read the API with that token.
Logs stay under the directory given (the test session's tmp dir, kept on failure).
"""

from __future__ import annotations

import datetime
import json
import secrets
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from kmirror_cli.deploy_tools import tool_path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pem_key(key: Any) -> bytes:
    pkcs8 = serialization.PrivateFormat.PKCS8
    return key.private_bytes(serialization.Encoding.PEM, pkcs8, serialization.NoEncryption())


def write_certs(out: Path) -> None:
    """A CA, the API server's serving certificate (127.0.0.1, localhost) and the service-account key."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kmirror-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    (out / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (out / "apiserver.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (out / "apiserver.key").write_bytes(_pem_key(key))
    (out / "sa.key").write_bytes(_pem_key(rsa.generate_private_key(public_exponent=65537, key_size=2048)))


@dataclass
class ControlPlane:
    root: Path
    token: str = field(default_factory=lambda: "kmirror-test-" + secrets.token_hex(16))
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    port: int = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig_path(self) -> Path:
        return self.root / "kubeconfig.yaml"

    def kubeconfig(self, context: str = "kmirror-test") -> str:
        ca = (self.root / "ca.crt").read_text()
        import base64

        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": context,
                "clusters": [
                    {
                        "name": "test",
                        "cluster": {
                            "server": self.url,
                            "certificate-authority-data": base64.b64encode(ca.encode()).decode(),
                        },
                    }
                ],
                "users": [{"name": "admin", "user": {"token": self.token}}],
                "contexts": [{"name": context, "context": {"cluster": "test", "user": "admin"}}],
            }
        )

    def _spawn(self, name: str, cmd: list[str]) -> None:
        log = (self.root / f"{name}.log").open("wb")
        self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=self.root))

    def start(self) -> ControlPlane:
        self.root.mkdir(parents=True, exist_ok=True)
        write_certs(self.root)
        (self.root / "tokens.csv").write_text(f'{self.token},kmirror-admin,kmirror-admin,"system:masters"\n')
        etcd_port, peer_port, self.port = free_port(), free_port(), free_port()
        etcd = f"http://127.0.0.1:{etcd_port}"
        self._spawn(
            "etcd",
            [
                str(tool_path("etcd")),
                "--data-dir",
                str(self.root / "etcd"),
                "--unsafe-no-fsync",
                "--listen-client-urls",
                etcd,
                "--advertise-client-urls",
                etcd,
                "--listen-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-advertise-peer-urls",
                f"http://127.0.0.1:{peer_port}",
                "--initial-cluster",
                f"default=http://127.0.0.1:{peer_port}",
            ],
        )
        r = self.root
        self._spawn(
            "kube-apiserver",
            [
                str(tool_path("kube-apiserver")),
                "--etcd-servers",
                etcd,
                "--bind-address",
                "127.0.0.1",
                "--advertise-address",
                "127.0.0.1",
                "--secure-port",
                str(self.port),
                "--tls-cert-file",
                str(r / "apiserver.crt"),
                "--tls-private-key-file",
                str(r / "apiserver.key"),
                "--client-ca-file",
                str(r / "ca.crt"),
                "--token-auth-file",
                str(r / "tokens.csv"),
                "--authorization-mode",
                "RBAC",
                "--service-cluster-ip-range",
                "10.0.0.0/24",
                "--allow-privileged",
                "--service-account-issuer",
                "https://kubernetes.default.svc",
                "--service-account-key-file",
                str(r / "sa.key"),
                "--service-account-signing-key-file",
                str(r / "sa.key"),
                "--cert-dir",
                str(r / "certs"),
            ],
        )
        self.kubeconfig_path.write_text(self.kubeconfig())
        self._wait_ready()
        self._spawn(
            "kube-controller-manager",
            [
                str(tool_path("kube-controller-manager")),
                "--kubeconfig",
                str(self.kubeconfig_path),
                # what `destroy` needs: a deleted namespace finalized, owned objects collected, PVCs released
                "--controllers",
                "namespace-controller,garbage-collector-controller,persistentvolumeclaim-protection-controller",
                "--leader-elect=false",
                "--bind-address",
                "127.0.0.1",
                "--secure-port",
                "0",
                "--service-account-private-key-file",
                str(r / "sa.key"),
                "--use-service-account-credentials=false",
            ],
        )
        return self

    def _wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            for p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited {p.returncode}; logs in {self.root}")
            try:
                if self.request("GET", "/readyz") == "ok":
                    return
            except (OSError, urllib.error.URLError) as e:
                last = e
            time.sleep(0.5)
        raise TimeoutError(f"kube-apiserver not ready after {timeout:.0f} s ({last}); logs in {self.root}")

    def request(self, method: str, path: str, body: Any = None, retry_s: float = 60.0) -> Any:
        """One API call; a 429 (API priority and fairness turns requests away for the first seconds
        after /readyz, measured here) is asked again after its Retry-After, for up to `retry_s`."""
        deadline = time.monotonic() + retry_s
        while True:
            try:
                return self._request_once(method, path, body)
            except urllib.error.HTTPError as e:
                if e.code != 429 or time.monotonic() > deadline:
                    raise
                time.sleep(float(e.headers.get("Retry-After") or 1))

    def _request_once(self, method: str, path: str, body: Any) -> Any:
        ctx = ssl.create_default_context(cafile=str(self.root / "ca.crt"))
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            text = resp.read().decode()
        return json.loads(text) if text.startswith("{") else text

    def patch_status(self, path: str, status: dict[str, Any]) -> Any:
        """Merge-patch the status subresource of the object at `path` (what a controller does)."""
        ctx = ssl.create_default_context(cafile=str(self.root / "ca.crt"))
        req = urllib.request.Request(
            self.url + path + "/status", data=json.dumps({"status": status}).encode(), method="PATCH"
        )
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Content-Type", "application/merge-patch+json")
        with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
            return json.loads(resp.read().decode())

    def get(self, path: str) -> dict[str, Any] | None:
        try:
            return dict(self.request("GET", path))
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def list_names(self, path: str) -> list[str]:
        """`metadata.name`s of a list (e.g. /api/v1/namespaces/NS/configmaps); [] when the type is unknown."""
        found = self.get(path)
        return sorted(i["metadata"]["name"] for i in (found or {}).get("items", []))

    def apply(self, obj: dict[str, Any], collection: str) -> None:
        """Create `obj` under `collection` (its API path), as a cluster admin would beforehand."""
        self.request("POST", collection, obj)

    def stop(self) -> None:
        """A throwaway control plane (its etcd data is the session's tmp dir): 5 s to stop, then killed
        (kube-apiserver's graceful shutdown took ~20 s of every session)."""
        for p in reversed(self.procs):
            p.terminate()
        for p in reversed(self.procs):
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()
