"""Restart after a failure: checkpoints every N steps from every rank, written atomically and
checksummed, and a resume from the newest checkpoint that every rank verifies.

A :class:`Checkpointer` holds the objects a resumed run needs (the model, the optimizer, every
gradcomp hook or reduce-scatter state: anything with ``state_dict()`` and
``load_state_dict()``) and saves them, with the step and the random number generators' states,
into one file per rank and step::

    >>> ckpt = gradcomp.restart.Checkpointer("ckpt", {"model": net, "optimizer": opt, "hook": hook}, every=50)
    >>> start = ckpt.resume()            # 0, or the step of the newest checkpoint every rank verified
    >>> for step in range(start, steps):
    ...     train_one_step(step)          # its data chosen by the step number
    ...     ckpt.maybe_save(step + 1)     # after every 50th step

**A file** (``ckpt-<step>-<rank>-of-<world>.gcckpt``, step and ranks zero-padded) is a 48-byte
header and the ``torch.save`` bytes of ``{"format", "step", "rank", "world", "states", "rng"}``.
The header, little-endian: the magic ``b"GCRESUME"``, u32 format (1), u32 rank, u32 world,
u32 header bytes (48), u64 step, u64 payload bytes, u32 CRC32C (:func:`gradcomp.crc32c`) of the
header's first 40 bytes followed by the payload, u32 zero. It is written to a temporary file in
the same directory, flushed and ``fsync``\\ ed, renamed over its final name, and the directory is
``fsync``\\ ed: a crash leaves the previous file or the new one, never a mix.

**Resuming** lists the directory, takes the steps for which every rank of some world size has a
file, and, newest first, verifies (magic, sizes, CRC) the file this rank would read; the ranks
agree on the newest step that every rank verified (an all-gather of each rank's newest good
step, repeated until they agree). A damaged file is skipped with a :class:`CheckpointWarning`
naming it and the reason. Files of steps newer than the one resumed (damaged or incomplete) are
removed, and each save keeps the newest ``keep`` complete steps.

**Another world size** (a restart with fewer or more ranks): rank r reads the file of saved rank
``r % saved_world``; the DDP hook states' ``load_state_dict`` takes every saved rank's codec
state from it (each file carries every rank's: their ``state_dict()`` gathers them) and runs the
elastic restore; random number generator states are restored only on ranks that existed before.
The FSDP reduce-scatter states refuse another world size (``ValueError``).

Works under ``torchrun --max-restarts=N`` (every restart reruns the script: ``resume()`` finds
the checkpoints; run torchrun with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1``, which gives each
attempt a rendezvous store of its own: with torch 2.15's shared store a restarted gloo group can
read the dead attempt's addresses and fail to connect), with any other launcher, and without
``torch.distributed`` (one process). docs/reliability.md in the repository has the tests.
"""

from __future__ import annotations

import io
import os
import random
import re
import struct
import sys
import warnings
from typing import Callable, Dict, List, Mapping, Optional, Tuple

import torch
import torch.distributed as dist

from ._core import Error, crc32c

__all__ = ["CheckpointError", "CheckpointWarning", "Checkpointer", "ModelState", "file_name", "load", "verify"]

MAGIC = b"GCRESUME"
FORMAT = 1
HEADER_BYTES = 48
_HEAD = struct.Struct("<8sIIIIQQ")  # magic, format, rank, world, header bytes, step, payload bytes: 40 bytes
_NAME = re.compile(r"^ckpt-(\d{9,})-(\d{5,})-of-(\d{5,})\.gcckpt$")
_TEMP = re.compile(r"^\.ckpt-(\d{9,})-(\d{5,})-of-(\d{5,})\.gcckpt\.tmp\d+$")

_SHARED_STORE = (
    "gradcomp.restart: torchrun shares its rendezvous store with the workers (TORCHELASTIC_USE_AGENT_STORE=True) "
    "and keeps it across restarts, so a restarted worker group can read the previous attempt's addresses from it "
    "and fail to connect (gloo: 'connectFullMesh failed ... Connection refused'); run torchrun with "
    "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1")

# Test hook: called as _fault(stage, path) at "partial" (half the file written) and "written"
# (the temporary file complete and fsynced, not yet renamed); the tests kill the process there.
_fault: Optional[Callable[[str, str], None]] = None


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


