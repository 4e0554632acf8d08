"""TAGC-2 as the reduce-scatter of sharded training (FSDP2).

    from torch.distributed.fsdp import fully_shard
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    tagc = gradcomp.fsdp.attach(model)   # every FSDP module's reduce-scatter runs TAGC
    ...
    ckpt["tagc"] = tagc.state_dict()              # a collective: every rank calls it

FSDP2 hands each module's gradients to ``ReduceScatter.__call__`` as one flat buffer of
W x shard elements (rank r's shard at [r shard, (r + 1) shard)), which is exactly TAGC's shard
layout (summable::shard_of). Per call: x = buffer / W (for FSDP's AVG; SUM as it is), phase 0
(the bitmap of the whole buffer) by ``dist.all_reduce`` with BOR (SUM for the sum-safe
packing), phase 1 (the sketch) by ``dist.reduce_scatter_tensor`` with SUM, and the library's
peel decode of this rank's cells into FSDP's output shard. Each FSDP module has its own TAGC
state, made at its first reduce-scatter and keyed by the module's name.

Limits: a checkpoint restores at the same world size only (the flat layout of another world
size pads and orders the parameters' shards differently, so residual positions would not
correspond); the whole flat buffer is sketched (FSDP does not tell the reduce-scatter which
parameter an element belongs to); ``async_op=True`` is not supported (FSDP2 does not ask for it).
"""

import torch
import torch.distributed as dist

from .tagc import TagcStates

try:
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter
except ImportError as e:  # pragma: no cover - older torch
    raise ImportError("gradcomp.fsdp needs FSDP2's FSDPModule.set_custom_reduce_scatter (torch 2.7 or newer)") from e


class ShardedTagc(TagcStates):
    """TAGC states of every FSDP module of a model, with collective checkpoints."""

    def __init__(self, preset="default", process_group=None, **config):
        super().__init__(preset, process_group, **config)
        self._pending = None  # a loaded state_dict whose states are made at their first call
        self.calls = 0

    def load_state_dict(self, sd: dict) -> None:
        self._check(sd)
        if sd["world_size"] != self.world():
            raise ValueError("gradcomp.fsdp: TAGC state saved at another world size; FSDP's flat reduce-scatter "
                             "layout differs between world sizes (restore_elastic applies to DDP's per-parameter states)")
        for name, st in self.states.items():
            self._restore(sd, name, st)
        self._pending = sd

    def state_of(self, name: str, n: int, group) -> object:
        st = self.states.get(name)
        if st is None:
            st = self.states[name] = self.codec.make_state(n, group.size(), group.rank())
            if self._pending is not None and name in self._pending["states"]:
                self._restore(self._pending, name, st)
        elif st.size != n:
            raise RuntimeError(f"gradcomp.fsdp: the reduce-scatter of {name!r} changed size ({st.size} -> {n})")
        return st


class TagcReduceScatter(ReduceScatter):
    """FSDP2's custom reduce-scatter running TAGC-2 for one FSDP module."""

    def __init__(self, owner: ShardedTagc, name: str):
        self.owner, self.name = owner, name

    def allocate(self, size, *, dtype, device):
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
        if async_op:
            raise NotImplementedError("gradcomp.fsdp: asynchronous reduce-scatter")
        o, c, world = self.owner, self.owner.codec, group.size()
        if op == dist.ReduceOp.AVG:
            scale = 1.0 / world
        elif op == dist.ReduceOp.SUM:
            scale = 1.0
        else:
            raise ValueError(f"gradcomp.fsdp: reduce-scatter with {op} (AVG or SUM expected)")
        o.calls += 1
        x = input_tensor.view(-1).float()  # FSDP's scratch buffer (a copy if not float32)
        if scale != 1.0:
            x.mul_(scale)  # the codec sums averages; residuals are in the average's units
        st = o.state_of(self.name, x.numel(), group)
        bits = torch.empty(c.describe(0, st)["count"], dtype=torch.int32)
        c.encode(0, x, st, bits)
        dist.all_reduce(bits, op=o.bitmap_op, group=group)
        c.receive(0, st, bits)
        p1 = c.describe(1, st)
        cells = torch.empty(p1["count"], dtype=o.cell_dtype)
        c.encode(1, x, st, cells)
        mine = torch.empty(p1["shard_count"], dtype=o.cell_dtype)
        dist.reduce_scatter_tensor(mine, cells, group=group)
        out = output_tensor.view(-1)
        dec = out if out.dtype == torch.float32 else torch.empty(out.numel())
        c.receive(1, st, mine, dec)
        c.finish_step(st)
        o.count(st)
        if dec is not out:
            out.copy_(dec)
        o.bytes_sent += bits.numel() * 4 + cells.numel() * cells.element_size()
        return None


def attach(model: torch.nn.Module, preset: str = "default", **config) -> ShardedTagc:
    """Sets a TAGC reduce-scatter on every FSDP2 module of model; returns their shared state."""
    owner = ShardedTagc(preset, **config)
    found = 0
    for name, m in model.named_modules():
        if isinstance(m, FSDPModule):
            m.set_custom_reduce_scatter(TagcReduceScatter(owner, name or "<root>"))
            found += 1
    if not found:
        raise ValueError("gradcomp.fsdp.attach: the model has no fully_shard modules")
    return owner
