"""DDP communication hooks that send gradients through gradcomp.

One hook function per algorithm, each with its own state class, as in
``torch.distributed.algorithms.ddp_comm_hooks``:

* :func:`compress_hook` with :class:`HookState`: a gradcomp codec chosen by name
  (``gradcomp.codecs()``).

  - Summable casts (``fp32``, ``bf16``, ``fp16``): the bucket is divided by the world size,
    cast to the wire type with the library's conversion, all-reduced (SUM in the wire type, as
    PyTorch's own fp16 / bf16 hooks do) and decoded back into the bucket.
  - Every other codec (the gather path): each parameter of the bucket with at least
    ``min_compress_numel`` elements is compressed on its own, with its own state
    (error-feedback residual, threshold, step) keyed by the parameter's name, so DDP's bucket
    layout (rebuilt after the first step) never changes what is sent; smaller parameters
    (biases, norms) travel as raw float32. One all-gather of fixed-size slots carries
    everything; every rank decodes every rank's frames in rank order, so replicas stay
    bit-identical.

* :func:`tagc_hook` with :class:`TagcHookState`: TAGC-2. Every matrix parameter with at least
  ``min_compress_numel`` elements has its own TAGC state; a bucket's bitmaps go out in one
  all-reduce (BOR, or SUM for the sum-safe packing), then its sketches, with the bucket's other
  parameters cast to the cell type, in one SUM all-reduce; every rank decodes every shard.

Example::

    >>> import gradcomp.ddp
    >>> model = torch.nn.parallel.DistributedDataParallel(net)
    >>> state = gradcomp.ddp.HookState(model, "topk", density=0.01)  # top-k 1% + error feedback
    >>> model.register_comm_hook(state, gradcomp.ddp.compress_hook)

The hook states are checkpointable: ``state_dict()`` (a collective: every rank calls it)
gathers every rank's residuals, thresholds and steps; ``load_state_dict()`` restores them,
exactly when the world size is unchanged, and into another world size as described on each
class. docs/integrations.md in the repository maps each path onto the collectives.
"""

# No `from __future__ import annotations`: DDP's register_comm_hook checks the hooks' annotations
# against dist.GradBucket and torch.futures.Future[torch.Tensor] as objects, not strings.
from typing import Callable, Optional

import numpy as np
import torch
import torch.distributed as dist

from ._core import Compressor
from ._gather import gather_blobs
from .tagc import TagcStates

__all__ = ["HookState", "TagcHookState", "compress_hook", "tagc_hook"]

_WIRE_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}
_FORMAT = 1


def _strip(name: str) -> str:
    return name[len("module."):] if name.startswith("module.") else name


def _expect_state(state, cls, hook: str) -> None:
    """Raises TypeError unless state is a cls (the state class that hook is written for)."""
    if isinstance(state, cls):
        return
    other = {HookState: "TagcHookState and tagc_hook", TagcHookState: "HookState and compress_hook"}[cls]
    raise TypeError(f"gradcomp.ddp.{hook} expects a gradcomp.ddp.{cls.__name__} as its state, got "
                    f"{type(state).__name__}; register it with model.register_comm_hook(state, gradcomp.ddp.{hook}) "
                    f"(other algorithms have their own pair: {other})")


