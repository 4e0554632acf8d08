"""Run a function on `world` CPU processes with torchrun's environment variables, as the
trainers expect to be launched; the trainer initialises the gloo process group itself."""

import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import dist_util


def _entry(rank, world, port, fn, args, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
                      GROUP_RANK="0", NODE_RANK="0", WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    torch.set_num_threads(1)
    result = fn(rank, world, *args)
    if rank == 0:
        torch.save(result, out)
    if dist.is_initialized():
        dist.destroy_process_group()
    # As dist_util: skip the interpreter's teardown, where gloo sometimes aborts after the work is done.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def run(world: int, fn, *args):
    """What rank 0's ``fn(rank, world, *args)`` returned."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "result.pt")
        mp.spawn(_entry, args=(world, dist_util._free_port(), fn, args, out), nprocs=world)
        return torch.load(out, weights_only=False)


def batches(count: int, batch: int = 8, seq: int = 32, first: int = 0):
    """``count`` batches of the test task (inputs, targets), each ``batch`` sequences."""
    from gradcomp import testing

    task = testing.MarkovTask()
    return [task.batch(first + i, batch, seq) for i in range(count)]


def held_out_loss(net) -> float:
    """The test task's loss on batches no run trains on."""
    with torch.no_grad():
        return sum(torch.nn.functional.cross_entropy(net(x).flatten(0, 1), y.flatten()).item()
                   for x, y in batches(4, 16, 32, first=10_000)) / 4


def hook_name(model) -> str:
    """The communication hook DDP reports for ``model`` ("" without one; None: not DDP)."""
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return None
    return model._get_ddp_logging_data().get("comm_hook", "")
