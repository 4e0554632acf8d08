"""A reference implementation of local steps (DiLoCo, Streaming DiLoCo) in plain torch, for
testing the benchmark's local-steps code path only (rank.py uses it with run.py --reference).

Same constructor and methods as gradcomp.localsteps.LocalSteps, but every exchange is an fp32
ring all-reduce of the pseudo-gradients: codec, path and the codec's options are accepted and
ignored, so its rows measure fp32 pseudo-gradients whatever their label says.

Fragment f (contiguous parameters, near-equal sizes) is due after inner step t when
t % period == f * period // fragments (t counts from 1). Its pseudo-gradient anchor - local
is averaged over the ranks; overlap inner steps later (at once when 0) the outer optimizer
(SGD, momentum, optionally Nesterov) moves the anchor by it, and the local parameters become
mix * local + (1 - mix) * anchor.
"""

import torch
import torch.distributed as dist


class LocalSteps:
    def __init__(self, net, codec="fp32", path="summable", period=50, fragments=1, overlap=0, mix=0.0, outer_lr=0.7,
                 outer_momentum=0.9, nesterov=True, process_group=None, **codec_options):
        self.params = [p for p in net.parameters() if p.requires_grad]
        self.period, self.overlap, self.mix = period, overlap, mix
        self.lr, self.momentum, self.nesterov, self.group = outer_lr, outer_momentum, nesterov, process_group
        self.world = dist.get_world_size(process_group)
        self.anchor = [p.detach().clone() for p in self.params]
        self.buf = [torch.zeros_like(p) for p in self.params]
        total, acc, self.fragments = sum(p.numel() for p in self.params), 0, [[] for _ in range(fragments)]
        for i, p in enumerate(self.params):
            self.fragments[min(fragments - 1, acc * fragments // total)].append(i)
            acc += p.numel()
        self.t, self.wire_bytes, self.syncs = 0, 0, 0
        self.pending = []  # (inner step to apply at, fragment, work, flat pseudo-gradient)

    def step(self):
        self.t += 1
        for f, idx in enumerate(self.fragments):
            if idx and self.t % self.period == f * self.period // len(self.fragments):
                flat = torch.cat([(self.anchor[i] - self.params[i].detach()).flatten() for i in idx]) / self.world
                work = dist.all_reduce(flat, group=self.group, async_op=True)
                self.pending.append((self.t + self.overlap, idx, work, flat))
                self.wire_bytes += 2 * (self.world - 1) * 4 * flat.numel() // self.world
                self.syncs += 1
        self._apply(lambda at: at <= self.t)

    def finish(self):
        self._apply(lambda at: True)

    @torch.no_grad()
    def _apply(self, due):
        keep = []
        for at, idx, work, flat in self.pending:
            if not due(at):
                keep.append((at, idx, work, flat))
                continue
            work.wait()
            for i, g in zip(idx, torch.split(flat, [self.params[i].numel() for i in idx])):
                g = g.view_as(self.params[i])
                self.buf[i].mul_(self.momentum).add_(g)
                self.anchor[i].sub_(g.add(self.buf[i], alpha=self.momentum) if self.nesterov else self.buf[i],
                                    alpha=self.lr)
                self.params[i].mul_(self.mix).add_(self.anchor[i], alpha=1 - self.mix)
        self.pending = keep
