"""CRC32C for the batch path (`kmirror_engine.copying.batch_wire`): of a whole view (over cache-sized
copies), and updated for changed leading bytes without reading the rest (`crc_update`), which is
how a rewritten batch keeps its source's CRC check.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence

import google_crc32c

# -- updating a CRC32C for changed bytes --------------------------------------------------------
# CRC32C is affine over GF(2): for messages a, b of one length, crc(a) ^ crc(b) = crc0(a ^ b), the
# CRC with zero initial value and no final xor. When a and b differ only in their first k bytes
# (the header fields the copy rewrites), a ^ b is those k bytes of difference and then zeros, and
# the CRC register after the zeros is the register after the k bytes shifted by the zeros: a
# linear map, kept here per power of two of zero bytes as four 256-entry tables (built on first
# use from the one-byte map). An update costs one table look-up per set bit of the zero count.

_POLY = 0x82F63B78  # CRC32C (Castagnoli), bit-reflected
_SHIFTS: list[tuple[list[int], list[int], list[int], list[int]]] = []  # [k]: 2**k zero bytes
_SHIFTS_LOCK = threading.Lock()


def _tables(columns: Sequence[int]) -> tuple[list[int], list[int], list[int], list[int]]:
    """A linear map of 32-bit registers, given by the images of its 32 unit bits, as four byte tables."""
    out = []
    for byte in range(4):
        table = [0] * 256
        for value in range(1, 256):
            low = value & -value
            table[value] = table[value ^ low] ^ columns[8 * byte + low.bit_length() - 1]
        out.append(table)
    return out[0], out[1], out[2], out[3]


def _apply(tables: tuple[list[int], list[int], list[int], list[int]], register: int) -> int:
    t0, t1, t2, t3 = tables
    return t0[register & 0xFF] ^ t1[(register >> 8) & 0xFF] ^ t2[(register >> 16) & 0xFF] ^ t3[register >> 24]


def _shift_table(k: int) -> tuple[list[int], list[int], list[int], list[int]]:
    """The map of the CRC register over 2**k zero bytes. Built under a lock: a task's copiers run
    on several threads, and two building the same table would append it twice, leaving every
    later table a power of two off (wrong CRCs the target refuses; seen in a Spark run)."""
    if k < len(_SHIFTS):
        return _SHIFTS[k]
    with _SHIFTS_LOCK:
        while len(_SHIFTS) <= k:
            if not _SHIFTS:
                columns = []
                for bit in range(32):
                    register = 1 << bit
                    for _ in range(8):
                        register = (register >> 1) ^ (_POLY if register & 1 else 0)
                    columns.append(register)
            else:
                half = _SHIFTS[-1]
                columns = [_apply(half, _apply(half, 1 << bit)) for bit in range(32)]
            _SHIFTS.append(_tables(columns))
    return _SHIFTS[k]


# Batches up to this size find their tables built by `build_crc_tables` (a larger one builds the rest).
CRC_TABLES_PREBUILT_BYTES = 8 * 1024 * 1024


def build_crc_tables(max_bytes: int = CRC_TABLES_PREBUILT_BYTES) -> int:
    """Build the shift tables for batches up to `max_bytes` now (~3 ms of CPU for 8 MiB), and
    return how many there are. Spark's worker daemon calls it once before it forks the task
    processes, which then inherit them instead of each building them on its first batches."""
    _shift_table(max_bytes.bit_length() - 1)
    return len(_SHIFTS)


def crc_shift(register: int, zeros: int) -> int:
    """The CRC register (zero initial value, no final xor) after `zeros` more zero bytes."""
    k = 0
    while zeros:
        if zeros & 1:
            register = _apply(_shift_table(k), register)
        zeros >>= 1
        k += 1
    return register


@functools.cache
def _zeros_crc(width: int) -> int:
    """CRC32C of `width` zero bytes: the part of a CRC that depends on the length alone."""
    return int(google_crc32c.value(bytes(width)))


def crc_update(crc: int, before: bytes, after: bytes, length: int) -> int:
    """The CRC32C of a `length`-byte message whose CRC was `crc` after its first bytes `before`
    were replaced by `after` (same length); the other bytes are not read."""
    if before == after:
        return crc
    width = len(before)
    diff = (int.from_bytes(before, "big") ^ int.from_bytes(after, "big")).to_bytes(width, "big")
    register = google_crc32c.value(diff) ^ _zeros_crc(width)  # crc0 of the difference
    return crc ^ crc_shift(register, length - width)


# google-crc32c reads bytes only (no views): the CRC is taken over copies of this many bytes at a
# time, which stay in the CPU's cache and in malloc's heap (a copy of a whole 1 MiB batch is a
# fresh mapping, page-faulted in each time). The `crc32c` package reads views, but its import
# scans every distribution on sys.path (importlib.metadata), pyspark.zip included: ~1 s of CPU
# per Spark Python worker.
CRC_CHUNK_BYTES = 64 * 1024


def crc32c(view: memoryview) -> int:
    """CRC32C (Castagnoli) of `view`."""
    crc = 0
    for at in range(0, len(view), CRC_CHUNK_BYTES):
        crc = google_crc32c.extend(crc, bytes(view[at : at + CRC_CHUNK_BYTES]))
    return crc
