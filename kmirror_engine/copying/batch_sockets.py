"""The I/O layer of the batch copy path's connections (`kmirror_engine.copying.batch_net`):
kafka-python's parser, plaintext transport, event loop and connection manager, each changed where
the library's own costs CPU on the copy (answers read straight into pooled frame buffers, produce
requests sent by vectored writes, read interest kept in epoll between reads).
"""

from __future__ import annotations

import selectors
import socket
import struct
from typing import Any

from kafka import errors as kafka_errors
from kafka.net.manager import KafkaConnectionManager
from kafka.net.selector import NetworkSelector, Task
from kafka.net.transport import KafkaTCPTransport
from kafka.protocol.frame import KafkaBytes
from kafka.protocol.parser import KafkaProtocol

from kmirror_engine.copying.batch_buffers import BufferPool, Frame, Gather
from kmirror_engine.copying.batch_frames import FetchAnswer, ProduceCall

_FRAME_SIZE = struct.Struct(">i")
_IOV_MAX = 1024  # buffers per sendmsg (Linux's UIO_MAXIOV)
LOW_WATER_MAX_BYTES = 1024 * 1024

# Fetch answers are read into reused buffers (at most POOL_SIZE per connection, POOLED_MAX_BYTES
# each: a 4 MiB fetch and its framing): a fresh 4 MiB buffer per answer is zero-filled and
# page-faulted in each time (about a third of the copy's CPU on uncompressed topics,
# docs/performance.md). A buffer is reused once no batch of its answer is referenced any more
# (the copier's pending limit bounds how many are); a larger answer gets a fresh buffer.
POOL_SIZE = 16
POOLED_MIN_BYTES = 64 * 1024
POOLED_MAX_BYTES = 4 * 1024 * 1024 + 256 * 1024


class _DirectParser(KafkaProtocol):
    """kafka-python's protocol parser, filled from the socket by `fill`: each answer is read with
    recv_into straight into its frame buffer (a pooled one for fetch answers, `Frame`), which the
    decoder then reads in place (the library reads 4 KiB chunks into fresh bytes, joins them and
    copies them into a fresh frame). Data handed to `receive_bytes` the library's way still works."""

    _receiving: bool  # the library's state: a frame is being read into _rbuffer
    _rbuffer: Any
    _head: bytearray
    _head_at: int
    _at: int
    _done: list[Any]
    _lowat: int
    _pool: BufferPool
    bytes_to_send: list[Any]  # the library's queue of encoded requests

    def adopt(self) -> None:
        """Set up the state `fill` keeps (the instance was the library's parser until now)."""
        self._head, self._head_at, self._at, self._done, self._lowat = bytearray(4), 0, 0, [], 1
        self._pool = BufferPool(POOLED_MAX_BYTES, POOL_SIZE)

    def fill(self, sock: Any) -> bool:
        """Read everything readable now; completed answers wait for `receive_bytes`. Returns False
        when the peer closed the connection."""
        while True:
            try:
                if not self._receiving:
                    got = sock.recv_into(memoryview(self._head)[self._head_at :])
                elif isinstance(self._rbuffer, Frame):
                    got = sock.recv_into(self._rbuffer.view[self._at :])
                else:
                    got = sock.recv_into(memoryview(self._rbuffer)[self._at :])
            except (BlockingIOError, InterruptedError):
                self._low_water(sock)
                return True
            if not got:
                return False
            if not self._receiving:
                self._head_at += got
                if self._head_at == 4:
                    (size,) = _FRAME_SIZE.unpack(self._head)
                    self._validate_frame_size(size)
                    self._rbuffer, self._at, self._head_at, self._receiving = self._frame(size), 0, 0, True
                    if size == 0:
                        self._complete()
                continue
            self._at += got
            if self._at == len(self._rbuffer):
                self._complete()

    def _low_water(self, sock: Any) -> None:
        """Wake the event loop for this socket only once the rest of the answer being read is there
        (up to `LOW_WATER_MAX_BYTES`; SO_RCVLOWAT), not for every piece of it that arrives."""
        want = min(len(self._rbuffer) - self._at, LOW_WATER_MAX_BYTES) if self._receiving else 1
        if want != self._lowat:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, max(1, want))
            self._lowat = want

    def _frame(self, size: int) -> Any:
        """Where the next answer of `size` bytes is read: a pooled buffer for a fetch answer."""
        head = self.in_flight_requests[0] if self.in_flight_requests else None
        if getattr(head, "response_class", None) is FetchAnswer and size >= POOLED_MIN_BYTES:
            view = self._pool.take(size)
            if view is not None:
                return Frame(view)
        return KafkaBytes(size)

    def _complete(self) -> None:
        self._rbuffer.seek(0)
        self._done.append(self._process_response(self._rbuffer))
        self._reset_buffer()

    def receive_bytes(self, data: Any) -> list[Any]:
        if data:
            return list(super().receive_bytes(data))
        done, self._done = self._done, []
        return done

    def send_request(self, request: Any, correlation_id: int | None = None) -> int:
        """The library's, but a produce request is queued as pieces (`ProduceCall.gather`): its
        batches go from their fetch buffers to the socket (`_DirectReadTransport._sock_send`)."""
        if not isinstance(request, ProduceCall):
            return int(super().send_request(request, correlation_id))
        if correlation_id is None:
            correlation_id = self._next_correlation_id()
        request.with_header(correlation_id=correlation_id, client_id=self._client_id)
        pieces = request.gather()
        self.bytes_to_send.append(pieces if pieces is not None else request.encode(framed=True, header=True))
        self.in_flight_requests.append(request.header)
        return correlation_id

    def send_bytes(self) -> Any:
        if not any(isinstance(data, Gather) for data in self.bytes_to_send):
            return super().send_bytes()
        pieces: list[Any] = []
        for data in self.bytes_to_send:
            pieces += data.pieces if isinstance(data, Gather) else [data]
        self.bytes_to_send = []
        return Gather(pieces)


