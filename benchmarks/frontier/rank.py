"""One rank of the loss-against-bytes benchmark (run.py starts one process per rank).

Trains gradcomp.testing.TinyTransformer (byte-level, vocabulary 256) on English text under each
given method in turn, and rank 0 appends one JSON line per method and seed to the results file
as soon as the run is done (a crash loses the run in progress only).

The corpus (corpus()): the fortune cookies of Debian's fortunes package (every regular file of
/usr/share/games/fortunes except the .dat indexes and the .u8 links, name order), read as
bytes; the file HELD_OUT is the evaluation text, the others are the training text. Every run of
a seed sees the same model initialisation and the same batches: rank r's batch at step t
depends on (seed, t, r) only.

A method is a dict: label, optimizer ("adamw" or "sgd"), spec and options, and seed (run.py
sets it). Per-step methods wrap the model in DDP; spec is gradcomp.testing.register's
("fp32", "torch:powersgd", "tagc" or a codec name) and options the hook state's. spec
"localsteps" trains a full replica per rank without DDP and calls
gradcomp.localsteps.LocalSteps(net, **options) after every inner step. Specs "onebit" and
"zeroone" train a full replica per rank without DDP with gradcomp.optim.OneBitAdam or
ZeroOneAdam (AdamW's learning rate and decoupled weight decay) in place of AdamW: options
"warmup" (1-bit) and "freeze" (0-1) are fractions of the steps, the rest the optimizer's. Spec
"demo" trains a full replica per rank with gradcomp.optim.DeMo (its options; the method's "lr",
decoupled weight decay) in place of AdamW.
"""

import argparse
import hashlib
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from gradcomp import testing
from gradcomp.localsteps import LocalSteps
from gradcomp.optim import DeMo, OneBitAdam, ZeroOneAdam

FORTUNES = "/usr/share/games/fortunes"
PACKAGE = "fortunes"
HELD_OUT = "literature"
MODEL = dict(vocab=256, d=128, heads=4, layers=2, seq=64)
BATCH = 8  # sequences per rank and step
LR = {"adamw": 3e-3, "sgd": 0.3}
MOMENTUM = 0.9
CLIP = 1.0
WEIGHT_DECAY = 0.01
ADAMS = {"onebit": OneBitAdam, "zeroone": ZeroOneAdam, "demo": DeMo}  # specs whose optimizer does the exchange


def corpus():
    """(train bytes, held-out bytes, description) from FORTUNES."""
    missing = f"{FORTUNES}/{HELD_OUT} missing: install Debian's {PACKAGE} package " \
              f"(apt-get install -y --no-install-recommends {PACKAGE})"
    if not os.path.isfile(os.path.join(FORTUNES, HELD_OUT)):
        raise SystemExit(missing)
    train, held, names = [], b"", []
    for name in sorted(os.listdir(FORTUNES)):
        path = os.path.join(FORTUNES, name)
        if os.path.islink(path) or not os.path.isfile(path) or name.endswith((".dat", ".u8")):
            continue
        with open(path, "rb") as f:
            data = f.read()
        if name == HELD_OUT:
            held = data
        else:
            train.append(data)
            names.append(name)
    text = b"\n".join(train)
    sha = hashlib.sha256(text + b"\0" + held).hexdigest()[:16]
    return (torch.frombuffer(bytearray(text), dtype=torch.uint8).long(),
            torch.frombuffer(bytearray(held), dtype=torch.uint8).long(),
            {"source": FORTUNES, "package": PACKAGE, "train_files": names, "train_bytes": len(text),
             "held_out": HELD_OUT, "held_out_bytes": len(held), "sha256_16": sha})


def batch(text, seed, step, rank, n, seq):
    g = torch.Generator().manual_seed((seed * 1_000_003 + step) * 64 + rank)
    start = torch.randint(0, text.numel() - seq - 1, (n,), generator=g)
    idx = start[:, None] + torch.arange(seq + 1)
    x = text[idx]
    return x[:, :-1], x[:, 1:]


@torch.no_grad()
def held_out_loss(net, held, seq):
    """Mean next-byte cross entropy over every non-overlapping window of the held-out text."""
    n = (held.numel() - 1) // seq
    x = held[:n * seq].view(n, seq)
    y = held[1:n * seq + 1].view(n, seq)
    total = 0.0
    for i in range(0, n, 64):
        total += F.cross_entropy(net(x[i:i + 64]).flatten(0, 1), y[i:i + 64].flatten(), reduction="sum").item()
    return total / (n * seq)


