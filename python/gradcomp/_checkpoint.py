"""Collective checkpoints of codec states and their restore, at the saved world size or at
another (the elastic restore): what the DDP hook states (:mod:`gradcomp.ddp`), TAGC's states
(:mod:`gradcomp.tagc`), the FSDP2 owners (:mod:`gradcomp.fsdp`) and the exchange layer's flows
(local steps, the optimizers) share.

``state_dict()`` gathers every rank's checkpoint bytes in one collective (:func:`gather_blobs`),
so that every rank holds the same dict and rank 0 can ``torch.save`` one file.
``load_state_dict()`` restores each rank's own row at the saved world size, exactly. At another
world size one rule holds: **what the saved ranks still owe the update is kept**
(:func:`owed_total`, :func:`owed_share`). The sharded codecs and TAGC keep it by the library's
elastic restore (:func:`restore_rows`: the residuals' sum, re-sliced by the new shards); a
residual over the whole tensor (the gather and summable paths) is the same on every new rank,
its share of the total (:func:`restore_mean` for the DDP hooks, the flows' ``restore_elastic``
for local steps); a DDP parameter that changes path takes what it owes on the new path
(:func:`restore_owed`).
"""

import numpy as np
import torch
import torch.distributed as dist


class GroupMember:
    """A state class's process group (``process_group``; None: the world): its size and this
    rank."""

    process_group = None

    def world(self) -> int:
        """The size of the process group."""
        return dist.get_world_size(self.process_group)

    def rank(self) -> int:
        """This process's rank in the process group."""
        return dist.get_rank(self.process_group)


def check_identity(sd: dict, fmt: int, identity: str, who: str) -> None:
    """Raises ValueError unless the state dict ``sd`` has format ``fmt`` and was saved by an
    object of ``identity`` (its configuration as a string); ``who`` names the caller."""
    if sd.get("format") != fmt:
        raise ValueError(f"{who}: checkpoint format {sd.get('format')!r}, expected {fmt}")
    if sd.get("identity") != identity:
        raise ValueError(f"{who}: checkpoint of {sd.get('identity')!r}, this one is {identity!r}")


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


