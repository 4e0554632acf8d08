"""TAGC-2 on torch.distributed: what the DDP hook (gradcomp.ddp) and the sharded-training
reduce-scatter (gradcomp.fsdp) share.

TAGC runs two phases per step (docs/tagc.md): the kept-position bitmap, reduced with a bitwise
OR (``dist.ReduceOp.BOR`` on int32 words, which gloo supports; NCCL has no OR, so there the
``bitmap="sum_safe"`` packing, reduced with SUM), then the count sketch's cells, reduced with
SUM (all-reduce or reduce-scatter; bfloat16 or float32 cells). The second phase's
size depends on the union that the first returns, so the first is waited for before the second
is issued; both are issued in the caller's thread, in the same order on every rank.

Checkpoints: ``state_dict()`` is a collective that gathers every rank's TAGC checkpoint bytes
(residual, per-shard thresholds, step, sampling key; CRC-checked by the library) so that rank 0
can ``torch.save`` one file; ``load_state_dict()`` restores each rank's own row exactly, or,
at another world size, runs the library's elastic restore (the residuals' sum over ranks,
re-sliced by the new shards).
"""

import torch
import torch.distributed as dist

from ._core import Tagc
from ._gather import gather_blobs

_FORMAT = 1
_CELLS = {"bf16": torch.bfloat16, "fp32": torch.float32}


def bitmap_op(codec):
    """The reduction of phase 0: BOR for the 1-bit bitmap, SUM for the sum-safe packing."""
    return dist.ReduceOp.BOR if codec.config["bitmap"] == "or" else dist.ReduceOp.SUM


def cell_dtype(codec):
    return _CELLS[codec.config["cells"]]


class TagcStates:
    """A TAGC codec and named per-buffer states, with collective checkpoints."""

    def __init__(self, preset="default", process_group=None, **config):
        self.preset = preset
        self.options = dict(config)
        self.codec = Tagc(preset, **config)
        self.process_group = process_group
        self.states = {}  # name -> PhaseState
        self.bitmap_op = bitmap_op(self.codec)
        self.cell_dtype = cell_dtype(self.codec)
        self.bytes_sent = 0  # bytes of the buffers this rank handed to the collectives, all steps
        self.items = 0  # union items this rank decoded, all steps
        self.peeled = 0  # of which peeled

    def world(self) -> int:
        return dist.get_world_size(self.process_group)

    def rank(self) -> int:
        return dist.get_rank(self.process_group)

    def peel_fraction(self) -> float:
        return self.peeled / self.items if self.items else 1.0

    def count(self, st):
        items, peeled, _ = st.stats
        self.items += items
        self.peeled += peeled

    def state_dict(self) -> dict:
        """Every rank's TAGC checkpoints (a collective over the process group)."""
        out = gather_blobs({n: self.codec.checkpoint(st) for n, st in self.states.items()}, self.process_group)
        return {"format": _FORMAT, "codec": "tagc", "identity": self.codec.identity, "world_size": self.world(), "states": out}

    def load_state_dict(self, sd: dict) -> None:
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
        rows, old = sd["states"][name], sd["world_size"]
        if old == self.world():
            self.codec.load_checkpoint(st, rows[self.rank()].numpy().tobytes())
        else:
            self.codec.restore_elastic(st, [rows[r].numpy().tobytes() for r in range(old)])
