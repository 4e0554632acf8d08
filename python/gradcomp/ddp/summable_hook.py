"""Summable casts (``fp32``, ``bf16``, ``fp16``) under :func:`gradcomp.ddp.compress_hook`: the
bucket divided by the world size, cast to the wire type with the library's conversion,
all-reduced (SUM in the wire type, as PyTorch's own fp16 / bf16 hooks do) and decoded back into
the bucket."""

import torch
import torch.distributed as dist

from .hook_state import HookState

_WIRE_DTYPE = {"bf16": torch.bfloat16, "fp16": torch.float16}


def reduce_cast(state: HookState, bucket) -> torch.futures.Future:
    """Averages a float32 bucket by one all-reduce of its cast (the state's summable codec)."""
    buf, pg, world = bucket.buffer(), state.process_group, state.world()
    c = state.compressor
    if buf.dtype != torch.float32:
        raise TypeError("gradcomp.ddp.compress_hook: summable casts expect float32 buckets")
    if c.wire_bits == 32:
        buf.div_(world)
        state.bytes_sent += buf.numel() * 4
        state.wire_bytes += 2 * (world - 1) * buf.numel() * 4 // world
        return dist.all_reduce(buf, group=pg, async_op=True).get_future().then(lambda f: f.value()[0])
    wire = state._wire.get(bucket.index())
    if wire is None or wire.numel() != buf.numel():
        wire = state._wire[bucket.index()] = torch.empty(buf.numel(), dtype=_WIRE_DTYPE[state.codec], device=buf.device)
    c.encode_cast(buf, wire, 1.0 / world)
    state.bytes_sent += wire.numel() * wire.element_size()
    state.wire_bytes += 2 * (world - 1) * wire.numel() * wire.element_size() // world

    def done(_):
        c.decode_cast(wire, buf)
        return buf

    return dist.all_reduce(wire, group=pg, async_op=True).get_future().then(done)
