"""Any gradcomp codec, or TAGC-2, as the reduce-scatter of sharded training (FSDP2).

Example::

    >>> from torch.distributed.fsdp import fully_shard
    >>> for block in model.blocks:
    ...     fully_shard(block)
    >>> fully_shard(model)
    >>> rs = gradcomp.fsdp.attach(model, "int8")   # every FSDP module's reduce-scatter runs int8
    >>> ...
    >>> ckpt["reduce_scatter"] = rs.state_dict()   # a collective: every rank calls it

:func:`attach` uses FSDP2's public ``FSDPModule.set_custom_reduce_scatter``. FSDP2 calls the
object it is given as ``comm.allocate(size, dtype=..., device=...)`` and
``comm(output_tensor=..., input_tensor=..., group=..., op=...)``; :class:`CodecReduceScatter`
and :class:`TagcReduceScatter` provide both methods (from one base class of this module) and do
not derive from torch's private ``ReduceScatter`` base class.

FSDP2 hands each module's gradients to the reduce-scatter as one flat buffer of W x shard
elements (rank r's shard at [r shard, (r + 1) shard)), which is the shard layout of the
library's sharded path and of TAGC (summable::shard_of). Per call, x = buffer / W (for FSDP's
AVG; SUM as it is; PREMUL_SUM, which FSDP passes after ``set_gradient_divide_factor``, times its
factor; any other reduction raises ValueError), in float32 (a bfloat16 buffer is widened first), then:

* any codec of :func:`gradcomp.codecs` (:class:`ShardedCodec`: :class:`gradcomp.Sharded` in
  reduce-scatter mode): each rank compresses shard j of x into a slot for rank j; one
  ``dist.all_to_all_single`` delivers every rank's slots; the rank checks its W slots, sums
  them in fp32 in rank order and writes the sum into FSDP's output shard (rounded to its
  dtype, e.g. bfloat16). A rank sends (W - 1) slots of one shard's payload: about (W - 1) / W
  of one payload of the module, as a ring reduce-scatter does.
* TAGC (:class:`ShardedTagc`): phase 0 (the bitmap of the whole buffer) by
  ``dist.all_reduce`` with BOR (SUM for the sum-safe packing), phase 1 (the sketch) by
  ``dist.reduce_scatter_tensor`` with SUM, and the library's peel decode of this rank's cells
  into FSDP's output shard.

Each FSDP module has its own state (error-feedback residuals), made at its first
reduce-scatter and keyed by the module's name.

Limits: a checkpoint restores at the same world size only (the flat layout of another world
size pads and orders the parameters' shards differently, so residual positions would not
correspond); the whole flat buffer is compressed as one gradient (FSDP does not tell the
reduce-scatter which parameter an element belongs to); ``async_op=True`` is not supported
(FSDP2 does not ask for it).
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.distributed as dist

from ._core import Sharded
from ._checkpoint import GroupMember, gather_blobs, restore_rows
from .tagc import TagcStates

_NEEDS = (f"gradcomp.fsdp needs FSDP2's public FSDPModule.set_custom_reduce_scatter "
          f"(torch.distributed.fsdp), which torch {torch.__version__} does not have (tested with torch 2.15)")
try:
    from torch.distributed.fsdp import FSDPModule
except ImportError as e:  # pragma: no cover - older torch
    raise ImportError(_NEEDS) from e
if not hasattr(FSDPModule, "set_custom_reduce_scatter"):  # pragma: no cover - older torch
    raise ImportError(_NEEDS)

__all__ = ["CodecReduceScatter", "ShardedCodec", "ShardedTagc", "TagcReduceScatter", "attach"]

_FORMAT = 1


def _scale(op: dist.ReduceOp, world: int) -> float:
    """FSDP's reduction as the factor applied before encoding: AVG 1 / W, SUM 1, PREMUL_SUM its
    factor (FSDP passes ``PREMUL_SUM(1 / factor)`` after ``set_gradient_divide_factor(factor)``,
    which torchtitan calls with 1.0)."""
    if op == dist.ReduceOp.AVG:
        return 1.0 / world
    if op == dist.ReduceOp.SUM:
        return 1.0
    if op == dist.ReduceOp.PREMUL_SUM and isinstance(op, dist.ReduceOp):
        factor = op.factor  # a float, or a one-element tensor
        return float(factor.item() if isinstance(factor, torch.Tensor) else factor)
    raise ValueError(f"gradcomp.fsdp: reduce-scatter with {_op_name(op)}: only AVG, SUM and PREMUL_SUM (FSDP's "
                     f"gradient divide factor) can be applied before encoding")


def _op_name(op) -> str:
    return str(getattr(op, "op", op))


class _ModuleStates(GroupMember):
    """What :class:`ShardedCodec` and :class:`ShardedTagc` share: one state per FSDP module,
    made at its first reduce-scatter, and checkpoints restored at the saved world size only."""

    _pending = None  # a loaded state_dict whose states are made at their first call

    def _make_state(self, n: int, group: dist.ProcessGroup, cuda: Optional[torch.device]):
        raise NotImplementedError

    def state_of(self, name: str, n: int, group: dist.ProcessGroup, device: Optional[torch.device] = None):
        """The state of the module called ``name``, made (and restored from a loaded
        checkpoint) at its first call.

        Args:
            name (str): the module's name.
            n (int): the flat buffer's element count.
            group (ProcessGroup): the reduce-scatter's group (its size and this rank).
            device (torch.device, optional): where the gradients are (a CUDA device: a device
                state; default: the CPU).

        Returns:
            gradcomp.ShardedState | gradcomp.PhaseState: the module's state (float32
            gradients).

        Raises:
            RuntimeError: the module's buffer changed size since its state was made.
        """
        st = self.states.get(name)
        if st is None:
            cuda = device is not None and torch.device(device).type == "cuda"
            st = self.states[name] = self._make_state(n, group, device if cuda else None)
            if self._pending is not None and name in self._pending["states"]:
                self._restore(self._pending, name, st)
        elif st.size != n:
            raise RuntimeError(f"gradcomp.fsdp: the reduce-scatter of {name!r} changed size ({st.size} -> {n})")
        return st

    def _load_same_world(self, sd: dict, another_world: str) -> None:
        """Restores the states that exist and keeps ``sd`` for those made later; ValueError
        ``another_world`` unless ``sd`` was saved at this world size."""
        if sd["world_size"] != self.world():
            raise ValueError(another_world)
        for name, st in self.states.items():
            self._restore(sd, name, st)
        self._pending = sd

    def _restore(self, sd: dict, name: str, st) -> None:
        restore_rows(self.codec, st, sd["states"][name], sd["world_size"], self.world(), self.rank())


class _ReduceScatter:
    """What :class:`CodecReduceScatter` and :class:`TagcReduceScatter` share: the interface
    ``FSDPModule.set_custom_reduce_scatter`` expects for one FSDP module, its reduction's
    scaling and its output's type."""

    _decodes = (torch.float32,)  # the output types decoded in place (others through a float32 copy)

    def __init__(self, owner, name: str) -> None:
        self.owner, self.name = owner, name

    def _label(self) -> str:
        return ""

    def __repr__(self) -> str:
        st = self.owner.states.get(self.name)
        size = "not yet run" if st is None else f"{st.size} elements, step {st.step}"
        return f"{type(self).__name__}({self._label()}name={self.name!r}, {size})"

    def allocate(self, size: Sequence[int], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """A buffer for FSDP's reduce-scatter input or output (a plain ``torch.empty``)."""
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor, group: dist.ProcessGroup,
                 op: dist.ReduceOp, async_op: bool = False) -> None:
        """Reduce-scatters ``input_tensor`` into ``output_tensor`` with the owner's codec.

        Args:
            output_tensor (torch.Tensor): this rank's shard (``input_tensor.numel() / W``
                elements; float32, or bfloat16 on the sharded path, other types through a
                float32 copy), overwritten.
            input_tensor (torch.Tensor): the module's flat gradient buffer (W shards).
            group (ProcessGroup): the reduce-scatter's group.
            op (torch.distributed.ReduceOp): ``AVG``, ``SUM`` or ``PREMUL_SUM`` (FSDP's gradient
                divide factor).
            async_op (bool): must be False.

        Returns:
            None: the collectives have completed when it returns.

        Raises:
            NotImplementedError: ``async_op=True``.
            ValueError: another reduction than AVG, SUM or PREMUL_SUM.
            gradcomp.Error: a received slot or reduced buffer failed the library's checks.
        """
        if async_op:
            raise NotImplementedError("gradcomp.fsdp: asynchronous reduce-scatter")
        o, world = self.owner, group.size()
        scale = _scale(op, world)
        o.calls += 1
        x = input_tensor.view(-1).float()  # FSDP's scratch buffer (a copy if not float32)
        if scale != 1.0:
            x.mul_(scale)  # the codec sums averages; residuals are in the average's units
        st = o.state_of(self.name, x.numel(), group, x.device)
        out = output_tensor.view(-1)
        dec = out if out.dtype in self._decodes else torch.empty(out.numel(), device=out.device)
        self._reduce(x, st, dec, group, world)
        if dec is not out:
            out.copy_(dec)
        return None

    def _reduce(self, x: torch.Tensor, st, dec: torch.Tensor, group: dist.ProcessGroup, world: int) -> None:
        raise NotImplementedError


