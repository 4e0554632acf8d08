"""Runs a function on `world` gloo ranks (torch.multiprocessing.spawn) and returns what
rank 0's function returned."""

import os
import socket
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from gradcomp import testing


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, world, port, fn, args, out):
    testing.init_process_group(rank, world, port)
    try:
        result = fn(rank, world, *args)
        if rank == 0:
            torch.save(result, out)
    finally:
        dist.destroy_process_group()


def run(world: int, fn, *args):
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "result.pt")
        mp.spawn(_entry, args=(world, _free_port(), fn, args, out), nprocs=world)
        return torch.load(out, weights_only=False)


def all_same(t: torch.Tensor) -> bool:
    """Whether every rank holds the same tensor, bit for bit (a collective)."""
    mine = t.detach().flatten().view(torch.int32).clone()
    lo, hi = mine.clone(), mine.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    return bool(torch.equal(lo, hi))
