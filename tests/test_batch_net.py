"""The batch path's event loop (`kmirror_engine.copying.batch_sockets.LeanSelector`): kafka-python's
selector with a socket's read interest kept in epoll between reads."""

from __future__ import annotations

import selectors
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from kmirror_engine.copying.batch_sockets import LeanSelector


class _CountingEpoll:
    """The selector's epoll object, counting the registration changes it is asked for (epoll_ctl)."""

    def __init__(self, epoll: Any) -> None:
        self.epoll, self.changes = epoll, 0

    def register(self, *args: Any) -> Any:
        self.changes += 1
        return self.epoll.register(*args)

    def modify(self, *args: Any) -> Any:
        self.changes += 1
        return self.epoll.modify(*args)

    def unregister(self, *args: Any) -> Any:
        self.changes += 1
        return self.epoll.unregister(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.epoll, name)


@pytest.fixture
def net() -> Iterator[tuple[LeanSelector, _CountingEpoll]]:
    selector = LeanSelector()
    counting = _CountingEpoll(selector._selector._selector)  # type: ignore[attr-defined]
    selector._selector._selector = counting  # type: ignore[attr-defined]
    yield selector, counting
    selector.close()


def _reader(net: LeanSelector, sock: socket.socket, got: list[bytes], reads: int) -> Any:
    async def read() -> None:
        for _ in range(reads):
            await net.wait_read(sock)
            got.append(sock.recv(100))

    return read()


def _poll_until(net: LeanSelector, done: Any) -> None:
    for _ in range(50):
        if done():
            return
        net.poll(timeout_ms=20)
    raise AssertionError("the event loop did not get there")


def _read_once(net: LeanSelector, payload: bytes) -> tuple[socket.socket, socket.socket, list[bytes]]:
    """A fresh socket pair whose reading end has had one read wait end with `payload`: the ends
    (ours first) and what was read."""
    a, b = socket.socketpair()
    a.setblocking(False)
    got: list[bytes] = []
    net.call_soon(_reader(net, a, got, 1))
    b.send(payload)
    _poll_until(net, lambda: got == [payload])
    return a, b, got


def test_read_waits_keep_the_sockets_registration_instead_of_two_epoll_changes_per_read(
    net: tuple[LeanSelector, _CountingEpoll],
) -> None:
    """The library registers before and unregisters after every read: 40 changes for 20 reads.
    Kept registered: one, and every read still wakes its reader with its own bytes."""
    selector, epoll = net
    a, b = socket.socketpair()
    a.setblocking(False)
    got: list[bytes] = []
    selector.call_soon(_reader(selector, a, got, 20))
    selector.poll(timeout_ms=0)  # the reader waits
    for n in range(20):
        b.send(b"%d" % n)
        _poll_until(selector, lambda n=n: len(got) == n + 1)
    assert got == [b"%d" % n for n in range(20)]
    assert epoll.changes == 1
    a.close()
    b.close()


def test_data_nobody_waits_for_drops_the_interest_and_a_later_reader_still_gets_it(
    net: tuple[LeanSelector, _CountingEpoll],
) -> None:
    """Reading paused (no reader) while bytes arrive: the poll does not wake again and again for
    them; the socket is watched again as soon as someone waits, and gets the bytes then."""
    selector, epoll = net
    a, b, got = _read_once(selector, b"first")
    b.send(b"unread")
    selector.poll(timeout_ms=50)  # the event finds no reader: the interest is dropped
    assert selector._selector.get_map().get(a.fileno()) is None  # type: ignore[attr-defined]
    before = epoll.changes
    selector.poll(timeout_ms=50)  # nothing watched: no event, no change
    assert epoll.changes == before
    selector.call_soon(_reader(selector, a, got, 1))
    _poll_until(selector, lambda: got == [b"first", b"unread"])
    a.close()
    b.close()


def test_a_closed_sockets_number_given_to_a_new_socket_is_watched_for_the_new_one(
    net: tuple[LeanSelector, _CountingEpoll],
) -> None:
    """A socket closed while its read interest is kept (a connection dropped between reads): the
    next socket the kernel gives the same number is registered afresh, not mistaken for it."""
    selector, _ = net
    a, b, got = _read_once(selector, b"old")
    number = a.fileno()
    a.close()
    b.close()
    c, d = socket.socketpair()
    c.setblocking(False)
    if c.fileno() != number:
        c, d = d, c
        c.setblocking(False)
    assert c.fileno() == number  # the kernel hands out the lowest free numbers
    selector.call_soon(_reader(selector, c, got, 1))
    d.send(b"new")
    _poll_until(selector, lambda: got == [b"old", b"new"])
    key = selector._selector.get_map().get(number)  # type: ignore[attr-defined]
    assert key is not None and key.fileobj is c and key.events == selectors.EVENT_READ
    c.close()
    d.close()