class HookState:
    """State of :func:`compress_hook`: a gradcomp codec, the process group and one codec state
    per compressed parameter.

    Every parameter of ``model`` that requires a gradient and has at least
    ``min_compress_numel`` elements gets its own :class:`gradcomp.State` (residual, thresholds,
    step), keyed by the parameter's name; summable casts (``fp32``, ``bf16``, ``fp16``) keep no
    state and cast whole buckets.

    Args:
        model (torch.nn.Module): the model whose gradients the hook reduces (the DDP module or
            the module it wraps; a ``module.`` prefix of the names is ignored).
        codec (str): a codec name from :func:`gradcomp.codecs` (default ``"topk"``).
        process_group (ProcessGroup, optional): the group to reduce over (default: the world).
        min_compress_numel (int): parameters with fewer elements travel as raw float32
            (default 1024).
        **options: the codec's options (``density``, ``error_feedback``, ``group``, ...), as
            for :class:`gradcomp.Compressor`.

    Raises:
        gradcomp.Error: an unknown codec or option (``code == "invalid_argument"``).

    Attributes:
        compressor (gradcomp.Compressor): the codec.
        states (dict[str, gradcomp.State]): per-parameter states of the gather path.
        bytes_sent (int): bytes this rank handed to the collectives, all steps.
        calls (int): buckets the hook has reduced.

    Example::

        >>> state = gradcomp.ddp.HookState(model, "int4", error_feedback=True)
        >>> model.register_comm_hook(state, gradcomp.ddp.compress_hook)
    """

    def __init__(self, model: torch.nn.Module, codec: str = "topk", process_group: Optional[dist.ProcessGroup] = None,
                 min_compress_numel: int = 1024, **options) -> None:
        self.compressor = Compressor(codec, **options)
        self.codec = codec
        self.options = dict(options)
        self.process_group = process_group
        self.min_compress_numel = int(min_compress_numel)
        self._names = {}  # data_ptr -> parameter name
        self.states = {}  # parameter name -> gradcomp.State (compressed parameters only)
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            self._names[p.data_ptr()] = _strip(name)
            if not self.compressor.summable and p.numel() >= self.min_compress_numel:
                self.states[_strip(name)] = self.compressor.make_state(p.numel())
        self._plans = {}  # bucket parameter names -> _Plan
        self._wire = {}  # bucket index -> wire tensor (summable casts)
        self.bytes_sent = 0
        self.calls = 0

    def __repr__(self) -> str:
        opts = "".join(f", {k}={v!r}" for k, v in self.options.items())
        numel = sum(st.size for st in self.states.values())
        return (f"HookState(codec={self.codec!r}{opts}, min_compress_numel={self.min_compress_numel}, "
                f"compressed={len(self.states)} parameters / {numel} elements, calls={self.calls}, "
                f"bytes_sent={self.bytes_sent})")

    # ---- collectives
    def world(self) -> int:
        """The size of the process group."""
        return dist.get_world_size(self.process_group)

    def rank(self) -> int:
        """This process's rank in the process group."""
        return dist.get_rank(self.process_group)

    # ---- checkpoints
    def state_dict(self) -> dict:
        """Every rank's codec states, for one checkpoint file.

        A collective over the process group: every rank calls it, and every rank gets the same
        dict (rank 0 typically ``torch.save``\\ s it).

        Returns:
            dict: ``format``, ``codec``, ``options``, ``world_size`` and ``states``
            (parameter name -> uint8 tensor ``[world_size, checkpoint bytes]``).
        """
        out = gather_blobs({n: st.checkpoint() for n, st in self.states.items()}, self.process_group)
        return {"format": _FORMAT, "codec": self.codec, "options": dict(self.options),
                "world_size": self.world(), "states": out}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores :meth:`state_dict`'s states into this rank's.

        At the saved world size every rank takes its own row, exactly. At another world size
        every rank takes the **mean** residual of the saved ranks (which keeps what is still
        owed to the model, ``sum(residual) / world``), and its own row's step and thresholds, or
        rank 0's where it had no row.

        Args:
            state_dict (dict): what :meth:`state_dict` returned.

        Raises:
            ValueError: an unknown format, another codec, or other compressed parameters.
            gradcomp.Error: a corrupted checkpoint (``code == "checksum_mismatch"``, ...).
        """
        sd = state_dict
        if sd.get("format") != _FORMAT:
            raise ValueError("gradcomp hook state: unknown format")
        if sd["codec"] != self.codec:
            raise ValueError(f"gradcomp hook state was made by codec {sd['codec']!r}, not {self.codec!r}")
        if set(sd["states"]) != set(self.states):
            raise ValueError("gradcomp hook state: the compressed parameters differ from this model's")
        old, world, rank = sd["world_size"], self.world(), self.rank()
        for name, rows in sd["states"].items():
            st = self.states[name]
            if old == world:
                st.restore(rows[rank].numpy().tobytes())
                continue
            # Another world size: every rank takes the mean residual, so that the total still
            # owed, sum(residual) / world, is what it was. Step and thresholds: rank's own row
            # if it had one, else rank 0's.
            st.restore(rows[rank if rank < old else 0].numpy().tobytes())
            if st.residual.shape[0]:
                tmp = self.compressor.make_state(st.size)
                mean = np.zeros(st.size, dtype=np.float64)
                for r in range(old):
                    tmp.restore(rows[r].numpy().tobytes())
                    mean += np.asarray(tmp.residual)
                np.asarray(st.residual)[:] = (mean / old).astype(np.float32)

    def _name(self, p: torch.Tensor) -> str:
        try:
            return self._names[p.data_ptr()]
        except KeyError:
            raise RuntimeError(f"gradcomp hook: a bucket holds a parameter that {type(self).__name__}'s model "
                               "does not have") from None


class _Plan:
    """Fixed slot layout of one bucket: [int32 sizes][frames, max bytes each][raw fp32]."""

    def __init__(self, state: HookState, names, grads):
        c = state.compressor
        self.big, self.small = [], []
        at = 8 * ((4 * sum(g.numel() >= state.min_compress_numel for g in grads) + 7) // 8)
        small_at = 0
        for i, (name, g) in enumerate(zip(names, grads)):
            if g.numel() >= state.min_compress_numel:
                cap = c.max_payload_bytes(g.numel())
                self.big.append((i, name, at, cap))
                at += cap
            else:
                self.small.append((i, small_at, g.numel()))
                small_at += g.numel()
        self.small_offset = at
        self.slot_bytes = at + 4 * small_at
        self.small_count = small_at
        world = state.world()
        self.send = torch.zeros(self.slot_bytes, dtype=torch.uint8)
        self.recv = torch.empty(world * self.slot_bytes, dtype=torch.uint8)


def compress_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook that averages a bucket through a gradcomp codec.

    Summable casts all-reduce the bucket cast to the wire type; every other codec compresses
    each large parameter of the bucket with its own state and all-gathers the frames, which
    every rank decodes in rank order (the module docstring has the details).

    Args:
        state (HookState): the codec and the per-parameter states.
        bucket (torch.distributed.GradBucket): the bucket DDP hands to the hook.

    Returns:
        torch.futures.Future[torch.Tensor]: a future of the averaged bucket (the bucket's own
        buffer, overwritten).

    Raises:
        TypeError: ``state`` is not a :class:`HookState`, or a summable cast gets a bucket that
            is not float32.
        gradcomp.Error: a frame failed validation (``.code`` says why).

    Example::

        >>> state = gradcomp.ddp.HookState(model, "topk", density=0.01)
        >>> model.register_comm_hook(state, gradcomp.ddp.compress_hook)
    """
    _expect_state(state, HookState, "compress_hook")
    state.calls += 1
    if state.compressor.summable:
        return _summable(state, bucket)
    return _gather(state, bucket)


