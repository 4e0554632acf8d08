"""DDP communication hooks that send gradients through gradcomp.

    import gradcomp.ddp
    state = gradcomp.ddp.HookState(model, "topk", density=0.01)   # top-k 1% + error feedback
    model.register_comm_hook(state, gradcomp.ddp.hook)            # model: a DDP module

Two paths, chosen by the codec (docs/integrations.md):

* summable casts (fp32, bf16, fp16): the bucket is cast to the wire type with the library's
  conversion (divided by the world size first), all-reduced (SUM in the wire type, as
  PyTorch's own fp16/bf16 hooks do) and decoded back into the bucket.
* every other codec (the gather path): each parameter of the bucket at least
  ``min_compress_numel`` long is compressed on its own, with its own state (error-feedback
  residual, threshold, step), keyed by the parameter's name, so bucket layout (DDP rebuilds
  buckets after the first step) never changes what is sent; smaller parameters (biases,
  norms) travel as raw fp32. One all-gather of fixed-size slots carries everything; every
  rank decodes every rank's frames in rank order, so replicas stay bit-identical.

* TAGC-2 (``TagcHookState``): every matrix parameter at least ``min_compress_numel`` long
  has its own TAGC state; a bucket's bitmaps go out in one all-reduce (BOR, or SUM for the
  sum-safe packing), then its sketches, with the bucket's other parameters cast to the cell
  type, in one SUM all-reduce; every rank decodes every shard (docs/integrations.md).

The hook state is checkpointable: ``state_dict()`` (a collective: every rank calls it)
gathers every rank's residuals, thresholds and steps; ``load_state_dict()`` restores them,
exactly when the world size is unchanged, and as the mean residual per rank when it changed
(which keeps the sum of what is still owed to the model).
"""

import numpy as np
import torch
import torch.distributed as dist

from ._core import Compressor
from ._gather import gather_blobs
from .tagc import TagcStates

_WIRE_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}
_FORMAT = 1


def _strip(name: str) -> str:
    return name[len("module."):] if name.startswith("module.") else name


class HookState:
    """What ``hook`` needs: the compressor, the process group and per-parameter states."""

    def __init__(self, model: torch.nn.Module, codec: str = "topk", process_group=None,
                 min_compress_numel: int = 1024, **options):
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
        self.bytes_sent = 0  # payload bytes this rank has contributed, all steps
        self.calls = 0

    # ---- collectives
    def world(self) -> int:
        return dist.get_world_size(self.process_group)

    def rank(self) -> int:
        return dist.get_rank(self.process_group)

    # ---- checkpoints
    def state_dict(self) -> dict:
        """Every rank's states (a collective over the process group)."""
        out = gather_blobs({n: st.checkpoint() for n, st in self.states.items()}, self.process_group)
        return {"format": _FORMAT, "codec": self.codec, "options": dict(self.options),
                "world_size": self.world(), "states": out}

    def load_state_dict(self, sd: dict) -> None:
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
            raise RuntimeError("gradcomp hook: a bucket holds a parameter that HookState's model does not have") from None


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


def hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The DDP communication hook (HookState or TagcHookState): a future of the averaged bucket."""
    state.calls += 1
    if isinstance(state, TagcHookState):
        return _tagc(state, bucket)
    if state.compressor.summable:
        return _summable(state, bucket)
    return _gather(state, bucket)


def _summable(state: HookState, bucket) -> torch.futures.Future:
    buf, pg, world = bucket.buffer(), state.process_group, state.world()
    c = state.compressor
    if buf.dtype != torch.float32:
        raise TypeError("gradcomp hook: summable casts expect float32 buckets")
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
    """TAGC-2 for DDP: one TAGC state per compressed parameter (keyed by name, so DDP's bucket
    rebuild changes nothing), the phases batched per bucket. ``select(name, param)`` chooses the
    compressed parameters (default: matrices of at least ``min_compress_numel`` elements:
    embeddings, attention and MLP weights, LM head); the rest travel as the cell type (bf16).
    ``preset`` and ``config`` are gradcomp.Tagc's."""

    def __init__(self, model: torch.nn.Module, preset: str = "default", process_group=None,
                 min_compress_numel: int = 1024, select=None, **config):
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
        self.calls = 0

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


def _tagc(state: TagcHookState, bucket) -> torch.futures.Future:
    buf, pg, world, c = bucket.buffer(), state.process_group, state.world(), state.codec
    if buf.dtype != torch.float32:
        raise TypeError("gradcomp TAGC hook: float32 buckets expected")
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
