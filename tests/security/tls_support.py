"""Test-only TLS plumbing: a throwaway CA with server/client certificates (`cryptography`) and a
`stunnel4` TLS front for a plaintext tansu listener (tansu advertises the stunnel port).
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.security.background import BackgroundProcess


@dataclass(frozen=True)
class Issued:
    cert: Path
    key: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path, password: bytes | None = None) -> Path:
    encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption))
    path.chmod(0o600)
    return path


class TestCa:
    """A CA that signs server (SAN 127.0.0.1, localhost) and client certificates into `directory`."""

    __test__ = False  # not a pytest test class

    def __init__(self, directory: Path, name: str = "kmirror-test-ca") -> None:
        self.directory = directory
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        self.certificate = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )
        self.cert_path = directory / f"{name}.pem"
        self.cert_path.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))

    def issue(
        self,
        common_name: str,
        *,
        server: bool,
        key_password: bytes | None = None,
        dns_names: tuple[str, ...] = ("localhost",),
        ip_addresses: tuple[str, ...] = ("127.0.0.1",),
    ) -> Issued:
        """A certificate signed by this CA; a server's carries `dns_names` + `ip_addresses` as SANs."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.timezone.utc)
        usage = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        )
        if server:
            names: list[x509.GeneralName] = [x509.DNSName(name) for name in dns_names]
            names += [x509.IPAddress(ipaddress.ip_address(address)) for address in ip_addresses]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        cert_path = self.directory / f"{common_name}.crt"
        cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return Issued(cert_path, _write_key(key, self.directory / f"{common_name}.key", key_password))


def broker_tls(ca: TestCa, server: Issued, keystore: Path) -> dict[str, str]:
    """A broker listener's TLS settings: `server`'s key and chain written to `keystore` (a PEM
    keystore: the key, then the chain) and `ca` trusted."""
    keystore.write_text(server.key.read_text() + server.cert.read_text())
    tls = {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(ca.cert_path),
    }
    return tls


class Stunnel(BackgroundProcess):
    """stunnel4 in server mode: TLS on `accept_port`, plaintext to `connect_port` on 127.0.0.1.

    With `client_ca`, clients must present a certificate signed by it (verify = 2: mutual TLS).
    """

    def __init__(
        self,
        directory: Path,
        name: str,
        accept_port: int,
        connect_port: int,
        server: Issued,
        client_ca: Path | None = None,
    ) -> None:
        self.accept_port = accept_port
        self.log_path = directory / f"stunnel-{name}.log"
        lines = [
            "foreground = yes",
            "pid =",
            f"output = {self.log_path}",
            "debug = 5",
            "",
            f"[{name}]",
            f"accept = 127.0.0.1:{accept_port}",
            f"connect = 127.0.0.1:{connect_port}",
            f"cert = {server.cert}",
            f"key = {server.key}",
        ]
        if client_ca is not None:
            lines += [f"CAfile = {client_ca}", "verify = 2"]
        self.conf_path = directory / f"stunnel-{name}.conf"
        self.conf_path.write_text("\n".join(lines) + "\n")

    def __enter__(self) -> Stunnel:
        binary = shutil.which("stunnel4") or shutil.which("stunnel")
        assert binary, "stunnel4 is missing: run scripts/install-system-deps.sh (apt-get install stunnel4)"
        self._start([binary, str(self.conf_path)], self.accept_port)
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