def shard_of(n: int, world: int, rank: int):
    """(offset, count) of shard ``rank`` of ``n`` elements over ``world`` (summable::shard_of)."""
    size = -(-n // world)
    first = min(n, rank * size)
    return first, min(n, first + size) - first


def restore_rows(codec, st, rows, old: int, world: int, rank: int) -> None:
    """Restores a :class:`gradcomp.Sharded` or TAGC state from every saved rank's checkpoint
    (``rows[r]``, uint8 tensors): this rank's own row at the saved world size, else the
    library's elastic restore (``restore_elastic``)."""
    if old == world:
        codec.load_checkpoint(st, rows[rank].numpy().tobytes())
    else:
        codec.restore_elastic(st, [rows[r].numpy().tobytes() for r in range(old)])


def set_residual(st, values: np.ndarray) -> None:
    """Overwrites a gather-path state's residual, on the CPU or its CUDA device."""
    if st.device == "cpu":
        np.asarray(st.residual)[:] = values
    else:
        st.residual.copy_(torch.from_numpy(values))


def owed_total(residuals, averaged: bool = False):
    """What the residuals saved by ``len(residuals)`` ranks (each over the whole tensor; None or
    empty where a rank keeps none) still owe the update, float64 in rank order: their sum where
    the update sums the ranks' contributions (local steps, the optimizers, every sharded path:
    each rank sends its share), their mean with ``averaged`` (the DDP hooks' gather path: each
    rank's residual is of its own gradient and the update is the ranks' mean). None: nothing owed."""
    kept = [np.asarray(e) for e in residuals if e is not None and np.asarray(e).shape[0]]
    if not kept:
        return None
    total = np.zeros(kept[0].shape[0], dtype=np.float64)
    for e in kept:
        total += e
    return total / len(residuals) if averaged else total


def owed_share(total: np.ndarray, world: int, averaged: bool = False) -> np.ndarray:
    """Each of ``world`` new ranks' residual over the whole tensor for the ``total`` owed
    (:func:`owed_total`): every rank the same, ``total / world`` where the update sums (the ranks'
    residuals add up to it), ``total`` where it averages (their mean is it); rounded once to
    float32. (A rank holding one shard takes ``total``'s slice of its shard instead.)"""
    return (total if averaged else total / world).astype(np.float32)


def every_rank(blobs: dict, world: int, group) -> dict:
    """{name: bytes} of this rank -> {name: [uint8 tensor of every rank]} (a collective at
    ``world`` > 1; a single process needs no process group)."""
    if world > 1:
        return gather_blobs(blobs, group, ragged=True)
    return {k: [torch.frombuffer(bytearray(v), dtype=torch.uint8)] for k, v in blobs.items()}


def _gather_residuals(compressor, n: int, rows):
    """Every saved rank's gather-path residual (float64) and rank 0's step, from the rows' bytes."""
    tmp, out = compressor.make_state(n), []
    for r in range(len(rows)):
        tmp.restore(rows[r].numpy().tobytes())
        out.append(np.asarray(tmp.residual, dtype=np.float64))
    tmp.restore(rows[0].numpy().tobytes())
    return out, tmp.step


def restore_mean(compressor, st, rows: torch.Tensor, old: int, world: int, rank: int) -> None:
    """Restores a gather-path state (:class:`gradcomp.State`) from the saved rows
    ``[old, checkpoint bytes]``: this rank's own row at the saved world size; at another every
    rank takes the mean residual (:func:`owed_share` of the averaged update), and the step and
    thresholds of its own row if it had one, else rank 0's."""
    if old == world:
        st.restore(rows[rank].numpy().tobytes())
        return
    st.restore(rows[rank if rank < old else 0].numpy().tobytes())
    if st.residual.shape[0]:
        set_residual(st, owed_share(owed_total(_gather_residuals(compressor, st.size, rows)[0], True), world, True))


def _hook_codecs(hook, name: str):
    """The one place that reads a :class:`gradcomp.ddp.HookState`'s insides: the elements and
    dtype of compressed parameter ``name``, the hook's gather-path Compressor and its Sharded."""
    n, dtype = hook._compressed[name]
    return n, dtype, hook.compressor, hook.sharded


def owed(hook, name: str, path: str, sd: dict):
    """What a parameter saved on ``path`` by a :class:`gradcomp.ddp.HookState` still owes the
    averaged update (float64, whole parameter), and its saved step."""
    n, dtype, compressor, sharded = _hook_codecs(hook, name)
    if path == "gather":
        residuals, step = _gather_residuals(compressor, n, sd["states"][name])
        total = owed_total(residuals, averaged=True)
        return (np.zeros(n) if total is None else total), step
    old, total, step = sd["world_size"], np.zeros(n, dtype=np.float64), 0
    for r, blob in enumerate(sd["sharded"][name]):
        tmp = sharded.make_state(n, old, r, dtype)
        sharded.load_checkpoint(tmp, blob.numpy().tobytes())
        for j in range(old):
            off, count = shard_of(n, old, j)
            if count and tmp.sender_residual(j).shape[0]:
                total[off:off + count] += np.asarray(tmp.sender_residual(j))
        off, count = tmp.shard
        if count and tmp.owner_residual.shape[0]:
            total[off:off + count] += np.asarray(tmp.owner_residual)
        step = tmp.step
    return total, step


def restore_owed(hook, name: str, was: str, sd: dict) -> None:
    """Restores a parameter of a :class:`gradcomp.ddp.HookState` saved on the other path
    (``was``): what it owes goes to every rank's gather residual (:func:`owed_share`), or to each
    rank's residual for its own shard; the step follows on the gather path."""
    total, step = owed(hook, name, was, sd)
    if hook.paths[name] == "gather":
        st = hook.states[name]
        st.step = step
        if st.residual.shape[0]:
            set_residual(st, owed_share(total, hook.world(), averaged=True))
        return
    st = hook.sharded_states[name]
    off, count = st.shard
    mine = st.sender_residual(st.rank)
    if count and mine.shape[0]:
        mine[:] = total[off:off + count].astype(np.float32)