def _summable(state: HookState, bucket) -> torch.futures.Future:
    buf, pg, world = bucket.buffer(), state.process_group, state.world()
    c = state.compressor
    if buf.dtype != torch.float32:
        raise TypeError("gradcomp.ddp.compress_hook: summable casts expect float32 buckets")
    if c.wire_bits == 32:
        buf.div_(world)
        state.bytes_sent += buf.numel() * 4
        return dist.all_reduce(buf, group=pg, async_op=True).get_future().then(lambda f: f.value()[0])
    wire = state._wire.get(bucket.index())
    if wire is None or wire.numel() != buf.numel():
        wire = state._wire[bucket.index()] = torch.empty(buf.numel(), dtype=_WIRE_DTYPE[state.codec])
    c.encode_cast(buf, wire, 1.0 / world)
    state.bytes_sent += wire.numel() * wire.element_size()

    def done(_):
        c.decode_cast(wire, buf)
        return buf

    return dist.all_reduce(wire, group=pg, async_op=True).get_future().then(done)


def _gather(state: HookState, bucket) -> torch.futures.Future:
    pg, world = state.process_group, state.world()
    c = state.compressor
    grads = [g.view(-1) for g in bucket.gradients()]
    names = tuple(state._name(p) for p in bucket.parameters())
    plan = state._plans.get(names)
    if plan is None:
        plan = state._plans[names] = _Plan(state, names, grads)
    send = plan.send
    sizes = send[:4 * len(plan.big)].view(torch.int32)
    for j, (i, name, at, cap) in enumerate(plan.big):
        sizes[j] = c.compress(grads[i], state.states[name], send[at:at + cap])
    small = send[plan.small_offset:].view(torch.float32)
    for i, at, n in plan.small:
        small[at:at + n].copy_(grads[i])
    state.bytes_sent += plan.slot_bytes

    def done(_):
        recv = plan.recv.view(world, plan.slot_bytes)
        got = recv[:, :4 * len(plan.big)].view(torch.int32)
        for j, (i, _name, at, _cap) in enumerate(plan.big):
            g = grads[i]
            g.zero_()
            for r in range(world):  # rank order: every replica adds the same frames the same way
                c.accumulate(recv[r, at:at + int(got[r, j])], g)
            g.div_(world)
        if plan.small:
            raw = recv[:, plan.small_offset:].view(torch.float32)
            for i, at, n in plan.small:
                g = grads[i]
                g.copy_(raw[0, at:at + n])
                for r in range(1, world):
                    g.add_(raw[r, at:at + n])
                g.div_(world)
        return bucket.buffer()

    return dist.all_gather_into_tensor(plan.recv, send, group=pg, async_op=True).get_future().then(done)


