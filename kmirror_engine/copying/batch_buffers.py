"""The batch path's reused buffers and vectored sends (its frames: `batch_frames`).

- `BufferPool`: buffers reused for fetch answers and produce requests, handed out as views once
  no view of them is alive (a fresh buffer is zero-filled and page-faulted in every time).
- `Frame`: an answer's bytes in such a buffer, read by the decoders as kafka-python's `KafkaBytes`.
- `Gather`: a request as pieces for one `socket.sendmsg` (plaintext connections, `batch_sockets`),
  the batches sent from their fetch buffers without a copy.
"""

from __future__ import annotations


class Frame:
    """An answer's bytes in a reused buffer (`batch_sockets`'s frame pool): `view` is exactly the
    answer; `tell`/`seek` as kafka-python's `KafkaBytes`, which the decoders read otherwise."""

    __slots__ = ("_pos", "view")

    def __init__(self, view: memoryview) -> None:
        self.view, self._pos = view, 0

    def tell(self) -> int:
        return self._pos

    def seek(self, pos: int) -> None:
        self._pos = pos

    def __len__(self) -> int:
        return len(self.view)


class BufferPool:
    """Reused buffers of up to `capacity` bytes, at most `count`: `take` hands out a view of one
    that no view is alive of any more (a fresh buffer is zero-filled and page-faulted in every
    time: for 4 MiB answers and requests that was about a third of the copy's CPU,
    docs/performance.md). A buffer is as large as the frames asked of it, in `GRAIN` steps: fetch
    answers and produce requests run ~2 MiB, and a buffer of the full capacity faulted in twice
    the pages (and kept twice the memory) for nothing."""

    GRAIN = 256 * 1024

    def __init__(self, capacity: int, count: int) -> None:
        self.capacity, self.count = capacity, count
        self.buffers: list[bytearray] = []

    def take(self, size: int) -> memoryview | None:
        """A view of exactly `size` bytes of a free buffer (its old bytes), or None: too large,
        or every buffer still in use. A free buffer too small for `size` is replaced by a larger
        one where no free buffer is large enough."""
        if size > self.capacity:
            return None
        small = None
        for index, buffer in enumerate(self.buffers):
            if _unreferenced(buffer):
                if len(buffer) >= size:
                    return memoryview(buffer)[:size]
                small = index if small is None else small
        if small is None and len(self.buffers) == self.count:
            return None
        fresh = bytearray(min(self.capacity, -(-size // self.GRAIN) * self.GRAIN))
        if small is None:
            self.buffers.append(fresh)
        else:
            self.buffers[small] = fresh
        return memoryview(fresh)[:size]


def _unreferenced(buffer: bytearray) -> bool:
    """Whether no view of `buffer` is alive (a bytearray with exports cannot be resized)."""
    try:
        buffer.append(0)
    except BufferError:
        return False
    del buffer[-1]
    return True


class Gather:
    """A request's bytes as pieces that one `socket.sendmsg` sends (plaintext connections of the
    batch path, `batch_sockets`): the batches go from their fetch buffers to the socket without a copy
    into a request buffer. `advance` drops what a (partial) send took."""

    __slots__ = ("pieces",)

    def __init__(self, pieces: list[bytes | memoryview]) -> None:
        self.pieces = pieces

    def __len__(self) -> int:
        return sum(len(p) for p in self.pieces)

    def advance(self, sent: int) -> None:
        pieces, done = self.pieces, 0
        while done < len(pieces) and sent >= len(pieces[done]):
            sent -= len(pieces[done])
            done += 1
        del pieces[:done]
        if sent:
            pieces[0] = memoryview(pieces[0])[sent:]