class CheckpointWarning(UserWarning):
    """A checkpoint that :meth:`Checkpointer.resume` skipped (damaged, or missing some rank's
    file); the message names the file and the reason."""


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
    directory, name = os.path.split(path)
    tmp = os.path.join(directory, f".{name}.tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(head)
        half = len(payload) // 2
        f.write(payload[:half])
        if _fault is not None:
            f.flush()
            _fault("partial", tmp)
        f.write(payload[half:])
        f.flush()
        os.fsync(f.fileno())
    if _fault is not None:
        _fault("written", tmp)
    os.replace(tmp, path)
    _fsync_dir(directory)


def _rng_state() -> dict:
    out = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    np = sys.modules.get("numpy")
    if np is not None:
        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        out["numpy"] = (kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss), float(gauss))
    return out


def _set_rng_state(rng: dict) -> None:
    random.setstate(rng["python"])
    torch.set_rng_state(rng["torch"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    if "numpy" in rng:
        import numpy as np

        kind, keys, pos, has_gauss, gauss = rng["numpy"]
        np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))


class ModelState:
    """A model and its optimizer as one checkpointable object, through
    ``torch.distributed.checkpoint.state_dict``: full (unsharded) tensors, so FSDP2 models save
    and load on any rank (DDP and plain modules too).

    ``state_dict()`` is a collective for FSDP2 models (every rank calls it; a
    :class:`Checkpointer` does).

    Args:
        model (torch.nn.Module): the model (``fully_shard``\\ ed, DDP or plain).
        optimizer (torch.optim.Optimizer, optional): its optimizer.
    """

    def __init__(self, model: torch.nn.Module, optimizer: Optional[torch.optim.Optimizer] = None) -> None:
        self.model = model
        self.optimizer = optimizer

    def state_dict(self) -> dict:
        """``{"model": ..., "optimizer": ...}``, full tensors (a collective for FSDP2)."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

        opts = StateDictOptions(full_state_dict=True)
        if self.optimizer is None:
            from torch.distributed.checkpoint.state_dict import get_model_state_dict

            return {"model": get_model_state_dict(self.model, options=opts), "optimizer": None}
        msd, osd = get_state_dict(self.model, self.optimizer, options=opts)
        return {"model": msd, "optimizer": osd}

    def load_state_dict(self, state_dict: dict) -> None:
        """Loads what :meth:`state_dict` returned into the model and the optimizer."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_state_dict

        opts = StateDictOptions(full_state_dict=True)
        if self.optimizer is None:
            set_model_state_dict(self.model, state_dict["model"], options=opts)
        else:
            set_state_dict(self.model, self.optimizer, model_state_dict=state_dict["model"],
                           optim_state_dict=state_dict["optimizer"], options=opts)


