"""TAGC-2 as the reduce-scatter of sharded training (FSDP2).

Example::

    >>> from torch.distributed.fsdp import fully_shard
    >>> for block in model.blocks:
    ...     fully_shard(block)
    >>> fully_shard(model)
    >>> tagc = gradcomp.fsdp.attach(model)   # every FSDP module's reduce-scatter runs TAGC
    >>> ...
    >>> ckpt["tagc"] = tagc.state_dict()     # a collective: every rank calls it

:func:`attach` uses FSDP2's public ``FSDPModule.set_custom_reduce_scatter``. FSDP2 calls the
object it is given as ``comm.allocate(size, dtype=..., device=...)`` and
``comm(output_tensor=..., input_tensor=..., group=..., op=...)``; :class:`TagcReduceScatter`
provides both methods and does not derive from torch's private ``ReduceScatter`` base class.

FSDP2 hands each module's gradients to the reduce-scatter as one flat buffer of W x shard
elements (rank r's shard at [r shard, (r + 1) shard)), which is exactly TAGC's shard layout
(summable::shard_of). Per call: x = buffer / W (for FSDP's AVG; SUM as it is), phase 0 (the
bitmap of the whole buffer) by ``dist.all_reduce`` with BOR (SUM for the sum-safe packing),
phase 1 (the sketch) by ``dist.reduce_scatter_tensor`` with SUM, and the library's peel decode
of this rank's cells into FSDP's output shard. Each FSDP module has its own TAGC state, made at
its first reduce-scatter and keyed by the module's name.

Limits: a checkpoint restores at the same world size only (the flat layout of another world
size pads and orders the parameters' shards differently, so residual positions would not
correspond); the whole flat buffer is sketched (FSDP does not tell the reduce-scatter which
parameter an element belongs to); ``async_op=True`` is not supported (FSDP2 does not ask for it).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.distributed as dist

from .tagc import TagcStates

_NEEDS = (f"gradcomp.fsdp needs FSDP2's public FSDPModule.set_custom_reduce_scatter "
          f"(torch.distributed.fsdp), which torch {torch.__version__} does not have (tested with torch 2.15)")
try:
    from torch.distributed.fsdp import FSDPModule
except ImportError as e:  # pragma: no cover - older torch
    raise ImportError(_NEEDS) from e
if not hasattr(FSDPModule, "set_custom_reduce_scatter"):  # pragma: no cover - older torch
    raise ImportError(_NEEDS)

__all__ = ["ShardedTagc", "TagcReduceScatter", "attach"]


class ShardedTagc(TagcStates):
    """TAGC states of every FSDP module of a model, with collective checkpoints.

    :func:`attach` makes one and gives each FSDP module a :class:`TagcReduceScatter` that
    shares it. A module's state is made at its first reduce-scatter (FSDP's flat buffer size is
    known then), keyed by the module's name (``"<root>"`` for the root).

    Args:
        preset (str): ``"default"``, ``"tagc2"`` or ``"v1"``, as for :func:`gradcomp.Tagc`.
        process_group (ProcessGroup, optional): the group :meth:`state_dict` gathers over
            (default: the world; the reduce-scatters use the group FSDP passes them).
        **config: :func:`gradcomp.Tagc`'s options.

    Raises:
        gradcomp.Error: an unknown preset or option, or an invalid value.
    """

    def __init__(self, preset: str = "default", process_group: Optional[dist.ProcessGroup] = None, **config) -> None:
        super().__init__(preset, process_group, **config)
        self._pending = None  # a loaded state_dict whose states are made at their first call

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores :meth:`state_dict`'s states, at the saved world size only.

        States that do not exist yet (no reduce-scatter has run) are restored when their
        module's first reduce-scatter makes them.

        Args:
            state_dict (dict): what :meth:`state_dict` returned.

        Raises:
            ValueError: an unknown format, another TAGC configuration, or another world size
                (FSDP's flat reduce-scatter layout differs between world sizes).
            gradcomp.Error: a corrupted checkpoint.
        """
        sd = state_dict
        self._check(sd)
        if sd["world_size"] != self.world():
            raise ValueError("gradcomp.fsdp: TAGC state saved at another world size; FSDP's flat reduce-scatter "
                             "layout differs between world sizes (restore_elastic applies to DDP's per-parameter states)")
        for name, st in self.states.items():
            self._restore(sd, name, st)
        self._pending = sd

    def state_of(self, name: str, n: int, group: dist.ProcessGroup):
        """The state of the module called ``name``, made (and restored from a loaded
        checkpoint) at its first call.

        Args:
            name (str): the module's name.
            n (int): the flat buffer's element count.
            group (ProcessGroup): the reduce-scatter's group (its size and this rank).

        Returns:
            gradcomp.PhaseState: the module's state.

        Raises:
            RuntimeError: the module's buffer changed size since its state was made.
        """
        st = self.states.get(name)
        if st is None:
            st = self.states[name] = self.codec.make_state(n, group.size(), group.rank())
            if self._pending is not None and name in self._pending["states"]:
                self._restore(self._pending, name, st)
        elif st.size != n:
            raise RuntimeError(f"gradcomp.fsdp: the reduce-scatter of {name!r} changed size ({st.size} -> {n})")
        return st


