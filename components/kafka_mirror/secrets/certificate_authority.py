"""TestCertificateAuthority (optional): a throwaway CA plus a broker and a client certificate made
with pulumi-tls, for demo and staging clusters. Private keys are pulumi secrets (pulumi-tls marks
`private_key_pem` secret); feed them to TlsSecret, never to stack outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_tls as tls

TOKEN = "kafka-mirror:index:TestCertificateAuthority"
SERVER_USES = ["digital_signature", "key_encipherment", "server_auth"]
CLIENT_USES = ["digital_signature", "key_encipherment", "client_auth"]


@dataclass
class TestCertificateAuthorityArgs:
    common_name: str = "kafka-mirror test CA"
    server_dns_names: list[str] = field(default_factory=lambda: ["localhost"])
    server_ip_addresses: list[str] = field(default_factory=lambda: ["127.0.0.1"])
    client_common_name: str = "mirrormaker"
    validity_hours: int = 24 * 30


class TestCertificateAuthority(pulumi.ComponentResource):
    """Outputs: `ca_cert_pem`, `server_cert_pem`, `client_cert_pem` (public); keys only as secret attributes."""

    __test__ = False  # not a pytest test class

    def __init__(
        self, name: str, args: TestCertificateAuthorityArgs, opts: pulumi.ResourceOptions | None = None
    ) -> None:
        super().__init__(TOKEN, name, {}, opts)
        child = pulumi.ResourceOptions(parent=self)
        ca_key = tls.PrivateKey(f"{name}-ca-key", algorithm="ECDSA", ecdsa_curve="P256", opts=child)
        ca_cert = tls.SelfSignedCert(
            f"{name}-ca-cert",
            private_key_pem=ca_key.private_key_pem,
            is_ca_certificate=True,
            validity_period_hours=args.validity_hours,
            allowed_uses=["cert_signing", "crl_signing", "digital_signature"],
            subject=tls.SelfSignedCertSubjectArgs(common_name=args.common_name),
            opts=child,
        )
        self.ca_cert_pem = ca_cert.cert_pem
        self.server_cert_pem, self.server_key_pem = self._issue(
            f"{name}-server", ca_key, ca_cert, args, args.server_dns_names[0], SERVER_USES, server=True
        )
        self.client_cert_pem, self.client_key_pem = self._issue(
            f"{name}-client", ca_key, ca_cert, args, args.client_common_name, CLIENT_USES, server=False
        )
        self.register_outputs(
            {
                "ca_cert_pem": self.ca_cert_pem,
                "server_cert_pem": self.server_cert_pem,
                "client_cert_pem": self.client_cert_pem,
            }
        )

    def _issue(
        self,
        name: str,
        ca_key: tls.PrivateKey,
        ca_cert: tls.SelfSignedCert,
        args: TestCertificateAuthorityArgs,
        common_name: str,
        uses: list[str],
        *,
        server: bool,
    ) -> tuple[pulumi.Output[str], pulumi.Output[str]]:
        child = pulumi.ResourceOptions(parent=self)
        key = tls.PrivateKey(f"{name}-key", algorithm="ECDSA", ecdsa_curve="P256", opts=child)
        request = tls.CertRequest(
            f"{name}-csr",
            private_key_pem=key.private_key_pem,
            subject=tls.CertRequestSubjectArgs(common_name=common_name),
            dns_names=args.server_dns_names if server else None,
            ip_addresses=args.server_ip_addresses if server else None,
            opts=child,
        )
        cert = tls.LocallySignedCert(
            f"{name}-cert",
            cert_request_pem=request.cert_request_pem,
            ca_private_key_pem=ca_key.private_key_pem,
            ca_cert_pem=ca_cert.cert_pem,
            validity_period_hours=args.validity_hours,
            allowed_uses=uses,
            opts=child,
        )
        return cert.cert_pem, pulumi.Output.secret(key.private_key_pem)
