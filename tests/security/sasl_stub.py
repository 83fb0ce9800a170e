"""Test-only: the first steps of a Kafka broker's SASL/GSSAPI listener, enough for a client to
send its Kerberos token (no broker here speaks GSSAPI).

It answers ApiVersions (advertising SaslHandshake v0-1 and SaslAuthenticate v0, plus JoinGroup,
whose presence librdkafka takes as "this broker can do GSSAPI"), answers SaslHandshake with
`GSSAPI`, and records the client's first SaslAuthenticate token (the GSS-API initial context
token, i.e. the Kerberos AP-REQ for the broker's service principal), then hangs up. The token is
verified by a real GSS-API acceptor (the JDK's, as in a Kafka broker) in the test.
"""

from __future__ import annotations

import socket
import struct
import threading

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE, JOIN_GROUP, METADATA = 18, 17, 36, 11, 3
SUPPORTED = {
    API_VERSIONS: (0, 3),
    SASL_HANDSHAKE: (0, 1),
    SASL_AUTHENTICATE: (0, 0),
    JOIN_GROUP: (0, 0),
    METADATA: (0, 1),
}


def _read_exactly(conn: socket.socket, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _api_versions_body(version: int) -> bytes:
    if version >= 3:  # flexible: compact array (length + 1) and empty tagged fields
        entries = b"".join(struct.pack(">hhhB", key, low, high, 0) for key, (low, high) in SUPPORTED.items())
        return struct.pack(">hB", 0, len(SUPPORTED) + 1) + entries + struct.pack(">iB", 0, 0)
    entries = b"".join(struct.pack(">hhh", key, low, high) for key, (low, high) in SUPPORTED.items())
    return struct.pack(">hi", 0, len(SUPPORTED)) + entries + (struct.pack(">i", 0) if version >= 1 else b"")


class SaslGssapiStub:
    """`with SaslGssapiStub() as stub:` listens on 127.0.0.1:`stub.port` for one connection."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(60)
        self.port = int(self.server.getsockname()[1])
        self.requests: list[tuple[int, int]] = []  # (api key, version) in arrival order
        self.mechanisms: list[str] = []
        self.tokens: list[bytes] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> SaslGssapiStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.close()
        self.thread.join(timeout=10)

    def _serve(self) -> None:
        try:
            conn, _ = self.server.accept()
        except OSError:
            return
        with conn:
            while (head := _read_exactly(conn, 4)) is not None:
                frame = _read_exactly(conn, struct.unpack(">i", head)[0])
                if frame is None or not self._answer(conn, frame):
                    return

    def _answer(self, conn: socket.socket, frame: bytes) -> bool:
        """Answer one request; False ends the connection."""
        api_key, version, correlation_id = struct.unpack(">hhi", frame[:8])
        self.requests.append((api_key, version))
        client_id_length = struct.unpack(">h", frame[8:10])[0]
        body = frame[10 + max(client_id_length, 0) :]
        if api_key == API_VERSIONS:
            reply = _api_versions_body(version)
        elif api_key == SASL_HANDSHAKE:
            length = struct.unpack(">h", body[:2])[0]
            self.mechanisms.append(body[2 : 2 + length].decode())
            reply = struct.pack(">hih", 0, 1, 6) + b"GSSAPI"
        elif api_key == SASL_AUTHENTICATE:
            length = struct.unpack(">i", body[:4])[0]
            self.tokens.append(body[4 : 4 + length])
            return False
        else:
            return False
        payload = struct.pack(">i", correlation_id) + reply
        conn.sendall(struct.pack(">i", len(payload)) + payload)
        return True
