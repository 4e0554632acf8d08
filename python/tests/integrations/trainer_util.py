"""What the trainer tests share: launching (torchrun's environment variables on `world` CPU
processes; the trainer initialises the gloo process group itself; or a launcher's command line
as a user types it), the task and the checks."""

import os
import subprocess
import sys

import torch

import dist_util


def run(world: int, fn, *args):
    """What rank 0's ``fn(rank, world, *args)`` returned, launched as torchrun would."""
    return dist_util.run(world, fn, *args, torchrun=True)


def launch(args, env=None, timeout: float = 300) -> str:
    """Runs ``python args...`` (a launcher: ``-m torch.distributed.run ...``) with this test's
    gradcomp first on the path and ``env`` added; returns its stdout, then its stderr (apart:
    the processes' logs do not break into a printed line). Raises AssertionError with the
    output when it fails."""
    import gradcomp

    path = [os.path.dirname(os.path.dirname(gradcomp.__file__)), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p), "OMP_NUM_THREADS": "1", **(env or {})}
    done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=timeout)
    out = done.stdout + "\n" + done.stderr
    assert done.returncode == 0, out[-6000:]
    return out


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
