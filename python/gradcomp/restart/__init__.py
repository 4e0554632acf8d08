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

from typing import Callable, Optional

from .checkpointer import Checkpointer, CheckpointWarning
from .files import FORMAT, HEADER_BYTES, MAGIC, CheckpointError, file_name, load, verify  # the format's constants too
from .states import ModelState

__all__ = ["CheckpointError", "CheckpointWarning", "Checkpointer", "ModelState", "file_name", "load", "verify"]

# Test hook: called as _fault(stage, path) at "partial" (half the file written) and "written"
# (the temporary file complete and fsynced, not yet renamed); the tests kill the process there.
_fault: Optional[Callable[[str, str], None]] = None
