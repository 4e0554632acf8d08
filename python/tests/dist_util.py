"""Test helpers: run a function on `world` gloo ranks (torch.multiprocessing.spawn) and return
what rank 0's function returned; compare tensors across ranks and devices; simulate TAGC's
collectives; train the test model on a device."""

import os
import socket
import sys
import tempfile

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import gradcomp
from gradcomp import testing


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, world, port, fn, args, out, torchrun):
    if torchrun:  # torchrun's environment; the code under test initialises the process group itself
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                          GROUP_RANK="0", NODE_RANK="0", WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
        torch.set_num_threads(1)
    else:
        testing.init_process_group(rank, world, port)
    try:
        result = fn(rank, world, *args)
        if rank == 0:
            torch.save(result, out)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    # The work is done and saved: leave without the interpreter's teardown. With torch 2.15 and
    # gloo a rank sometimes aborts there, after its last Python frame ("terminate called without
    # an active exception" from a C++ destructor at exit), which would fail a passing test.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run(world: int, fn, *args, torchrun: bool = False):
    """What rank 0's ``fn(rank, world, *args)`` returned. ``torchrun=True``: the ranks get
    torchrun's environment variables instead of a process group (as a trainer expects to be
    launched)."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "result.pt")
        mp.spawn(_entry, args=(world, _free_port(), fn, args, out, torchrun), nprocs=world)
        return torch.load(out, weights_only=False)


def with_damaged_receive(rank: int, step, at: int = 100, collective: str = "all_to_all_single"):
    """Runs ``step()`` while ``dist.<collective>`` (``all_to_all_single`` or
    ``all_gather_into_tensor``) flips a bit of rank 0's received bytes (byte ``len / 2 + at``)
    once each call completes (at ``wait()`` for ``async_op=True``); returns the
    ``gradcomp.Error`` code ``step()`` raised, or None."""
    real = getattr(dist, collective)

    def damage(out):
        out[len(out) // 2 + at] ^= 0x40

    class Damaged:
        def __init__(self, work, out):
            self.work, self.out = work, out

        def wait(self):
            self.work.wait()
            damage(self.out)
            return True

    def damaged(out, inp, group=None, async_op=False):
        if rank != 0:
            return real(out, inp, group=group, async_op=async_op)
        work = real(out, inp, group=group, async_op=True)
        if async_op:
            return Damaged(work, out)
        work.wait()
        damage(out)
        return None

    setattr(dist, collective, damaged)
    try:
        step()
        return None
    except gradcomp.Error as e:
        return e.code
    finally:
        setattr(dist, collective, real)


def bits(t) -> np.ndarray:
    """A tensor's (any device) or NumPy array's values as their bits (int16 or int32), on the
    host: float comparisons bit for bit."""
    t = t.detach().cpu().contiguous() if isinstance(t, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(t))
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32).numpy()


def host(a) -> np.ndarray:
    """A state's array on the host: a CUDA state's tensor copied, a CPU state's NumPy view as is."""
    return a.cpu().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def raised(device: str, call, check):
    """The gradcomp.Error a bad input gets: raised by ``call`` on the CPU; on a CUDA device the
    call is queued and raises nothing, and ``check()`` raises it."""
    import pytest

    if device == "cpu":
        with pytest.raises(gradcomp.Error) as e:
            call()
    else:
        call()  # queued: nothing is raised yet
        with pytest.raises(gradcomp.Error) as e:
            check()
    return e.value


def fit(net, steps, rank=0, world=1, device="cuda"):
    """SGD with momentum on the test task's batches (rank r of W draws batch step * W + r), on
    ``device``: the losses."""
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    task = testing.MarkovTask()
    losses = []
    for step in range(steps):
        x, y = task.batch(step * world + rank, 8, 32)
        loss = torch.nn.functional.cross_entropy(net(x.to(device)).flatten(0, 1), y.to(device).flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def all_same(t: torch.Tensor) -> bool:
    """Whether every rank holds the same tensor, bit for bit (a collective)."""
    mine = t.detach().flatten().view(torch.int32).clone()
    lo, hi = mine.clone(), mine.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    return bool(torch.equal(lo, hi))


def simulate_tagc(codec, states, grads, shard=False):
    """One TAGC step of len(states) simulated ranks: OR / SUM of the bitmaps, SUM of the cells in
    float32 (rounded back to the cell type). Returns each rank's output (whole or its shard)."""
    world, n = len(states), grads[0].numel()
    p0 = codec.describe(0, states[0])
    bits = [torch.zeros(p0["count"], dtype=torch.int32) for _ in states]
    for g, st, b in zip(grads, states, bits):
        ptr = b.data_ptr()
        codec.encode(0, g, st, b)
        assert b.data_ptr() == ptr  # written in place
    red = bits[0].clone()
    for b in bits[1:]:
        red = red | b if p0["op"] == "bor" else red + b
    for st in states:
        codec.receive(0, st, red)
    p1 = codec.describe(1, states[0])
    dtype = torch.bfloat16 if p1["type"] == "bf16" else torch.float32
    cells = [torch.empty(p1["count"], dtype=dtype) for _ in states]
    for g, st, c in zip(grads, states, cells):
        codec.encode(1, g, st, c)
    summed = sum(c.float() for c in cells).to(dtype)
    outs = []
    for r, st in enumerate(states):
        s = p1["shard_count"]
        if shard:
            size = min(n, (r + 1) * -(-n // world)) - min(n, r * -(-n // world))
            out = torch.zeros(size)
            codec.receive(1, st, summed[r * s:(r + 1) * s].clone(), out)
        else:
            out = torch.zeros(n)
            codec.receive(1, st, summed, out)
        codec.finish_step(st)
        outs.append(out)
    return outs


def sharded_scatter(codec, states, grads):
    """Phase 0 of a gradcomp.Sharded step on len(states) simulated ranks: every rank's encode,
    then the all-to-all. Returns what each rank receives (slot r from rank r)."""
    world = len(states)
    p0 = codec.describe(0, states[0])
    slot = p0["slot_bytes"]
    sent = []
    for g, st in zip(grads, states):
        buf = torch.empty(p0["send_bytes"], dtype=torch.uint8)
        codec.encode(0, g, st, buf)
        sent.append(buf.view(world, slot))
    return [torch.cat([sent[r][j] for r in range(world)]) for j in range(world)]


def sharded_gather(codec, states):
    """Phase 1 of every simulated rank and the all-gather: the bytes every rank receives."""
    p1 = codec.describe(1, states[0])
    sent = []
    for st in states:
        buf = torch.empty(p1["send_bytes"], dtype=torch.uint8)
        codec.encode(1, None, st, buf)
        sent.append(buf)
    return torch.cat(sent)


def simulate_sharded(codec, states, grads, dtype=torch.float32):
    """One step of a gradcomp.Sharded codec on len(states) simulated ranks. Reduce-scatter mode:
    each rank's reduced shard; all-reduce mode: each rank's whole output (``dtype``)."""
    got = sharded_scatter(codec, states, grads)
    if codec.mode == "reduce_scatter":
        outs = []
        for st, recv in zip(states, got):
            out = torch.empty(st.shard[1], dtype=dtype)
            codec.receive(0, st, recv, out)
            outs.append(out)
        return outs
    for st, recv in zip(states, got):
        codec.receive(0, st, recv)
    every = sharded_gather(codec, states)
    outs = []
    for st in states:
        out = torch.empty(st.size, dtype=dtype)
        codec.receive(1, st, every, out)
        outs.append(out)
    return outs
