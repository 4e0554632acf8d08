"""The checkpoint files of :mod:`gradcomp.restart`: their names, the 48-byte header, the checks
of :func:`verify` and :func:`load`, and the atomic write."""

from __future__ import annotations

import io
import os
import re
import struct
import sys

import torch

from .._core import Error, crc32c

MAGIC = b"GCRESUME"
FORMAT = 1
HEADER_BYTES = 48
_HEAD = struct.Struct("<8sIIIIQQ")  # magic, format, rank, world, header bytes, step, payload bytes: 40 bytes
_NAME = re.compile(r"^ckpt-(\d{9,})-(\d{5,})-of-(\d{5,})\.gcckpt$")
_TEMP = re.compile(r"^\.ckpt-(\d{9,})-(\d{5,})-of-(\d{5,})\.gcckpt\.tmp\d+$")


class CheckpointError(Error):
    """A checkpoint file that failed verification (a :class:`gradcomp.Error`).

    Attributes:
        code (str): ``"truncated"`` (shorter than its header or its header's length),
            ``"bad_magic"``, ``"unsupported_version"``, ``"bad_header"`` (impossible fields, or
            fields that disagree with the file's name), ``"size_mismatch"`` (bytes after the
            payload) or ``"checksum_mismatch"`` (the CRC32C differs).
        path (str): the file.
    """

    def __init__(self, path: str, code: str, detail: str) -> None:
        super().__init__(f"{code}: gradcomp checkpoint {path}: {detail}")
        self.code = code
        self.path = path
        self.detail = detail



def file_name(step: int, rank: int, world: int) -> str:
    """The checkpoint file name of ``rank`` of ``world`` after ``step`` steps."""
    return f"ckpt-{step:09d}-{rank:05d}-of-{world:05d}.gcckpt"


def _parse(name: str):
    m = _NAME.match(name)
    return tuple(int(g) for g in m.groups()) if m else None


def _header(step: int, rank: int, world: int, payload: bytes) -> bytes:
    head = _HEAD.pack(MAGIC, FORMAT, rank, world, HEADER_BYTES, step, len(payload))
    crc = crc32c(payload, crc32c(head))
    return head + struct.pack("<II", crc, 0)


def _check(path: str, data: bytes) -> dict:
    """Verifies a checkpoint file's bytes; returns its header fields and payload."""
    if len(data) < HEADER_BYTES:
        raise CheckpointError(path, "truncated", f"{len(data)} bytes, shorter than the {HEADER_BYTES}-byte header")
    magic, fmt, rank, world, hbytes, step, length = _HEAD.unpack_from(data)
    crc, zero = struct.unpack_from("<II", data, _HEAD.size)
    if magic != MAGIC:
        raise CheckpointError(path, "bad_magic", f"magic {magic!r}, not {MAGIC!r}")
    if fmt != FORMAT:
        raise CheckpointError(path, "unsupported_version", f"format {fmt}; this gradcomp reads format {FORMAT}")
    if hbytes != HEADER_BYTES or zero != 0 or world == 0 or rank >= world:
        raise CheckpointError(path, "bad_header", f"header bytes {hbytes}, rank {rank} of {world}")
    if len(data) < HEADER_BYTES + length:
        raise CheckpointError(path, "truncated", f"{len(data)} bytes, the header says {HEADER_BYTES + length}")
    if len(data) > HEADER_BYTES + length:
        raise CheckpointError(path, "size_mismatch", f"{len(data)} bytes, the header says {HEADER_BYTES + length}")
    payload = data[HEADER_BYTES:]
    got = crc32c(payload, crc32c(data[:_HEAD.size]))
    if got != crc:
        raise CheckpointError(path, "checksum_mismatch", f"CRC32C {got:#010x}, the header says {crc:#010x}")
    named = _parse(os.path.basename(path))
    if named is not None and named != (step, rank, world):
        raise CheckpointError(path, "bad_header", f"the header says step {step}, rank {rank} of {world}; the name "
                              f"step {named[0]}, rank {named[1]} of {named[2]}")
    return {"step": step, "rank": rank, "world": world, "bytes": len(data), "payload": payload}


def verify(path: str) -> dict:
    """Verifies one checkpoint file: its magic, format, header fields, length and CRC32C.

    Args:
        path (str): the file.

    Returns:
        dict: ``step``, ``rank``, ``world`` and ``bytes`` (the file's size).

    Raises:
        CheckpointError: the file failed verification (``.code`` says how).
        OSError: the file cannot be read.
    """
    with open(path, "rb") as f:
        info = _check(path, f.read())
    del info["payload"]
    return info


def load(path: str, weights_only: bool = True) -> dict:
    """Verifies a checkpoint file and returns its content.

    Args:
        path (str): the file.
        weights_only (bool): ``torch.load``'s (default True: tensors, numbers, strings and
            containers only; the states gradcomp, torch modules and optimizers return load so).

    Returns:
        dict: ``format``, ``step``, ``rank``, ``world``, ``states`` (name -> the object's
        ``state_dict()``) and ``rng`` (the random number generators' states, or None).

    Raises:
        CheckpointError: the file failed verification.
    """
    with open(path, "rb") as f:
        info = _check(path, f.read())
    return torch.load(io.BytesIO(info["payload"]), weights_only=weights_only)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_atomically(path: str, head: bytes, payload: bytes) -> None:
    fault = sys.modules[__package__]._fault  # the tests' hook, gradcomp.restart._fault
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(head)
        half = len(payload) // 2
        f.write(payload[:half])
        if fault is not None:
            f.flush()
            fault("partial", tmp)
        f.write(payload[half:])
        f.flush()
        os.fsync(f.fileno())
    if fault is not None:
        fault("written", tmp)
    os.replace(tmp, path)
    _fsync_dir(directory)

