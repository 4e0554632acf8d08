"""What the replicas' wrappers (local steps, the optimizers) share: a decode whose failure every
rank learns of before anything is applied."""

import torch
import torch.distributed as dist

from ._core import Error


def checked(decode, world: int, group, who: str) -> int:
    """Runs ``decode()``; with several ranks one int32 MAX all-reduce tells every rank whether any
    rank's failed, and each then raises :class:`gradcomp.Error` (its own, or one with code
    ``"peer_error"``). Returns the bytes the all-reduce put on the wire (ring figure)."""
    error = None
    try:
        decode()
    except Error as e:
        error = e
    wire = 0
    if world > 1:
        flag = torch.tensor([0 if error is None else 1], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
        wire = 8 * (world - 1) // world
        if error is None and int(flag) != 0:
            error = Error(f"{who}: another rank's payload failed its checks")
            error.code = "peer_error"
    if error is not None:
        raise error
    return wire