class TagcReduceScatter:
    """FSDP2's custom reduce-scatter running TAGC-2 for one FSDP module.

    Implements the interface ``FSDPModule.set_custom_reduce_scatter`` expects:
    :meth:`allocate` and :meth:`__call__`.

    Args:
        owner (ShardedTagc): the shared codec and states.
        name (str): the module's name (its state's key).
    """

    def __init__(self, owner: ShardedTagc, name: str) -> None:
        self.owner, self.name = owner, name

    def __repr__(self) -> str:
        st = self.owner.states.get(self.name)
        size = "not yet run" if st is None else f"{st.size} elements, step {st.step}"
        return f"TagcReduceScatter(name={self.name!r}, {size})"

    def allocate(self, size: Sequence[int], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A buffer for FSDP's reduce-scatter input or output (a plain ``torch.empty``)."""
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup,
                 op: dist.ReduceOp, async_op: bool = False) -> None:
        """Reduce-scatters ``input_tensor`` into ``output_tensor`` with TAGC.

        Args:
            output_tensor (torch.Tensor): this rank's shard (``input_tensor.numel() / W``
                elements), overwritten.
            input_tensor (torch.Tensor): the module's flat gradient buffer (W shards).
            group (ProcessGroup): the reduce-scatter's group.
            op (torch.distributed.ReduceOp): ``AVG`` or ``SUM``.
            async_op (bool): must be False.

        Returns:
            None: the collectives have completed when it returns.

        Raises:
            NotImplementedError: ``async_op=True``.
            ValueError: another reduction than AVG or SUM.
        """
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
    """Makes every FSDP2 module of ``model`` reduce-scatter its gradients with TAGC-2.

    Call it after ``fully_shard``; each module found by ``model.named_modules()`` that is an
    ``FSDPModule`` gets a :class:`TagcReduceScatter` through
    ``FSDPModule.set_custom_reduce_scatter``.

    Args:
        model (torch.nn.Module): a model with ``fully_shard`` applied (to it or to submodules).
        preset (str): ``"default"``, ``"tagc2"`` or ``"v1"``, as for :func:`gradcomp.Tagc`.
        **config: :func:`gradcomp.Tagc`'s options.

    Returns:
        ShardedTagc: the modules' shared state (statistics, checkpoints).

    Raises:
        ValueError: the model has no FSDP modules.
        gradcomp.Error: an unknown preset or option, or an invalid value.

    Example::

        >>> fully_shard(model)
        >>> tagc = gradcomp.fsdp.attach(model, "tagc2")
    """
    owner = ShardedTagc(preset, **config)
    found = 0
    for name, m in model.named_modules():
        if isinstance(m, FSDPModule):
            m.set_custom_reduce_scatter(TagcReduceScatter(owner, name or "<root>"))
            found += 1
    if not found:
        raise ValueError("gradcomp.fsdp.attach: the model has no fully_shard modules")
    return owner
