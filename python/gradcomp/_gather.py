"""Checkpoint bytes of every rank, gathered: what the DDP hook states and TAGC's share."""

import numpy as np
import torch
import torch.distributed as dist


def gather_blobs(blobs: dict, group) -> dict:
    """``{name: bytes}`` of this rank -> ``{name: uint8 tensor [world, len]}`` of every rank
    (a collective over ``group``; every rank holds the same names and lengths)."""
    names = sorted(blobs)
    arrays = [np.frombuffer(blobs[n], dtype=np.uint8) for n in names]
    mine = torch.from_numpy(np.concatenate(arrays) if arrays else np.zeros(0, np.uint8))
    world = dist.get_world_size(group)
    every = torch.empty(world * mine.numel(), dtype=torch.uint8)
    if mine.numel():
        dist.all_gather_into_tensor(every, mine, group=group)
    every = every.view(world, -1)
    out, at = {}, 0
    for n, a in zip(names, arrays):
        out[n] = every[:, at:at + a.size].clone()
        at += a.size
    return out