def lr_at(step, steps, base):
    """Linear warm-up over 5% of the steps, cosine decay to 10% of base."""
    warm = max(1, steps // 20)
    if step < warm:
        return base * (step + 1) / warm
    t = (step - warm) / max(1, steps - warm)
    return base * (0.1 + 0.45 * (1 + math.cos(math.pi * t)))


def powersgd_bytes(net, rank_r, world):
    """Bytes a rank sends per compressed step under PowerSGD (one bucket): P (n x r) and Q (m x r)
    of every matrix its min_compression_rate (2) compresses, the other tensors uncompressed, all
    fp32 ring all-reduces; and what it compresses."""
    comp = raw = 0
    for p in net.parameters():
        if p.dim() > 1:
            n, m = p.shape[0], p.numel() // p.shape[0]
            if (n + m) * rank_r * 2 < n * m:
                comp += (n + m) * rank_r
                continue
        raw += p.numel()
    return 2 * (world - 1) * 4 * (comp + raw) // world, comp, raw


def exchange(net, method, steps):
    """(model to train, hook or LocalSteps state, PowerSGD's start_iter or None, options)."""
    spec, opts = method["spec"], dict(method.get("options", {}))
    if spec == "localsteps":
        return net, LocalSteps(net, **opts), None, opts
    if spec in ADAMS:
        return net, None, None, opts
    model = DDP(net, bucket_cap_mb=1024)  # one bucket: PowerSGD's callbacks need it (testing.train)
    psgd_start = opts.setdefault("start_iter", max(2, steps // 10)) if spec == "torch:powersgd" else None
    return model, testing.register(model, spec, **opts), psgd_start, opts


def wire(method, net, state, opts, steps, psgd_start, world):
    """Bytes a rank sends: per step on the compressed (or, for local steps, any) step and averaged
    over the whole run (ring figures), with what explains them."""
    n = sum(p.numel() for p in net.parameters())
    fp32_ring = 2 * (world - 1) * 4 * n // world
    spec, out = method["spec"], {"n": n, "fp32_ring": fp32_ring}
    dense = 0
    if spec == "fp32":
        comp, compressed_steps = fp32_ring, steps
    elif spec == "localsteps":
        comp, compressed_steps = state.wire_bytes / steps, steps
        out["syncs"] = state.syncs
    elif spec in ADAMS:  # state: the optimizer
        comp, compressed_steps = state.wire_bytes / steps, steps
        out.update(exchanges=getattr(state, "exchanges", steps), var_updates=getattr(state, "var_updates", 0))
    elif spec == "torch:powersgd":
        comp, pc, pr = powersgd_bytes(net, opts.get("rank", 4), world)
        out.update(powersgd_start_iter=psgd_start, powersgd_compressed_elements=pc, powersgd_raw_elements=pr)
        compressed_steps = steps - psgd_start
        dense = psgd_start * fp32_ring
    elif spec == "tagc":
        compressed_steps = steps
        comp = 2 * (world - 1) * state.bytes_sent / world / steps  # two all-reduces
    else:
        compressed_steps = steps
        comp = state.wire_bytes / steps
        out["bytes_per_step"] = state.bytes_per_step()
        if getattr(state, "paths", None):
            out["paths"] = sorted(set(state.paths.values()))
    out.update(wire_per_step=comp, wire_mean=(comp * compressed_steps + dense) / steps, compressed_steps=compressed_steps)
    if hasattr(state, "peel_fraction"):
        out["peeled"] = state.peel_fraction()
    return out


def run(method, text, held, steps, evals):
    rank, world = dist.get_rank(), dist.get_world_size()
    seed = method["seed"]
    torch.manual_seed(seed)
    net = testing.TinyTransformer(**MODEL)
    model, state, psgd_start, opts = exchange(net, method, steps)
    sync = state if method["spec"] == "localsteps" else None
    name = method["optimizer"]
    base = method.get("lr", LR[name])
    if method["spec"] in ADAMS:
        o = dict(opts)
        if "warmup" in o:
            o["warmup_steps"] = max(1, round(o.pop("warmup") * steps))
        if "freeze" in o:
            o["var_freeze_step"] = max(1, round(o.pop("freeze") * steps))
        if method["spec"] == "demo":
            opt = state = DeMo(net.parameters(), lr=base, weight_decay=WEIGHT_DECAY, **o)
        else:
            opt = state = ADAMS[method["spec"]](net.parameters(), lr=base, weight_decay=WEIGHT_DECAY,
                                                decoupled_weight_decay=True, **o)
    elif name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=base, momentum=MOMENTUM)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=base, weight_decay=WEIGHT_DECAY)
    losses, curve = [], []
    dist.barrier()
    t0 = time.perf_counter()
    for step in range(steps):
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step, steps, base)
        x, y = batch(text, seed, step, rank, BATCH, MODEL["seq"])
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
        opt.step()
        if sync is not None:
            sync.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            break
        if (step + 1) in evals and rank == 0:
            curve.append([step + 1, held_out_loss(net, held, MODEL["seq"])])
    if sync is not None:
        sync.finish()
    if hasattr(opt, "synchronize"):
        opt.synchronize()  # 0-1 Adam's local window, if one is open
    seconds = time.perf_counter() - t0
    ev = held_out_loss(net, held, MODEL["seq"]) if math.isfinite(losses[-1]) else float("nan")
    flat = torch.cat([p.detach().flatten() for p in net.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    replicas_equal = all(torch.equal(gathered[0], t) for t in gathered[1:])
    out = wire(method, net, state, opts, steps, psgd_start, world)
    return {**method, "options": opts, "steps": steps, "eval": ev, "eval_curve": curve, "losses": losses,
            "seconds": seconds, "replicas_equal": replicas_equal, **out}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--methods", required=True, help="a JSON file: the runs (methods with a seed), one after another")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--out", required=True, help="JSON lines file rank 0 appends to")
    a = p.parse_args()
    testing.init_process_group(a.rank, a.world, a.port, threads=1)
    text, held, info = corpus()
    with open(a.methods) as f:
        methods = json.load(f)
    evals = {a.steps * k // 8 for k in range(1, 8)}
    for m in methods:
        r = run(m, text, held, a.steps, evals)
        if a.rank == 0:
            r.update(corpus=info, world=a.world, model=MODEL, batch=BATCH, host=os.uname().nodename, cores=os.cpu_count(),
                     date=time.strftime("%Y-%m-%d"), torch=torch.__version__)
            with open(a.out, "a") as f:
                f.write(json.dumps(r) + "\n")
            print(f"{m['label']:40s} seed {m['seed']} eval {r['eval']:.4f} bytes {r['wire_mean'] / 1e3:9.1f} kB  "
                  f"{r['seconds']:.0f} s", flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