class TagcHookState(TagcStates):
    """State of :func:`tagc_hook`: TAGC-2 with one TAGC state per compressed parameter.

    States are keyed by the parameter's name, so DDP's bucket rebuild changes nothing; the
    phases are batched per bucket. Parameters that are not compressed travel cast to the cell
    type (bf16 by default), as TAGC-2 does.

    Args:
        model (torch.nn.Module): the model whose gradients the hook reduces.
        preset (str): ``"default"`` (adaptive sketch), ``"tagc2"`` (ratio 10) or ``"v1"``, as
            for :func:`gradcomp.Tagc`.
        process_group (ProcessGroup, optional): the group to reduce over (default: the world).
        min_compress_numel (int): the default selection's smallest compressed parameter
            (default 1024).
        select (Callable[[str, torch.nn.Parameter], bool], optional): chooses the compressed
            parameters by name and parameter (default: matrices of at least
            ``min_compress_numel`` elements: embeddings, attention and MLP weights, LM head).
        **config: :func:`gradcomp.Tagc`'s options (``density``, ``bitmap``, ``cells``, ...).

    Raises:
        gradcomp.Error: an unknown preset or option, or an invalid value.

    Checkpoints: :meth:`state_dict` gathers every rank's TAGC checkpoint bytes;
    :meth:`load_state_dict` restores each rank's own row at the saved world size, and runs the
    library's elastic restore at another (the residuals' sum is kept, each new rank holding its
    shard of it).

    Example::

        >>> state = gradcomp.ddp.TagcHookState(model, "tagc2")
        >>> model.register_comm_hook(state, gradcomp.ddp.tagc_hook)
    """

    def __init__(self, model: torch.nn.Module, preset: str = "default", process_group: Optional[dist.ProcessGroup] = None,
                 min_compress_numel: int = 1024, select: Optional[Callable[[str, torch.nn.Parameter], bool]] = None,
                 **config) -> None:
        super().__init__(preset, process_group, **config)
        self.min_compress_numel = int(min_compress_numel)
        select = select or (lambda name, p: p.dim() >= 2 and p.numel() >= self.min_compress_numel)
        world, rank = self.world(), self.rank()
        self._names = {}
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            self._names[p.data_ptr()] = _strip(name)
            if select(_strip(name), p):
                self.states[_strip(name)] = self.codec.make_state(p.numel(), world, rank)
        self._plans = {}  # bucket parameter names -> _TagcPlan

    _name = HookState._name