class Checkpointer:
    """Saves everything a resumed run needs every ``every`` steps, from every rank, and resumes
    from the newest checkpoint every rank verifies.

    Args:
        directory (str): where the files go (made if missing); every rank's files go to the
            same directory, shared or not.
        states (Mapping[str, object]): what to save, by name: anything with ``state_dict()``
            and ``load_state_dict()`` (modules, optimizers, :class:`ModelState`, the hook
            states of :mod:`gradcomp.ddp`, what :func:`gradcomp.fsdp.attach` returns, a
            learning-rate scheduler, a stateful sampler). They are saved and loaded in this
            order; the gradcomp states' ``state_dict()`` are collectives, which every rank
            runs in the same order.
        every (int): :meth:`maybe_save` saves after every ``every``-th step (default 100).
        keep (int | None): the complete steps kept (default 2; None keeps every one).
        rng (bool): also save and restore the random number generators: Python's ``random``,
            torch's CPU generator, CUDA's where it is initialised, NumPy's global one where
            NumPy is imported (default True).
        group (ProcessGroup, optional): the ranks that checkpoint together (default: the
            world; none without ``torch.distributed``).
        weights_only (bool): ``torch.load``'s when resuming (default True).

    Attributes:
        rank (int): this process's rank.
        world (int): the number of ranks.
        resumed_from (int | None): the step :meth:`resume` resumed from (None: none found).
        saved (int | None): the last step saved.

    The files are trusted input: the CRC32C finds damage, not tampering, and
    ``weights_only=False`` unpickles arbitrary objects.

    Example::

        >>> ckpt = Checkpointer("ckpt", {"model": net, "optimizer": opt, "hook": state}, every=50, keep=2)
        >>> start = ckpt.resume()
        >>> for step in range(start, steps):
        ...     train_one_step(step)
        ...     ckpt.maybe_save(step + 1)
    """

    def __init__(self, directory: str, states: Mapping[str, object], every: int = 100, keep: Optional[int] = 2,
                 rng: bool = True, group: Optional[dist.ProcessGroup] = None, weights_only: bool = True) -> None:
        if int(every) < 1:
            raise ValueError(f"gradcomp.restart.Checkpointer: every must be at least 1, not {every}")
        if keep is not None and int(keep) < 1:
            raise ValueError(f"gradcomp.restart.Checkpointer: keep must be at least 1 or None, not {keep}")
        for name, obj in states.items():
            if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))):
                raise TypeError(f"gradcomp.restart.Checkpointer: {name!r} ({type(obj).__name__}) has no "
                                "state_dict() and load_state_dict()")
        self.directory = os.fspath(directory)
        self.states = dict(states)
        self.every = int(every)
        self.keep = None if keep is None else int(keep)
        self.rng = bool(rng)
        self.group = group
        self.weights_only = bool(weights_only)
        self._dist = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank(group) if self._dist else 0
        self.world = dist.get_world_size(group) if self._dist else 1
        self.resumed_from: Optional[int] = None
        self.saved: Optional[int] = None
        if (self.rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
                and int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", "0") or 0) > 0):
            warnings.warn(_SHARED_STORE, RuntimeWarning, stacklevel=2)

    def __repr__(self) -> str:
        return (f"Checkpointer({self.directory!r}, states={list(self.states)}, every={self.every}, keep={self.keep}, "
                f"rank={self.rank} of {self.world}, resumed_from={self.resumed_from}, saved={self.saved})")

    # ---- files
    def path(self, step: int, rank: Optional[int] = None, world: Optional[int] = None) -> str:
        """The file of ``rank`` of ``world`` (default: this rank, this world size) after ``step``
        steps."""
        return os.path.join(self.directory, file_name(step, self.rank if rank is None else rank,
                                                      self.world if world is None else world))

    def _files(self) -> Dict[Tuple[int, int], set]:
        """(step, world) -> the ranks with a file."""
        out: Dict[Tuple[int, int], set] = {}
        for name in os.listdir(self.directory):
            p = _parse(name)
            if p is not None:
                out.setdefault((p[0], p[2]), set()).add(p[1])
        return out

    def _complete(self) -> Dict[int, int]:
        """step -> a world size whose every rank has a file of that step (this world size
        preferred)."""
        out: Dict[int, int] = {}
        for (step, world), ranks in self._files().items():
            if len(ranks) == world and (step not in out or world == self.world):
                out[step] = world
        return out

    # ---- collectives
    def _gather(self, value: int) -> List[int]:
        if not self._dist or self.world == 1:
            return [value]
        every: List[Optional[int]] = [None] * self.world
        dist.all_gather_object(every, value, group=self.group)
        return [int(v) for v in every]

    def _barrier(self) -> None:
        if self._dist and self.world > 1:
            dist.barrier(group=self.group)

    # ---- saving
    def maybe_save(self, step: int) -> bool:
        """Saves after every ``every``-th step: call it after each step with the number of steps
        done.

        Args:
            step (int): the steps done (the step the run resumes at from this checkpoint).

        Returns:
            bool: whether it saved.
        """
        if step > 0 and step % self.every == 0:
            self.save(step)
            return True
        return False

    def save(self, step: int) -> str:
        """Saves every state, the step and the random number generators' states into this
        rank's file for ``step``, atomically, then, once every rank has saved, removes the
        steps beyond the newest ``keep``.

        A collective: every rank calls it with the same step (the gradcomp states'
        ``state_dict()`` and a barrier).

        Args:
            step (int): the steps done.

        Returns:
            str: this rank's file.
        """
        step = int(step)
        os.makedirs(self.directory, exist_ok=True)
        content = {"format": FORMAT, "step": step, "rank": self.rank, "world": self.world,
                   "states": {name: obj.state_dict() for name, obj in self.states.items()},
                   "rng": _rng_state() if self.rng else None}
        buf = io.BytesIO()
        torch.save(content, buf)
        payload = buf.getvalue()
        path = self.path(step)
        _write_atomically(path, _header(step, self.rank, self.world, payload), payload)
        self._barrier()  # every rank's file is in place: older steps may go
        self.saved = step
        self._prune()
        return path

    def _remove(self, step: int, world: int, ranks) -> None:
        for r in ranks:
            if r % self.world == self.rank:  # each rank removes its share of the files
                try:
                    os.remove(os.path.join(self.directory, file_name(step, r, world)))
                except FileNotFoundError:
                    pass

    def _prune(self) -> None:
        if self.keep is None:
            return
        complete = sorted(self._complete(), reverse=True)
        if len(complete) < self.keep:
            return
        oldest_kept = complete[self.keep - 1]  # older ones go, complete or not
        for (step, world), ranks in self._files().items():
            if step < oldest_kept:
                self._remove(step, world, ranks)

    def _clean_temporaries(self) -> None:
        for name in os.listdir(self.directory):
            m = _TEMP.match(name)
            if m and int(m.group(2)) % self.world == self.rank:
                try:
                    os.remove(os.path.join(self.directory, name))
                except FileNotFoundError:
                    pass

    # ---- resuming
    def _verified(self, step: int, world: int, cache: dict):
        """This rank's source file of ``step`` (saved at ``world`` ranks), verified: its payload,
        or None (warned) when damaged."""
        if step not in cache:
            path = self.path(step, self.rank % world, world)
            try:
                with open(path, "rb") as f:
                    cache[step] = _check(path, f.read())["payload"]
            except CheckpointError as e:
                warnings.warn(f"gradcomp.restart: skipping {path}: {e.code}: {e.detail}", CheckpointWarning, stacklevel=3)
                cache[step] = None
            except OSError as e:
                warnings.warn(f"gradcomp.restart: skipping {path}: {e}", CheckpointWarning, stacklevel=3)
                cache[step] = None
        return cache[step]

    def resume(self) -> int:
        """Loads the newest checkpoint that every rank verifies into the states; returns its step
        (0 when there is none: a fresh start).

        A collective. Damaged files (and steps some rank's file is missing from) are skipped
        with a :class:`CheckpointWarning`; the ranks agree on one step. Files of newer steps
        are removed afterwards, as are temporary files a crash left behind.

        Returns:
            int: the step to continue at.

        Raises:
            KeyError: the checkpoint has no state of one of the given names.
            ValueError, gradcomp.Error: a state refused what was saved (another codec, another
                model; an FSDP reduce-scatter state saved at another world size).
            pickle.UnpicklingError: with ``weights_only=True``, a state holds objects other than
                tensors, numbers, strings and containers (pass ``weights_only=False``).
        """
        os.makedirs(self.directory, exist_ok=True)
        self._clean_temporaries()
        files = self._files()
        complete = self._complete()
        if self.rank == 0:
            newest = max(complete, default=-1)
            for (step, world), ranks in sorted(files.items()):
                if step > newest and len(ranks) < world:
                    missing = sorted(set(range(world)) - ranks)
                    warnings.warn(f"gradcomp.restart: skipping step {step} in {self.directory}: no file of rank(s) "
                                  f"{missing} of {world} (a crash while saving)", CheckpointWarning, stacklevel=2)
        cache: dict = {}
        limit = None
        while True:
            mine = -1
            for step in sorted(complete, reverse=True):
                if limit is not None and step > limit:
                    continue
                if self._verified(step, complete[step], cache) is not None:
                    mine = step
                    break
            every = self._gather(mine)
            agreed = min(every)
            if agreed == max(every):
                break
            limit = agreed
        if agreed >= 0:
            content = torch.load(io.BytesIO(cache[agreed]), weights_only=self.weights_only)
            saved_world = content["world"]
            for name, obj in self.states.items():
                if name not in content["states"]:
                    raise KeyError(f"gradcomp.restart: {self.path(agreed, self.rank % saved_world, saved_world)} has "
                                   f"no state {name!r} (it has {sorted(content['states'])})")
                obj.load_state_dict(content["states"][name])
            if self.rng and content.get("rng") is not None and self.rank < saved_world:
                _set_rng_state(content["rng"])
        # Newer steps are damaged or incomplete: they go, so that no later listing mixes them
        # with this run's files.
        for (step, world), ranks in files.items():
            if step > agreed:
                self._remove(step, world, ranks)
        self._barrier()
        self.resumed_from = agreed if agreed >= 0 else None
        return max(agreed, 0)