def test_write_waits_and_closes_unregister_as_the_library_does(net: tuple[LeanSelector, _CountingEpoll]) -> None:
    """A writable socket kept registered would wake every poll: a write wait ends unregistered,
    and closing (both events, as the transport does) removes the socket."""
    selector, _ = net
    a, b = socket.socketpair()
    a.setblocking(False)
    sent: list[int] = []

    async def write() -> None:
        await selector.wait_write(a)
        sent.append(a.send(b"x"))

    selector.call_soon(write())
    _poll_until(selector, lambda: sent == [1])
    assert selector._selector.get_map().get(a.fileno()) is None  # type: ignore[attr-defined]
    got: list[bytes] = []
    selector.call_soon(_reader(selector, a, got, 1))
    selector.poll(timeout_ms=0)
    selector.unregister_event(a, selectors.EVENT_READ | selectors.EVENT_WRITE)
    assert selector._selector.get_map().get(a.fileno()) is None  # type: ignore[attr-defined]
    a.close()
    b.close()


def test_a_reader_is_woken_once_the_answer_it_reads_is_whole_not_for_every_piece() -> None:
    """SO_RCVLOWAT while a frame is being read: pieces of it arriving do not make the socket
    readable (no wake-up, no read); the rest does, the answer is whole, and the mark is back to
    one byte for the next frame's size."""
    import time

    from kafka.protocol.parser import KafkaProtocol

    from kmirror_engine.copying.batch_sockets import _DirectParser

    listener = socket.create_server(("127.0.0.1", 0))
    theirs = socket.create_connection(listener.getsockname())
    ours, _ = listener.accept()
    listener.close()
    ours.setblocking(False)
    parser = KafkaProtocol(client_id="t")
    parser.__class__ = _DirectParser
    parser.adopt()  # type: ignore[attr-defined]
    whole: list[int] = []

    def complete() -> None:  # the frame as read (no request to decode it for)
        whole.append(len(parser._rbuffer))  # type: ignore[attr-defined]
        parser._reset_buffer()  # type: ignore[attr-defined]

    parser._complete = complete  # type: ignore[attr-defined,method-assign]
    body = bytes(300_000)
    wire = len(body).to_bytes(4, "big") + body
    watch = selectors.DefaultSelector()
    watch.register(ours, selectors.EVENT_READ)
    try:
        theirs.sendall(wire[:5_000])
        time.sleep(0.05)
        assert parser.fill(ours)  # type: ignore[attr-defined]
        assert ours.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == len(wire) - 5_000
        theirs.sendall(wire[5_000:200_000])
        time.sleep(0.05)
        assert watch.select(0.1) == []  # 195 kB there, 100 kB short of the answer: no wake-up
        theirs.sendall(wire[200_000:])
        assert watch.select(2.0) != []
        assert parser.fill(ours)  # type: ignore[attr-defined]
        assert whole == [len(body)]
        assert ours.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 1
    finally:
        watch.close()
        ours.close()
        theirs.close()


def test_tls_settings_the_batch_path_does_not_apply_send_the_flow_to_a_record_loop(tmp_path: Any) -> None:
    """Issue 41: ssl.crl.location, enable.ssl.certificate.verification=false and a CA directory
    failed every task of a batch-path flow with a misleading "cannot reach"; they are reasons
    for the record loop now (`link_config`, `task_copy.batch_path_blockers`)."""
    from kmirror_engine.copying.batch_settings import link_config

    ca_file = tmp_path / "ca.pem"
    ca_file.write_text("-")
    tls = {"bootstrap.servers": "e:9093", "security.protocol": "SSL"}
    assert link_config({**tls, "ssl.ca.location": str(ca_file)})[1] == []
    assert link_config({**tls, "ssl.crl.location": "/etc/crl.pem"})[1] == [
        "client property ssl.crl.location (CRL checks) is not applied on the batch path"
    ]
    assert link_config({**tls, "enable.ssl.certificate.verification": False})[1] == [
        "client property enable.ssl.certificate.verification=false is not applied on the batch path"
    ]
    [reason] = link_config({**tls, "ssl.ca.location": str(tmp_path)})[1]
    assert reason.startswith("client property ssl.ca.location") and "directory" in reason