class ShardedCodec(_ModuleStates):
    """A gradcomp codec on the sharded path (reduce-scatter mode) and the states of every FSDP
    module of a model, with collective checkpoints.

    :func:`attach` makes one and gives each FSDP module a :class:`CodecReduceScatter` that
    shares it. A module's state (:class:`gradcomp.ShardedState`: a compressor state per
    destination shard) is made at its first reduce-scatter (FSDP's flat buffer size is known
    then), keyed by the module's name (``"<root>"`` for the root).

    Args:
        codec (str): a codec name from :func:`gradcomp.codecs` (``"int8"``, ``"topk"``, ...).
        process_group (ProcessGroup, optional): the group :meth:`state_dict` gathers over
            (default: the world; the reduce-scatters use the group FSDP passes them).
        **options: the codec's options, as for :class:`gradcomp.Compressor`.

    Raises:
        gradcomp.Error: an unknown codec or option, or an invalid value.

    Attributes:
        codec (gradcomp.Sharded): the codec, in reduce-scatter mode.
        states (dict[str, gradcomp.ShardedState]): the modules' states.
        bytes_sent (int): bytes of the all-to-all buffers this rank handed to the collective,
            all steps.
        wire_bytes (int): bytes this rank put on the wire ((W - 1) slots per call), all steps.
        calls (int): reduce-scatters run, all steps.
    """

    def __init__(self, codec: str, process_group: Optional[dist.ProcessGroup] = None, **options) -> None:
        self.name = codec
        self.options = dict(options)
        self.codec = Sharded(codec, "reduce_scatter", **options)
        self.process_group = process_group
        self.states = {}  # module name -> ShardedState
        self._buffers = {}  # module name -> (send, recv)
        self.bytes_sent = 0
        self.wire_bytes = 0
        self.calls = 0

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        numel = sum(st.size for st in self.states.values())
        return (f"ShardedCodec(codec={self.name!r}{opts}, states={len(self.states)} / {numel} elements, "
                f"calls={self.calls}, bytes_sent={self.bytes_sent})")

    def _make_state(self, n: int, group: dist.ProcessGroup, cuda: Optional[torch.device]):
        return self.codec.make_state(n, group.size(), group.rank(), None, cuda)

    def buffers(self, name: str, st):
        """The module's all-to-all send and receive buffers (uint8, allocated once, on the
        state's device)."""
        bufs = self._buffers.get(name)
        if bufs is None:
            p, dev = self.codec.describe(0, st), st.device
            bufs = self._buffers[name] = (torch.empty(p["send_bytes"], dtype=torch.uint8, device=dev),
                                          torch.empty(p["receive_bytes"], dtype=torch.uint8, device=dev))
        return bufs

    def state_dict(self) -> dict:
        """Every rank's states, for one checkpoint file.

        A collective over the process group: every rank calls it and gets the same dict.

        Returns:
            dict: ``format``, ``codec`` (the codec's name), ``identity`` (name, codec
            identifier, mode), ``world_size`` and ``states`` (module name -> a list of every
            rank's :meth:`gradcomp.Sharded.checkpoint` bytes as uint8 tensors).
        """
        self.codec.check()  # device states: raise what their error words hold before saving
        out = gather_blobs({n: self.codec.checkpoint(st) for n, st in self.states.items()}, self.process_group,
                           ragged=True)
        return {"format": _FORMAT, "codec": self.name, "identity": self.codec.identity, "world_size": self.world(),
                "states": out}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores :meth:`state_dict`'s states, at the saved world size only: the run continues
        bit for bit.

        States that do not exist yet (no reduce-scatter has run) are restored when their
        module's first reduce-scatter makes them.

        Args:
            state_dict (dict): what :meth:`state_dict` returned.

        Raises:
            ValueError: an unknown format, another codec or configuration, or another world size
                (FSDP's flat reduce-scatter layout differs between world sizes).
            gradcomp.Error: a corrupted checkpoint.
        """
        sd = state_dict
        if sd.get("format") != _FORMAT or "identity" not in sd or sd.get("codec") == "tagc":
            raise ValueError("gradcomp.fsdp: unknown reduce-scatter state format")
        if sd["identity"] != self.codec.identity:
            raise ValueError(f"gradcomp.fsdp: reduce-scatter state made by {sd['identity']}, not {self.codec.identity}")
        self._load_same_world(sd, "gradcomp.fsdp: reduce-scatter state saved at another world size; FSDP's flat "
                                  "reduce-scatter layout differs between world sizes")


class CodecReduceScatter(_ReduceScatter):
    """FSDP2's custom reduce-scatter running a gradcomp codec on the sharded path for one FSDP
    module.

    Implements the interface ``FSDPModule.set_custom_reduce_scatter`` expects:
    :meth:`allocate` and :meth:`__call__`.

    Args:
        owner (ShardedCodec): the shared codec and states.
        name (str): the module's name (its state's key).
    """

    _decodes = (torch.float32, torch.bfloat16)

    def _label(self) -> str:
        return f"codec={self.owner.name!r}, "

    def _reduce(self, x: torch.Tensor, st, dec: torch.Tensor, group: dist.ProcessGroup, world: int) -> None:
        o, c = self.owner, self.owner.codec
        send, recv = o.buffers(self.name, st)
        c.encode(0, x, st, send)
        dist.all_to_all_single(recv, send, group=group)
        c.receive(0, st, recv, dec)
        o.bytes_sent += send.numel()
        o.wire_bytes += (world - 1) * (send.numel() // world)


class ShardedTagc(_ModuleStates, TagcStates):
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
        self._load_same_world(sd, "gradcomp.fsdp: TAGC state saved at another world size; FSDP's flat reduce-scatter "
                                  "layout differs between world sizes (restore_elastic applies to DDP's per-parameter states)")

    def _make_state(self, n: int, group: dist.ProcessGroup, cuda: Optional[torch.device]):
        return self.codec.make_state(n, group.size(), group.rank(), cuda)


class TagcReduceScatter(_ReduceScatter):
    """FSDP2's custom reduce-scatter running TAGC-2 for one FSDP module.

    Implements the interface ``FSDPModule.set_custom_reduce_scatter`` expects:
    :meth:`allocate` and :meth:`__call__`.

    Args:
        owner (ShardedTagc): the shared codec and states.
        name (str): the module's name (its state's key).
    """

    def _reduce(self, x: torch.Tensor, st, dec: torch.Tensor, group: dist.ProcessGroup, world: int) -> None:
        o, c = self.owner, self.owner.codec
        bits = torch.empty(c.describe(0, st)["count"], dtype=torch.int32, device=x.device)
        c.encode(0, x, st, bits)
        dist.all_reduce(bits, op=o.bitmap_op, group=group)
        c.receive(0, st, bits)
        p1 = c.describe(1, st)
        cells = torch.empty(p1["count"], dtype=o.cell_dtype, device=x.device)
        c.encode(1, x, st, cells)
        mine = torch.empty(p1["shard_count"], dtype=o.cell_dtype, device=x.device)
        dist.reduce_scatter_tensor(mine, cells, group=group)
        c.receive(1, st, mine, dec)
        c.finish_step(st)
        o.count(st)
        o.bytes_sent += bits.numel() * 4 + cells.numel() * cells.element_size()


def attach(model: torch.nn.Module, codec: str = "tagc", **options):
    """Makes every FSDP2 module of ``model`` reduce-scatter its gradients through a gradcomp
    codec.

    Call it after ``fully_shard``; each module found by ``model.named_modules()`` that is an
    ``FSDPModule`` gets a :class:`CodecReduceScatter` (or, for TAGC, a
    :class:`TagcReduceScatter`) through ``FSDPModule.set_custom_reduce_scatter``.

    Args:
        model (torch.nn.Module): a model with ``fully_shard`` applied (to it or to submodules).
        codec (str): ``"tagc"`` (default: TAGC-2, :class:`ShardedTagc`), or any name of
            :func:`gradcomp.codecs` (``"int8"``, ``"int4"``, ``"topk"``, ...: the sharded path in
            reduce-scatter mode, :class:`ShardedCodec`).
        **options: for TAGC, ``preset`` (``"default"``, ``"tagc2"``, ``"v1"``) and
            :func:`gradcomp.Tagc`'s options; for the others, the codec's options, as for
            :class:`gradcomp.Compressor`.

    Returns:
        ShardedCodec | ShardedTagc: the modules' shared codec and states (statistics,
        checkpoints).

    Raises:
        ValueError: the model has no FSDP modules.
        gradcomp.Error: an unknown codec, preset or option, or an invalid value.

    Example::

        >>> fully_shard(model)
        >>> rs = gradcomp.fsdp.attach(model, "topk", density=0.01)
        >>> tagc = gradcomp.fsdp.attach(model, "tagc", preset="tagc2")
    """
    if codec == "tagc":
        owner = ShardedTagc(**options)
        make = TagcReduceScatter
    else:
        owner = ShardedCodec(codec, **options)
        make = CodecReduceScatter
    found = 0
    for name, m in model.named_modules():
        if isinstance(m, FSDPModule):
            m.set_custom_reduce_scatter(make(owner, name or "<root>"))
            found += 1
    if not found:
        raise ValueError("gradcomp.fsdp.attach: the model has no fully_shard modules")
    return owner
