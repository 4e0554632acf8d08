"""One rank of the loss-against-bytes benchmark (run.py starts one process per rank).

Trains gradcomp.testing.TinyTransformer (byte-level, vocabulary 256) on English text with DDP
over gloo under each given method in turn, and rank 0 appends one JSON line per method to the
results file as soon as the method is done (a crash loses the method in progress only).

The corpus (corpus()): every distinct file of /usr/share/common-licenses (symbolic links
resolved, name order), read as bytes; the file HELD_OUT is the evaluation text, the others are
the training text. Every method sees the same model initialisation and the same batches: rank
r's batch at step t depends on (seed, t, r) only.

A method is a dict: label, optimizer ("adamw" or "sgd"), spec (gradcomp.testing.register's:
"fp32", "torch:powersgd", "tagc" or a codec name), options (the hook state's), and optionally
warmup (dense fp32 all-reduce steps before the codec starts, as PowerSGD's start_powerSGD_iter)
and dgc (DGC momentum correction with this factor; the optimizer then has no momentum of its
own).
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

from gradcomp import ddp, testing

LICENSES = "/usr/share/common-licenses"
HELD_OUT = "MPL-2.0"
MODEL = dict(vocab=256, d=128, heads=4, layers=2, seq=64)
BATCH = 8  # sequences per rank and step
LR = {"adamw": 3e-3, "sgd": 0.3}
MOMENTUM = 0.9
CLIP = 1.0


def corpus():
    """(train bytes, held-out bytes, description) from LICENSES."""
    seen, train, held, names = set(), [], b"", []
    for name in sorted(os.listdir(LICENSES)):
        path = os.path.realpath(os.path.join(LICENSES, name))
        if path in seen or not os.path.isfile(path):
            continue
        seen.add(path)
        with open(path, "rb") as f:
            data = f.read()
        if os.path.basename(path) == HELD_OUT:
            held = data
        else:
            train.append(data)
            names.append(os.path.basename(path))
    text = b"\n\n".join(train)
    if not held:
        raise SystemExit(f"{LICENSES}/{HELD_OUT} missing: the held-out text")
    sha = hashlib.sha256(text + b"\0" + held).hexdigest()[:16]
    return (torch.frombuffer(bytearray(text), dtype=torch.uint8).long(),
            torch.frombuffer(bytearray(held), dtype=torch.uint8).long(),
            {"train_files": names, "train_bytes": len(text), "held_out": HELD_OUT, "held_out_bytes": len(held),
             "sha256_16": sha})


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


class Wrapped:
    """A gradcomp HookState behind a dense warm-up and/or DGC momentum correction.

    warmup: for steps < warmup the bucket is averaged by a plain fp32 all-reduce (the codec's
    states stay untouched; with dgc, of every parameter's u = m u + g). dgc = m: per compressed parameter u = m u + g is what the codec
    compresses (its residual is DGC's accumulated v); where a value was sent, u is zeroed
    (momentum factor masking). Parameters sent raw get u = m u + g unmasked (plain momentum).
    """

    def __init__(self, inner, warmup=0, dgc=None):
        self.inner, self.warmup, self.dgc = inner, warmup, dgc
        self.step = 0
        self.dense_wire = 0
        self.u = {}

    def _momentum(self, bucket):
        st, world = self.inner, self.inner.world()
        grads = [g.view(-1) for g in bucket.gradients()]
        names = [st.name_of(p) for p in bucket.parameters()]
        checks = []
        for g, name in zip(grads, names):
            u = self.u.get(name)
            if u is None:
                u = self.u[name] = torch.zeros_like(g)
            u.mul_(self.dgc).add_(g)
            g.copy_(u)
            path = st.paths.get(name)
            if path == "gather":
                e = torch.from_numpy(st.states[name].residual)
                checks.append((u, [(0, e, e.clone(), u.clone())]))
            elif path == "sharded":
                ss = st.sharded_states[name]
                parts = []
                for j in range(world):
                    first, count = ddp.shard_of(g.numel(), world, j)
                    if count:
                        e = torch.from_numpy(ss.sender_residual(j))
                        parts.append((first, e, e.clone(), u[first:first + count] / world))
                checks.append((u, parts))
        return checks

    def __call__(self, bucket):
        if self.step < self.warmup:
            buf, world = bucket.buffer(), self.inner.world()
            if self.dgc is not None:  # plain momentum, u = m u + g, on every parameter
                for g, p in zip(bucket.gradients(), bucket.parameters()):
                    name = self.inner.name_of(p)
                    u = self.u.setdefault(name, torch.zeros_like(g.view(-1)))
                    g.view(-1).copy_(u.mul_(self.dgc).add_(g.view(-1)))
            buf.div_(world)
            self.dense_wire += 2 * (world - 1) * buf.numel() * 4 // world
            return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])
        checks = self._momentum(bucket) if self.dgc is not None else []
        fut = ddp.compress_hook(self.inner, bucket)  # compresses before it returns
        for u, parts in checks:
            for first, e_after, e_before, g in parts:
                x = g + e_before  # what the codec compressed: the gradient plus the residual
                sent = e_after != x
                u[first:first + e_after.numel()].masked_fill_(sent, 0.0)
        return fut


def wrapped_hook(state: Wrapped, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    return state(bucket)


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


def run(method, text, held, steps, seed, evals):
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(seed)
    net = testing.TinyTransformer(**MODEL)
    n = sum(p.numel() for p in net.parameters())
    model = DDP(net, bucket_cap_mb=1024)  # one bucket: PowerSGD's callbacks need it (testing.train)
    spec, opts = method["spec"], dict(method.get("options", {}))
    fp32_ring = 2 * (world - 1) * 4 * n // world
    hook_state, wrap, psgd_start = None, None, None
    if spec == "torch:powersgd":
        psgd_start = opts.setdefault("start_iter", max(2, steps // 10))
    if method.get("warmup") or method.get("dgc") is not None:
        hook_state = ddp.HookState(model, spec, **opts)
        wrap = Wrapped(hook_state, method.get("warmup", 0), method.get("dgc"))
        model.register_comm_hook(wrap, wrapped_hook)
    else:
        hook_state = testing.register(model, spec, **opts)
    name = method["optimizer"]
    base = method.get("lr", LR[name])
    if name == "sgd":
        mom = 0.0 if method.get("dgc") is not None else MOMENTUM
        opt = torch.optim.SGD(model.parameters(), lr=base, momentum=mom)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=base, weight_decay=0.01)
    losses, curve = [], []
    dist.barrier()
    t0 = time.perf_counter()
    for step in range(steps):
        if wrap is not None:
            wrap.step = step
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step, steps, base)
        x, y = batch(text, seed, step, rank, BATCH, MODEL["seq"])
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), CLIP)
        opt.step()
        losses.append(loss.item())
        if not math.isfinite(losses[-1]):
            break
        if (step + 1) in evals and rank == 0:
            curve.append([step + 1, held_out_loss(net, held, MODEL["seq"])])
    seconds = time.perf_counter() - t0
    ev = held_out_loss(net, held, MODEL["seq"]) if math.isfinite(losses[-1]) else float("nan")
    flat = torch.cat([p.detach().flatten() for p in net.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    replicas_equal = all(torch.equal(gathered[0], t) for t in gathered[1:])
    # Bytes a rank sends per step on the compressed steps (ring figures) and over the run.
    out = {"n": n, "fp32_ring": fp32_ring}
    dense = 0
    if spec == "fp32":
        comp, compressed_steps = fp32_ring, steps
    elif spec == "torch:powersgd":
        comp, pc, pr = powersgd_bytes(net, opts.get("rank", 4), world)
        out.update(powersgd_start_iter=psgd_start, powersgd_compressed_elements=pc, powersgd_raw_elements=pr)
        compressed_steps = steps - psgd_start
        dense = psgd_start * fp32_ring
    elif spec == "tagc":
        compressed_steps = steps
        comp = 2 * (world - 1) * hook_state.bytes_sent / world / steps  # two all-reduces
    else:
        compressed_steps = steps - (wrap.warmup if wrap else 0)
        comp = hook_state.wire_bytes / compressed_steps
        dense = wrap.dense_wire if wrap else 0
        out["bytes_per_step"] = hook_state.bytes_per_step()
        if getattr(hook_state, "paths", None):
            out["paths"] = sorted(set(hook_state.paths.values()))
    out.update(wire_per_step=comp, wire_mean=(comp * compressed_steps + dense) / steps, compressed_steps=compressed_steps)
    if hasattr(hook_state, "peel_fraction"):
        out["peeled"] = hook_state.peel_fraction()
    return {**method, "options": opts, "steps": steps, "seed": seed, "eval": ev, "eval_curve": curve,
            "losses": losses, "seconds": seconds, "replicas_equal": replicas_equal, **out}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--methods", required=True, help="a JSON file: the list of methods, trained one after another")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="JSON lines file rank 0 appends to")
    a = p.parse_args()
    testing.init_process_group(a.rank, a.world, a.port, threads=1)
    text, held, info = corpus()
    with open(a.methods) as f:
        methods = json.load(f)
    evals = {a.steps * k // 8 for k in range(1, 8)}
    for m in methods:
        r = run(m, text, held, a.steps, m.get("seed", a.seed), evals)
        if a.rank == 0:
            r.update(corpus=info, world=a.world, model=MODEL, batch=BATCH, host=os.uname().nodename,
                     date=time.strftime("%Y-%m-%d"), torch=torch.__version__)
            with open(a.out, "a") as f:
                f.write(json.dumps(r) + "\n")
            print(f"{m['label']:40s} eval {r['eval']:.4f} bytes {r['wire_per_step'] / 1e3:9.1f} kB  {r['seconds']:.0f} s",
                  flush=True)
        dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
