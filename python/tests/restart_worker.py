"""A training run for test_restart.py, launched by torchrun (or any launcher that sets RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT): a small transformer on the Markov task with one
gradcomp exchange, checkpointed by gradcomp.restart, and optionally one rank SIGKILLed at a
chosen step and point of the first attempt.

Every step's data comes from the step number and the rank; the inputs also lose tokens by a
draw from torch's global generator (seeded per rank), so a resumed run matches an uninterrupted
one only if the generator's state was restored too.

    torchrun --standalone --nproc-per-node=2 --max-restarts=1 restart_worker.py \\
        --variant topk --steps 30 --dir CKPT --out RESULT [--kill-step K --kill-rank R --kill-at WHERE]

Rank 0 saves ``{"params": {variant: flat parameters}, "same": {variant: replicas identical},
"starts": {variant: first step}}`` to RESULT; each attempt's rank 0 also writes the step it
started at to RESULT.start<attempt>, and the doomed rank writes RESULT.killed before it dies.
"""

import argparse
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

from gradcomp import restart, testing

MODEL = {"d": 32, "heads": 2, "layers": 1}
SEQ, BATCH = 16, 4
VARIANTS = ("topk", "tagc", "fsdp-tagc", "sharded", "localsteps", "onebit", "demo")


def build(variant: str):
    """(net, the module to call, optimizer, the states to checkpoint)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gradcomp import ddp

    torch.manual_seed(0)
    net = testing.TinyTransformer(seq=SEQ, **MODEL)
    if variant == "fsdp-tagc":
        from torch.distributed.fsdp import fully_shard

        from gradcomp import fsdp

        for b in net.blocks:
            fully_shard(b)
        fully_shard(net)
        rs = fsdp.attach(net, "tagc")
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        return net, net, opt, {"model": restart.ModelState(net, opt), "reduce_scatter": rs}
    if variant == "localsteps":  # no DDP: every rank a replica, synchronised every 4 steps
        from gradcomp.localsteps import LocalSteps

        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        sync = LocalSteps(net, "int4", path="sharded", period=4, fragments=2, overlap=1, error_feedback=True)
        return net, net, opt, {"model": net, "optimizer": opt, "sync": sync}
    if variant == "onebit":  # no DDP: every rank a replica, the optimizer exchanges (fp32 warm-up, then sign + EF)
        from gradcomp.optim import OneBitAdam

        opt = OneBitAdam(net.parameters(), lr=0.01, warmup_steps=8)
        return net, net, opt, {"model": net, "optimizer": opt}
    if variant == "demo":  # no DDP: every rank a replica and its own momentum (DCT top-k exchanged)
        from gradcomp.optim import DeMo

        opt = DeMo(net.parameters(), lr=0.003, cols=1024, k_per_row=16)
        return net, net, opt, {"model": net, "optimizer": opt}
    model = DDP(net)
    if variant == "tagc":
        hook = ddp.TagcHookState(model)
        model.register_comm_hook(hook, ddp.tagc_hook)
    else:
        hook = ddp.HookState(model, "topk", density=0.01, path="sharded" if variant == "sharded" else "gather")
        model.register_comm_hook(hook, ddp.compress_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return net, model, opt, {"model": net, "optimizer": opt, "hook": hook}


def die(marker: str) -> None:
    """SIGKILLs this process, leaving ``marker`` (a file) behind to say so."""
    with open(marker, "w") as f:
        f.write(str(os.getpid()))
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def run(variant: str, args, rank: int, attempt: int):
    net, model, opt, states = build(variant)
    torch.manual_seed(1000 + rank)  # the token dropout's generator, one stream per rank
    doomed = attempt == 0 and rank == args.kill_rank
    start, ckpt = 0, None
    if args.dir:
        ckpt = restart.Checkpointer(args.dir, states, every=args.every, keep=2)
        start = ckpt.resume()
    if rank == 0 and args.out:
        with open(f"{args.out}.start{attempt}", "w") as f:
            f.write(str(start))
    task = testing.MarkovTask(vocab=net.tok.num_embeddings)
    for step in range(start, args.steps):
        x, y = task.batch(step * 4096 + rank, BATCH, SEQ)
        x = torch.where(torch.rand(x.shape) < 0.1, torch.zeros_like(x), x)
        kill = doomed and step == args.kill_step
        if kill and args.kill_at == "forward":
            die(args.out + ".killed")  # the other rank waits in the backward pass's collective
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if kill and args.kill_at == "backward":
            die(args.out + ".killed")
        opt.step()
        if "sync" in states:
            states["sync"].step()
        if kill and args.kill_at in ("save-partial", "save-written"):
            stage = args.kill_at[len("save-"):]
            restart._fault = lambda at, path: die(args.out + ".killed") if at == stage else None
        if ckpt is not None:
            ckpt.maybe_save(step + 1)
    if "sync" in states:
        states["sync"].finish()
    if variant == "fsdp-tagc":
        flat = torch.cat([t.flatten() for t in restart.ModelState(net).state_dict()["model"].values()])
    else:
        flat = torch.cat([p.detach().flatten() for p in net.parameters()])
    lo, hi = flat.view(torch.int32).clone(), flat.view(torch.int32).clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    return flat, bool(torch.equal(lo, hi)), start


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--variant", default="topk", help="one of %s, or several, comma-separated" % (VARIANTS,))
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--every", type=int, default=5)
    p.add_argument("--dir", default=None, help="checkpoint directory (none: no checkpoints)")
    p.add_argument("--out", default=None)
    p.add_argument("--kill-step", type=int, default=-1)
    p.add_argument("--kill-rank", type=int, default=-1)
    p.add_argument("--kill-at", default="forward", choices=["forward", "backward", "save-partial", "save-written"])
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, attempt = dist.get_rank(), int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    result = {"params": {}, "same": {}, "starts": {}}
    for variant in args.variant.split(","):
        flat, same, start = run(variant, args, rank, attempt)
        result["params"][variant], result["same"][variant], result["starts"][variant] = flat, same, start
    if rank == 0 and args.out:
        torch.save(result, args.out)
    dist.barrier()
    dist.destroy_process_group()
    # Done and saved: leave without the interpreter's teardown (dist_util.py says why).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
