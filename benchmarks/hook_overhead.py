"""The DDP hook's own time per step (gradcomp.ddp.HookState.hook_seconds) on the end-to-end
benchmark's model, against the time of the codec calls alone on the same gradients.

Two ranks over gloo on loopback train benchmarks/e2e's TinyTransformer (0.44M parameters) with
``compress_hook`` for each codec; rank 0 reports the hook's seconds per step (encoding before the
all-gather and decoding after it) and the floor: the same compress and accumulate calls on the
same parameter sizes, timed in a loop without DDP. The difference is what the hook adds around
the codec (Python, bookkeeping, copies). Prints a Markdown table and writes JSON:

    python benchmarks/hook_overhead.py [--steps 30] [--out hook_overhead.json]
"""

import argparse
import json
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

import gradcomp
from gradcomp import ddp, testing

MODEL = dict(vocab=256, d=128, heads=4, layers=2, seq=64)  # benchmarks/e2e's model
CODECS = [("topk", {"density": 0.01}), ("int8", {}), ("int4", {"error_feedback": True})]


def floor_seconds(model, codec, options, world, repeats=20):
    """Seconds of one step's codec calls alone: every compressed parameter compressed once and
    its world payloads accumulated (the payload of this rank, world times)."""
    c = gradcomp.Compressor(codec, **options)
    jobs = []
    for p in model.parameters():
        if p.numel() >= 1024:
            g = torch.randn(p.numel())
            out = torch.empty(c.max_payload_bytes(p.numel()), dtype=torch.uint8)
            jobs.append((g, c.make_state(p.numel()), out, torch.zeros(p.numel())))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for g, st, out, acc in jobs:
            n = c.compress(g, st, out)
            for _ in range(world):
                c.accumulate(out[:n], acc)
        best = min(best, time.perf_counter() - t0)
    return best


def rank_main(rank, world, port, steps, out):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    testing.init_process_group(rank, world, port, threads=1)
    rows = []
    for codec, options in CODECS:
        torch.manual_seed(0)
        model = testing.TinyTransformer(**MODEL)
        net = DDP(model)
        state = ddp.HookState(model, codec, path="gather", **options)
        net.register_comm_hook(state, ddp.compress_hook)
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        task = testing.MarkovTask(vocab=MODEL["vocab"])
        warm = 5
        for step in range(steps + warm):
            if step == warm:
                state.hook_seconds, t0 = 0.0, time.perf_counter()
            x, y = task.batch(step * world + rank, 8, MODEL["seq"])
            loss = torch.nn.functional.cross_entropy(net(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
        step_s = (time.perf_counter() - t0) / steps
        rows.append({"codec": codec, "options": options, "hook_ms": 1e3 * state.hook_seconds / steps,
                     "floor_ms": 1e3 * floor_seconds(model, codec, options, world), "step_ms": 1e3 * step_s})
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"world": world, "steps": steps, "threads": 1, "rows": rows}, f, indent=1)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--out", default="hook_overhead.json")
    a = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(a.world, port, a.steps, a.out), nprocs=a.world)
    rows = json.load(open(a.out))["rows"]
    print(f"| codec | hook ms / step | codec calls alone ms | hook - codec ms | step ms |  ({a.world} ranks, gloo, 1 thread)")
    print("|---|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['codec']} | {r['hook_ms']:.2f} | {r['floor_ms']:.2f} | {r['hook_ms'] - r['floor_ms']:.2f} | {r['step_ms']:.1f} |")


if __name__ == "__main__":
    main()
