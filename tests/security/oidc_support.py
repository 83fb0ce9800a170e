"""An OIDC provider on loopback for OAUTHBEARER tests: a JWKS endpoint (what Kafka's JWT validator
fetches) and a client-credentials token endpoint (what librdkafka's `sasl.oauthbearer.method=oidc`
calls), signing RS256 JWTs with a key made per provider. What it issues is set per test
(`audience`, `lifetime_s`); every token request is recorded (client id, scope, time)."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

AUDIENCE = "kafka"
ISSUER = "http://kmirror-test-issuer"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(number: int) -> str:
    return _b64(number.to_bytes((number.bit_length() + 7) // 8, "big"))


@dataclass
class TokenRequest:
    client_id: str
    scope: str
    at: float


@dataclass
class OidcProvider:
    """`clients`: client id -> secret accepted at the token endpoint."""

    clients: dict[str, str]
    audience: str = AUDIENCE
    lifetime_s: int = 3600
    requests: list[TokenRequest] = field(default_factory=list)
    kid: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    def __post_init__(self) -> None:
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def jwks_url(self) -> str:
        return f"{self.base_url}/jwks"

    @property
    def token_url(self) -> str:
        return f"{self.base_url}/token"

    def jwks(self) -> dict[str, Any]:
        public = self._key.public_key().public_numbers()
        key = {"kty": "RSA", "kid": self.kid, "use": "sig", "alg": "RS256", "n": _uint(public.n), "e": _uint(public.e)}
        return {"keys": [key]}

    def token(self, subject: str, scope: str) -> str:
        now = int(time.time())
        header = {"alg": "RS256", "typ": "JWT", "kid": self.kid}
        claims = {
            "sub": subject,
            "aud": self.audience,
            "iss": ISSUER,
            "iat": now,
            "nbf": now - 5,
            "exp": now + self.lifetime_s,
            "scope": scope,
            "jti": uuid.uuid4().hex,
        }
        signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"

    def __enter__(self) -> OidcProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def _handler(provider: OidcProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/jwks":
                self._answer(200, provider.jwks())
            else:
                self._answer(404, {"error": "not_found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
            client_id, secret = form.get("client_id", ""), form.get("client_secret", "")
            auth = self.headers.get("Authorization", "")
            if auth.lower().startswith("basic "):
                client_id, _, secret = base64.b64decode(auth[6:]).decode().partition(":")
            if self.path != "/token" or form.get("grant_type") != "client_credentials":
                self._answer(400, {"error": "unsupported_grant_type"})
                return
            if provider.clients.get(client_id) != secret:
                self._answer(401, {"error": "invalid_client"})
                return
            scope = form.get("scope", "")
            provider.requests.append(TokenRequest(client_id, scope, time.time()))
            token = provider.token(client_id, scope)
            self._answer(200, {"access_token": token, "token_type": "Bearer", "expires_in": provider.lifetime_s})

    return Handler
