"""TAGC-2 on torch.distributed: what the DDP hook (:func:`gradcomp.ddp.tagc_hook`) and the
sharded-training reduce-scatter (:func:`gradcomp.fsdp.attach`) share.

TAGC runs two phases per step (docs/tagc.md): the kept-position bitmap, reduced with a bitwise
OR (``dist.ReduceOp.BOR`` on int32 words, which gloo supports; NCCL has no OR, so on a group
whose backend includes NCCL the ``bitmap="sum_safe"`` packing, reduced with SUM, is the
default), then the count sketch's cells, reduced with
SUM (all-reduce or reduce-scatter; bfloat16 or float32 cells). The second phase's
size depends on the union that the first returns, so the first is waited for before the second
is issued; both are issued in the caller's thread, in the same order on every rank.

Checkpoints: ``state_dict()`` is a collective that gathers every rank's TAGC checkpoint bytes
(residual, per-shard thresholds, step, sampling key; CRC-checked by the library) so that rank 0
can ``torch.save`` one file; ``load_state_dict()`` restores each rank's own row exactly, or,
at another world size, runs the library's elastic restore (the residuals' sum over ranks,
re-sliced by the new shards).
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from ._core import PhaseCodec, PhaseState, Tagc
from ._checkpoint import GroupMember, gather_blobs, restore_rows

_FORMAT = 1
_CELLS = {"bf16": torch.bfloat16, "fp32": torch.float32}


__all__ = ["TagcStates", "bitmap_for_backend", "bitmap_op", "cell_dtype"]


def bitmap_for_backend(backend: str, config: dict) -> dict:
    """TAGC options with the bitmap packing the backend can reduce.

    Args:
        backend (str): the process group's backend (``dist.get_backend(group)``: ``"gloo"``,
            ``"nccl"``, ``"cpu:gloo,cuda:nccl"``, ...).
        config (dict): :func:`gradcomp.Tagc`'s options as given.

    Returns:
        dict: ``config`` with ``bitmap="sum_safe"`` when the backend includes NCCL (it has no
        bitwise OR) and none was given; otherwise ``config`` unchanged (the codec's default,
        ``"or"``, suits gloo and MPI).

    Raises:
        ValueError: ``bitmap="or"`` given for a backend with NCCL.
    """
    if "nccl" not in str(backend).lower():
        return dict(config)
    if config.get("bitmap", "sum_safe") != "sum_safe":
        raise ValueError("gradcomp TAGC: NCCL has no bitwise OR; use bitmap='sum_safe' (the default on NCCL)")
    return {**config, "bitmap": "sum_safe"}


def bitmap_op(codec: PhaseCodec) -> dist.ReduceOp:
    """The reduction of TAGC's phase 0 for ``torch.distributed``.

    Args:
        codec (gradcomp.PhaseCodec): a TAGC codec (:func:`gradcomp.Tagc`).

    Returns:
        torch.distributed.ReduceOp: ``BOR`` for the 1-bit bitmap (``bitmap="or"``), ``SUM`` for
        the sum-safe packing.
    """
    return dist.ReduceOp.BOR if codec.config["bitmap"] == "or" else dist.ReduceOp.SUM


def cell_dtype(codec: PhaseCodec) -> torch.dtype:
    """The torch dtype of TAGC's sketch cells (phase 1).

    Args:
        codec (gradcomp.PhaseCodec): a TAGC codec (:func:`gradcomp.Tagc`).

    Returns:
        torch.dtype: ``torch.bfloat16`` (``cells="bf16"``) or ``torch.float32``.
    """
    return _CELLS[codec.config["cells"]]


class TagcStates(GroupMember):
    """A TAGC codec and named per-buffer states, with collective checkpoints.

    The base of :class:`gradcomp.ddp.TagcHookState` (one state per parameter) and
    :class:`gradcomp.fsdp.ShardedTagc` (one state per FSDP module).

    Args:
        preset (str): ``"default"``, ``"tagc2"`` or ``"v1"``, as for :func:`gradcomp.Tagc`.
        process_group (ProcessGroup, optional): the group the states belong to (default: the
            world).
        **config: :func:`gradcomp.Tagc`'s options.

    Attributes:
        codec (gradcomp.PhaseCodec): the TAGC codec.
        states (dict[str, gradcomp.PhaseState]): the named states.
        bitmap_op (torch.distributed.ReduceOp): phase 0's reduction (:func:`bitmap_op`).
        cell_dtype (torch.dtype): phase 1's cell type (:func:`cell_dtype`).
        bytes_sent (int): bytes of the buffers this rank handed to the collectives, all steps.
        items (int): union items this rank decoded, all steps (CPU states: :meth:`count`).
        peeled (int): of which peeled.
        calls (int): hook or reduce-scatter calls, all steps.
    """

    def __init__(self, preset: str = "default", process_group: Optional[dist.ProcessGroup] = None, **config) -> None:
        self.preset = preset
        self.options = dict(config)
        backend = dist.get_backend(process_group) if dist.is_initialized() else ""
        self.codec = Tagc(preset, **bitmap_for_backend(backend, config))
        self.process_group = process_group
        self.states = {}  # name -> PhaseState
        self.bitmap_op = bitmap_op(self.codec)
        self.cell_dtype = cell_dtype(self.codec)
        self.bytes_sent = 0  # bytes of the buffers this rank handed to the collectives, all steps
        self.items = 0  # union items this rank decoded, all steps
        self.peeled = 0  # of which peeled
        self.calls = 0  # buckets (DDP) or reduce-scatters (FSDP) run, all steps

    def __repr__(self) -> str:
        cfg = self.codec.config
        key = ", ".join(f"{k}={cfg[k]!r}" for k in ("density", "sizing", "block", "bitmap", "cells"))
        numel = sum(st.size for st in self.states.values())
        return (f"{type(self).__name__}(preset={self.preset!r}, {key}, states={len(self.states)} / {numel} elements, "
                f"calls={self.calls}, bytes_sent={self.bytes_sent}, peeled={self.peel_fraction():.4f})")

    def peel_fraction(self) -> float:
        """The share of the decoded union items that peeled, all steps (1.0 before any)."""
        return self.peeled / self.items if self.items else 1.0

    def count(self, state: PhaseState) -> None:
        """Adds a CPU state's last decode statistics (``state.stats``) to :attr:`items` and
        :attr:`peeled`. A CUDA state's are not counted, since reading them waits for the device
        (read ``state.stats`` when needed)."""
        if state.device != "cpu":
            return
        items, peeled, _ = state.stats
        self.items += items
        self.peeled += peeled

    def state_dict(self) -> dict:
        """Every rank's TAGC checkpoints, for one checkpoint file.

        A collective over the process group: every rank calls it and gets the same dict.

        Returns:
            dict: ``format``, ``codec`` (``"tagc"``), ``identity`` (the configuration's
            fingerprint), ``world_size`` and ``states`` (name -> uint8 tensor
            ``[world_size, checkpoint bytes]``: residual, per-shard thresholds, step, sampling
            key; CRC32C-checked by the library).
        """
        self.codec.check()
        out = gather_blobs({n: self.codec.checkpoint(st) for n, st in self.states.items()}, self.process_group)
        return {"format": _FORMAT, "codec": "tagc", "identity": self.codec.identity, "world_size": self.world(), "states": out}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores :meth:`state_dict`'s states.

        At the saved world size each rank takes its own row, exactly; at another it runs the
        library's elastic restore (``PhaseCodec.restore_elastic``: the residuals' sum over ranks
        is kept, re-sliced by the new shards).

        Args:
            state_dict (dict): what :meth:`state_dict` returned.

        Raises:
            ValueError: an unknown format, another TAGC configuration, or other names.
            gradcomp.Error: a corrupted checkpoint (``code == "checksum_mismatch"``, ...).
        """
        sd = state_dict
        self._check(sd)
        if set(sd["states"]) != set(self.states):
            raise ValueError("gradcomp TAGC state: the compressed buffers differ from this model's")
        for name, st in self.states.items():
            self._restore(sd, name, st)

    def _check(self, sd: dict) -> None:
        if sd.get("format") != _FORMAT or sd.get("codec") != "tagc":
            raise ValueError("gradcomp TAGC state: unknown format")
        if sd["identity"] != self.codec.identity:
            raise ValueError("gradcomp TAGC state was made with another TAGC configuration")

    def _restore(self, sd: dict, name: str, st) -> None:
        restore_rows(self.codec, st, sd["states"][name], sd["world_size"], self.world(), self.rank())