class _DirectReadTransport(KafkaTCPTransport):
    """kafka-python's plaintext transport, reading through the connection's parser (`_DirectParser`):
    it hands the connection an empty read, after which the parser returns the answers it completed;
    requests queued as pieces (`Gather`) go out by vectored writes."""

    def _sock_recv(self) -> tuple[bytes, Exception | None]:
        parser = getattr(self._protocol, "parser", None)
        if parser is None:
            return super()._sock_recv()
        if type(parser) is not _DirectParser:
            parser.__class__ = _DirectParser
            parser.adopt()
        try:
            open_ = parser.fill(self._sock)
        except kafka_errors.KafkaProtocolError as exc:
            return b"", exc
        except Exception as exc:  # the library's own contract: the caller aborts the connection
            return b"", kafka_errors.KafkaConnectionError(exc)
        return b"", None if open_ else kafka_errors.KafkaConnectionError("socket disconnected")

    def _sock_send(self) -> tuple[int, Exception | None]:
        """The library's, with requests queued as pieces (`Gather`) sent by vectored writes."""
        if not any(isinstance(chunk, Gather) for chunk in self._write_buffer):
            return super()._sock_send()
        total = 0
        if self._sock is None:
            return total, kafka_errors.KafkaConnectionError("Connection closed during send")
        while self._write_buffer:
            chunk = self._write_buffer.popleft()
            if not isinstance(chunk, Gather):
                chunk = Gather([memoryview(chunk)])
            while chunk.pieces:
                try:
                    sent = self._sock.sendmsg(chunk.pieces[:_IOV_MAX])
                except (BlockingIOError, InterruptedError):
                    self._write_buffer.appendleft(chunk)
                    return total, None
                except Exception as exc:  # the library's own contract: the caller aborts the connection
                    return total, kafka_errors.KafkaConnectionError(exc)
                total += sent
                chunk.advance(sent)
        return total, None


class LeanSelector(NetworkSelector):
    """kafka-python's event loop with a socket's read interest kept in epoll between reads.

    The library registers a socket before each read and unregisters it after: two epoll_ctl calls
    per read, and the registration's look-up misses, which formats the socket's repr twice (two
    getsockname/getpeername pairs). Here a read wait that ends leaves the registration in place
    with no reader, and the next wait only names its task; a read event that finds no reader
    (reading paused) drops the interest then. Writes and closes unregister as the library does
    (a writable socket kept registered would wake every poll). Relies on kafka-python 3.0.12's
    `register_event`/`unregister_event`/`_process_events` and their (reader, writer) key data."""

    def register_event(self, fileobj: Any, event: int, task: Any) -> None:
        if not isinstance(task, Task):
            task = Task(task)
        fd = fileobj.fileno()
        # looked up by number: a miss formats the number, not the socket
        key = self._selector.get_map().get(fd) if fd >= 0 else None
        if key is not None and key.fileobj is not fileobj:  # a closed socket's number, reused
            self._selector.unregister(key.fileobj)
            key = None
        if key is None:
            self._selector.register(fileobj, event, (task, None) if event == selectors.EVENT_READ else (None, task))
            return
        reader, writer = key.data
        if (reader if event == selectors.EVENT_READ else writer) is not None:
            raise RuntimeError(f"event {event} already registered for {fileobj} by another task")
        data = (task, writer) if event == selectors.EVENT_READ else (reader, task)
        self._selector.modify(fileobj, key.events | event, data)  # no syscall when the events are kept

    def unregister_event(self, fileobj: Any, event: int) -> None:
        if event != selectors.EVENT_READ:
            super().unregister_event(fileobj, event)
            return
        fd = fileobj.fileno()
        key = self._selector.get_map().get(fd) if fd >= 0 else None
        if key is not None and key.fileobj is fileobj:
            self._selector.modify(fileobj, key.events, (None, key.data[1]))  # the interest stays

    def _process_events(self, event_list: list[Any]) -> None:
        ready = []
        for key, events in event_list:
            if events & selectors.EVENT_READ and key.fileobj is not self._wakeup_r and key.data[0] is None:
                events &= ~selectors.EVENT_READ  # nobody reads it now: stop watching until someone waits
                super().unregister_event(key.fileobj, selectors.EVENT_READ)
            if events:
                ready.append((key, events))
        super()._process_events(ready)


class LinkManager(KafkaConnectionManager):
    """kafka-python's connection manager with `_DirectReadTransport` on plaintext connections
    (TLS keeps the library's transport). Relies on kafka-python 3.0.12's `_build_transport`."""

    async def _build_transport(self, node: Any, timeout_at: float | None = None) -> Any:
        transport = await super()._build_transport(node, timeout_at)
        if type(transport) is KafkaTCPTransport:
            transport.__class__ = _DirectReadTransport
        return transport