class _TagcPlan:
    """A bucket's compressed parameters (their bitmap words' offsets) and the others."""

    def __init__(self, state: TagcHookState, names, grads):
        self.big, self.small, at = [], [], 0
        for i, name in enumerate(names):
            if name in state.states:
                words = state.codec.describe(0, state.states[name])["count"]
                self.big.append((i, name, at, words))
                at += words
            else:
                self.small.append(i)
        self.bits = torch.empty(at, dtype=torch.int32)
        self.small_count = sum(grads[i].numel() for i in self.small)


def tagc_hook(state: TagcHookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook that averages a bucket with TAGC-2.

    Per bucket: the gradient divided by the world size; one all-reduce of every compressed
    parameter's bitmap words (int32, BOR; SUM with ``bitmap="sum_safe"``), waited for inside
    the hook; then one SUM all-reduce of every compressed parameter's sketch cells followed by
    the other parameters cast to the cell type. The future decodes each parameter's whole
    buffer on every rank (the same bits everywhere).

    Args:
        state (TagcHookState): the TAGC codec and the per-parameter states.
        bucket (torch.distributed.GradBucket): the bucket DDP hands to the hook.

    Returns:
        torch.futures.Future[torch.Tensor]: a future of the averaged bucket (the bucket's own
        buffer, overwritten).

    Raises:
        TypeError: ``state`` is not a :class:`TagcHookState`, or the bucket is not float32.
        gradcomp.Error: a reduced buffer failed the library's checks.

    Example::

        >>> state = gradcomp.ddp.TagcHookState(model)
        >>> model.register_comm_hook(state, gradcomp.ddp.tagc_hook)
    """
    _expect_state(state, TagcHookState, "tagc_hook")
    state.calls += 1
    buf, pg, world, c = bucket.buffer(), state.process_group, state.world(), state.codec
    if buf.dtype != torch.float32:
        raise TypeError("gradcomp.ddp.tagc_hook: float32 buckets expected")
    grads = [g.view(-1) for g in bucket.gradients()]
    names = tuple(state._name(p) for p in bucket.parameters())
    plan = state._plans.get(names)
    if plan is None:
        plan = state._plans[names] = _TagcPlan(state, names, grads)
    buf.div_(world)  # the codec sums averages; residuals are in the average's units
    # Phase 0, waited for: the sketch's size follows from the union, and issuing the second
    # collective here (not from a callback) keeps the ranks' collectives in one order.
    for i, name, at, words in plan.big:
        c.encode(0, grads[i], state.states[name], plan.bits[at:at + words])
    if plan.big:
        dist.all_reduce(plan.bits, op=state.bitmap_op, group=pg)
    counts = []
    for i, name, at, words in plan.big:
        st = state.states[name]
        c.receive(0, st, plan.bits[at:at + words])
        counts.append(c.describe(1, st)["count"])
    # Phase 1: every compressed parameter's sketch, then the others cast to the cell type.
    sketched = sum(counts)
    cells = torch.empty(sketched + plan.small_count, dtype=state.cell_dtype)
    at = 0
    for (i, name, _, _), n in zip(plan.big, counts):
        c.encode(1, grads[i], state.states[name], cells[at:at + n])
        at += n
    for i in plan.small:
        n = grads[i].numel()
        cells[at:at + n].copy_(grads[i])  # round to nearest even, as the library's casts
        at += n
    state.bytes_sent += plan.bits.numel() * 4 + cells.numel() * cells.element_size()

    def done(_):
        at = 0
        for (i, name, _, _), n in zip(plan.big, counts):
            st = state.states[name]
            c.receive(1, st, cells[at:at + n], grads[i])
            c.finish_step(st)
            state.count(st)
            at += n
        for i in plan.small:
            n = grads[i].numel()
            grads[i].copy_(cells[at:at + n])
            at += n
        return buf

    return dist.all_reduce(cells, group=pg, async_op=True).get_future().then(done)
