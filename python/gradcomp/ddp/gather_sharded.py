"""The DDP hook :func:`compress_hook` (its state: :class:`HookState`). Summable casts go to
:mod:`gradcomp.ddp.summable_hook`; every other codec compresses each large parameter of a bucket
on its own, on the gather path (all-gathered frames, decoded in rank order) or the sharded path
(an all-to-all of shards, each reduced and compressed again by its owner, then an all-gather),
in the bucket's fixed layout (:class:`_Plan`)."""

# No `from __future__ import annotations`: DDP's register_comm_hook checks the hooks' annotations
# against dist.GradBucket and torch.futures.Future[torch.Tensor] as objects, not strings.
import time

import torch
import torch.distributed as dist

from .._exchange import align8
from .hook_state import HookState, expect_state
from .summable_hook import reduce_cast


class _Plan:
    """A bucket's fixed layout.

    Without sharded parameters, one all-gather of a block ``[int32 frame sizes | frames,
    max_payload_bytes each | raw fp32 of the small parameters]``. With them, first an all-to-all
    of W blocks (block j: ``[each sharded parameter's slot for shard j | shard j of the small
    parameters' raw fp32]``), then the all-gather of ``[int32 frame sizes | gather-path frames
    | each sharded parameter's re-encoded shard | this rank's reduced shard of the small
    parameters]``. Every offset is a multiple of 8.
    """

    def __init__(self, state: HookState, names, grads):
        c, world = state.compressor, state.world()
        dev = grads[0].device if grads else torch.device("cpu")
        self.gather, self.shard, self.small = [], [], []
        m = 0
        for i, (name, g) in enumerate(zip(names, grads)):
            path = state.paths.get(name)
            if path == "sharded":
                self.shard.append([i, name])
            elif path == "gather":
                self.gather.append([i, name])
            else:
                self.small.append((i, m, g.numel()))
                m += g.numel()
        self.small_count = m
        slots = [[state.sharded.describe(k, state.sharded_states[e[1]])["slot_bytes"] for k in (0, 1)] for e in self.shard]
        q = -(-m // world)  # raw values per shard
        layout = c.gather_layout([grads[e[0]].numel() for e in self.gather], [grads[e[0]].dtype for e in self.gather],
                                 [s1 for _, s1 in slots], q if self.shard else m, dev.type == "cuda")
        for e, at, cap in zip(self.gather, layout["offsets"], layout["caps"]):
            e += [at, cap]
        self.small1, self.block1 = layout["small_offset"], layout["block_bytes"]
        if self.shard:
            at0, most = 0, 0
            for e, (s0, s1), at in zip(self.shard, slots, layout["slot_offsets"]):
                e += [at0, s0, at, s1]
                at0, most = at0 + s0, max(most, s0)
            self.q = q
            self.small0, self.block0 = at0, align8(at0 + 4 * self.q)
            self.send0 = torch.zeros(world * self.block0, dtype=torch.uint8, device=dev)
            self.recv0 = torch.empty(world * self.block0, dtype=torch.uint8, device=dev)
            self.scratch = torch.empty(world * most, dtype=torch.uint8, device=dev)
            self.raw = torch.zeros(world * self.q, dtype=torch.float32, device=dev)
        self.send = torch.zeros(self.block1, dtype=torch.uint8, device=dev)
        self.gather_states = [state.states[e[1]] for e in self.gather]
        self.gather_offsets = [e[2] for e in self.gather]
        self.recv = torch.empty(world * self.block1, dtype=torch.uint8, device=dev)


def compress_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook that averages a bucket through a gradcomp codec.

    Summable casts all-reduce the bucket cast to the wire type. Every other codec compresses
    each large parameter of the bucket with its own state, on the path :class:`HookState`
    chose for it: gather-path frames are all-gathered and every rank decodes them in rank
    order; sharded-path parameters go through one ``all_to_all_single`` (waited for inside the
    hook) and the same all-gather (:mod:`gradcomp.ddp` has the details).

    Args:
        state (HookState): the codec and the per-parameter states.
        bucket (torch.distributed.GradBucket): the bucket DDP hands to the hook.

    Returns:
        torch.futures.Future[torch.Tensor]: a future of the averaged bucket (the bucket's own
        buffer, overwritten).

    Raises:
        TypeError: ``state`` is not a :class:`HookState`, or a summable cast gets a bucket that
            is not float32.
        gradcomp.Error: a frame or slot failed validation (``.code`` says why).

    Example::

        >>> state = gradcomp.ddp.HookState(model, "topk", density=0.01)
        >>> model.register_comm_hook(state, gradcomp.ddp.compress_hook)
    """
    expect_state(state, HookState, "compress_hook")
    state.calls += 1
    if state.compressor.summable:
        return reduce_cast(state, bucket)
    state._setup()
    return _compressed(state, bucket)


def _scatter(state: HookState, plan: _Plan, grads) -> None:
    """Phase 0 of the bucket's sharded parameters and small parameters: the all-to-all, waited
    for, each shard's sum, and phase 1's encoding into the all-gather block."""
    pg, world, codec = state.process_group, state.world(), state.sharded
    send0 = plan.send0.view(world, plan.block0)
    for i, name, at0, s0, _, _ in plan.shard:
        g = grads[i]
        g.div_(world)  # residuals in units of the average: their sum over ranks is what is owed
        buf = plan.scratch[:world * s0]
        codec.encode(0, g, state.sharded_states[name], buf)
        send0[:, at0:at0 + s0].copy_(buf.view(world, s0))
    q = plan.q
    if plan.small:
        raw = plan.raw
        for i, at, n in plan.small:
            raw[at:at + n].copy_(grads[i])
        raw.div_(world)
        send0[:, plan.small0:plan.small0 + 4 * q].copy_(raw.view(world, q).view(torch.uint8))
    # Waited for, and the all-gather issued from this thread: every rank issues its collectives
    # in the same order.
    dist.all_to_all_single(plan.recv0, plan.send0, group=pg)
    state.bytes_sent += plan.send0.numel()
    state.wire_bytes += (world - 1) * plan.block0
    recv0 = plan.recv0.view(world, plan.block0)
    for i, name, at0, s0, at1, s1 in plan.shard:
        st = state.sharded_states[name]
        codec.receive(0, st, recv0[:, at0:at0 + s0].contiguous().view(-1))
        codec.encode(1, None, st, plan.send[at1:at1 + s1])
    if plan.small:
        parts = recv0[:, plan.small0:plan.small0 + 4 * q].contiguous().view(torch.float32)
        total = parts[0].clone()
        for r in range(1, world):  # rank order: the same sum on every run
            total.add_(parts[r])
        plan.send[plan.small1:plan.small1 + 4 * q].view(torch.float32).copy_(total)


def _compressed(state: HookState, bucket) -> torch.futures.Future:
    t0 = time.perf_counter()
    pg, world = state.process_group, state.world()
    c = state.compressor
    grads = [g.view(-1) for g in bucket.gradients()]
    names = tuple(state.name_of(p) for p in bucket.parameters())
    plan = state._plans.get(names)
    if plan is None:
        plan = state._plans[names] = _Plan(state, names, grads)
    if plan.shard:
        _scatter(state, plan, grads)
    send = plan.send
    # One C++ call per bucket each way. On a CUDA device a frame's size is fixed by the codec and
    # the parameter's size, the same on every rank: the sizes travel for the CPU's sake, and the
    # receiver uses its own.
    outs = [grads[e[0]] for e in plan.gather]
    local = c.compress_many(outs, plan.gather_states, send, plan.gather_offsets) if outs else []
    if local:
        send[:4 * len(local)].view(torch.int32).copy_(torch.tensor(local, dtype=torch.int32))
    if plan.small and not plan.shard:
        small = send[plan.small1:plan.small1 + 4 * plan.small_count].view(torch.float32)
        for i, at, n in plan.small:
            small[at:at + n].copy_(grads[i])
    state.bytes_sent += plan.block1
    state.wire_bytes += (world - 1) * plan.block1

    def done(_):
        t1 = time.perf_counter()
        recv = plan.recv.view(world, plan.block1)
        for i, name, _, _, at1, s1 in plan.shard:
            state.sharded.receive(1, state.sharded_states[name], recv[:, at1:at1 + s1].contiguous().view(-1), grads[i])
        if outs:  # every rank's frames in rank order: every replica adds the same way
            torch._foreach_zero_(outs)
            c.accumulate_many(plan.recv, plan.block1, outs, plan.gather_offsets, local if plan.recv.is_cuda else None)
            torch._foreach_div_(outs, world)
        if plan.small and plan.shard:  # every rank's reduced shard, in shard order
            raw = recv[:, plan.small1:plan.small1 + 4 * plan.q].contiguous().view(torch.float32).view(-1)
            for i, at, n in plan.small:
                grads[i].copy_(raw[at:at + n])
        elif plan.small:
            raw = recv[:, plan.small1:plan.small1 + 4 * plan.small_count].view(torch.float32)
            for i, at, n in plan.small:
                g = grads[i]
                g.copy_(raw[0, at:at + n])
                for r in range(1, world):
                    g.add_(raw[r, at:at + n])
                g.div_(world)
        state.hook_seconds += time.perf_counter() - t1
        return bucket.buffer()

    state.hook_seconds += time.perf_counter() - t0
    return dist.all_gather_into_tensor(plan.recv, send, group=pg, async_op=True).get_future().then(done)

