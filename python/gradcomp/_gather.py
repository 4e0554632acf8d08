"""Checkpoint bytes of every rank, gathered: what the DDP hook states, TAGC's and the sharded
codecs' share."""

import numpy as np
import torch
import torch.distributed as dist


def collective_device(group) -> torch.device:
    """Where the group's collectives take their tensors: this rank's CUDA device for NCCL, else
    the CPU."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def gather_blobs(blobs: dict, group, ragged: bool = False) -> dict:
    """``{name: bytes}`` of this rank -> every rank's, by name (a collective over ``group``;
    every rank holds the same names).

    Without ``ragged`` every rank's blob of a name has the same length and the result is
    ``{name: uint8 tensor [world, len]}``; with it the lengths may differ (they are gathered
    first) and the result is ``{name: [uint8 tensor of rank 0, ..., of rank world - 1]}``.
    """
    names = sorted(blobs)
    world = dist.get_world_size(group)
    device = collective_device(group)
    arrays = [np.frombuffer(blobs[n], dtype=np.uint8) for n in names]
    if ragged:
        lengths = torch.tensor([a.size for a in arrays], dtype=torch.int64, device=device)
        every = torch.empty(world * lengths.numel(), dtype=torch.int64, device=device)
        if lengths.numel():
            dist.all_gather_into_tensor(every, lengths, group=group)
        every = every.view(world, lengths.numel()).cpu()
        longest = every.max(0).values.tolist() if lengths.numel() else []
        padded = {n: np.pad(a, (0, most - a.size)).tobytes() for n, a, most in zip(names, arrays, longest)}
        rows = gather_blobs(padded, group)
        return {n: [rows[n][r, :int(every[r, k])].clone() for r in range(world)] for k, n in enumerate(names)}
    mine = torch.from_numpy(np.concatenate(arrays) if arrays else np.zeros(0, np.uint8)).to(device)
    every = torch.empty(world * mine.numel(), dtype=torch.uint8, device=device)
    if mine.numel():
        dist.all_gather_into_tensor(every, mine, group=group)
    every = every.view(world, mine.numel()).cpu()
    out, at = {}, 0
    for n, a in zip(names, arrays):
        out[n] = every[:, at:at + a.size].clone()
        at += a.size
    return out
