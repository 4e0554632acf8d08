"""Training loops for the tests and the end-to-end benchmark (benchmarks/e2e): the model and
task of :mod:`gradcomp.models` (re-exported here) under a DDP hook, FSDP2 or tensor
parallelism. Everything is seeded: a run depends only on (seed, rank, step), so a run resumed
from a checkpoint can match an uninterrupted one bit for bit."""

from __future__ import annotations

import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from . import ddp, tp
from .models import Block, MarkovTask, TinyTransformer  # noqa: F401 (gradcomp.testing.* keeps them)


def register(model: nn.Module, spec: str, **options):
    """Registers the communication hook named by ``spec`` on a DDP model.

    Args:
        model (DistributedDataParallel): the DDP module.
        spec (str): ``"fp32"`` (DDP's own all-reduce, no hook), ``"torch:bf16"``,
            ``"torch:fp16"``, ``"torch:powersgd"`` (PyTorch's hooks; PowerSGD takes ``rank``,
            default 4, and ``start_iter``, default 10), ``"tagc"``
            (:func:`gradcomp.ddp.tagc_hook`; options are :class:`gradcomp.ddp.TagcHookState`'s,
            with ``preset``), or the name of a gradcomp codec
            (:func:`gradcomp.ddp.compress_hook`; options are :class:`gradcomp.ddp.HookState`'s:
            the codec's and ``path``).
        **options: the hook state's options.

    Returns:
        The hook's state (:class:`gradcomp.ddp.HookState`, :class:`gradcomp.ddp.TagcHookState`
        or PyTorch's ``PowerSGDState``), or None for hooks without one.
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if spec == "fp32":
        return None
    if spec == "torch:bf16":
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
        return None
    if spec == "torch:fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return None
    if spec == "torch:powersgd":
        st = powerSGD_hook.PowerSGDState(process_group=None, matrix_approximation_rank=options.get("rank", 4),
                                         start_powerSGD_iter=options.get("start_iter", 10), random_seed=0)
        model.register_comm_hook(st, powerSGD_hook.powerSGD_hook)
        return st
    if spec == "tagc":
        st = ddp.TagcHookState(model, **options)
        model.register_comm_hook(st, ddp.tagc_hook)
    else:
        st = ddp.HookState(model, spec, **options)
        model.register_comm_hook(st, ddp.compress_hook)
    return st


def _shard(net, spec: str, options):
    """FSDP2 (fully_shard per block, then the root); "fsdp:fp32" keeps FSDP's own reduce-scatter,
    "fsdp:<codec>" (``tagc`` or a name of gradcomp.codecs()) sets gradcomp.fsdp's."""
    from torch.distributed.fsdp import fully_shard

    for b in net.blocks:
        fully_shard(b)
    fully_shard(net)
    if spec == "fsdp:fp32":
        return None
    from . import fsdp

    return fsdp.attach(net, spec[len("fsdp:"):], **(options or {}))


def _full_state(net, opt):
    """Model and optimizer state as full tensors on every rank (a collective)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    return get_state_dict(net, opt, options=StateDictOptions(full_state_dict=True))


def init_process_group(rank: int, world: int, port: int, threads: int = 1) -> None:
    """Joins a gloo process group on 127.0.0.1:``port`` as ``rank`` of ``world`` and limits
    torch to ``threads`` intra-op threads."""
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=world)


def train(spec: str, steps: int, *, options=None, batch=8, seq=32, optimizer="sgd", lr=None, seed=0, start=0,
          resume=None, save_at=None, save_path=None, target_loss=None, model_kw=None, on_step=None):
    """Trains :class:`TinyTransformer` on :class:`MarkovTask` for steps ``[start, steps)`` under
    the process group that is already initialised (:func:`init_process_group`).

    Every rank draws its own batches; the run depends only on (seed, rank, step), so a run
    resumed from a checkpoint matches an uninterrupted one bit for bit.

    Args:
        spec (str): DDP with the hook :func:`register` names (``"fp32"``, ``"topk"``,
            ``"tagc"``, ``"torch:bf16"``, ...), or FSDP2: ``"fsdp:fp32"`` (its own
            reduce-scatter), ``"fsdp:tagc"`` or ``"fsdp:<codec>"`` (``"fsdp:int8"``, ...:
            :func:`gradcomp.fsdp.attach` with that codec), or local steps without DDP:
            ``"localsteps:<codec>"`` (:class:`gradcomp.localsteps.LocalSteps`; options are its
            own: ``period``, ``path``, ``outer_lr``, ... and the codec's).
        steps (int): the step to stop before.
        options (dict, optional): the hook state's options.
        batch (int): sequences per rank and step (default 8).
        seq (int): sequence length (default 32).
        optimizer (str): ``"sgd"`` (momentum 0.9, lr 0.1; default) or ``"adamw"`` (lr 3e-3).
        lr (float, optional): overrides the optimizer's learning rate.
        seed (int): model and task seed (default 0).
        start (int): the first step (with ``resume``: the step the checkpoint was saved after).
        resume (str, optional): a ``torch.save`` file with model, optimizer and hook state.
        save_at (int, optional): saves such a file after this many steps (a collective).
        save_path (str, optional): where ``save_at`` saves.
        target_loss (float, optional): records the time when the 10-step mean loss first
            reaches it.
        model_kw (dict, optional): :class:`TinyTransformer`'s arguments.
        on_step (Callable[[int], None], optional): called after each step.

    Returns:
        dict: ``losses`` (per step), ``eval`` (held-out loss), ``seconds``,
        ``time_to_target``, ``bytes_sent`` and ``wire_bytes`` (the hook or reduce-scatter
        state's, or None), ``paths`` (:class:`gradcomp.ddp.HookState`'s paths, or None), ``params`` (every
        parameter, flat), ``peeled`` (TAGC's peeled fraction, or None), ``initial_loss``
        (log of the vocabulary size).
    """
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world = dist.get_rank(), dist.get_world_size()
    model_kw = dict(model_kw or {})
    torch.manual_seed(seed)
    net = TinyTransformer(seq=seq, **model_kw)
    sharded = spec.startswith("fsdp:")
    local = spec.startswith("localsteps:")
    if sharded:
        model, hook_state = net, _shard(net, spec, options)
    elif local:  # every rank a replica; the synchroniser runs after each optimizer step
        from .localsteps import LocalSteps

        model, hook_state = net, LocalSteps(net, spec[len("localsteps:"):], **(options or {}))
    else:
        # PowerSGD issues its second and third all-reduce from future callbacks, which gloo runs
        # in completion order: with several buckets the ranks can issue them in different
        # orders (a collective mismatch under a slow link). One bucket keeps it correct.
        model = DDP(net, bucket_cap_mb=1024) if spec == "torch:powersgd" else DDP(net)
        hook_state = register(model, spec, **(options or {}))
    # SGD with momentum (default): the update follows the gradient's scale, so a codec that gets
    # the average wrong shows in the loss (Adam's per-parameter normalisation would hide it).
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr or 0.1, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr or 3e-3, weight_decay=0.0)
    task = MarkovTask(vocab=net.tok.num_embeddings, seed=seed)
    if resume is not None:
        ck = torch.load(resume, weights_only=False)
        if sharded:
            from torch.distributed.checkpoint.state_dict import StateDictOptions, set_state_dict

            set_state_dict(net, opt, model_state_dict=ck["model"], optim_state_dict=ck["opt"],
                           options=StateDictOptions(full_state_dict=True))
        else:
            net.load_state_dict(ck["model"])
            opt.load_state_dict(ck["opt"])
        if hook_state is not None:
            hook_state.load_state_dict(ck["hook"])
    losses, t_target = [], None
    dist.barrier()
    t0 = time.perf_counter()
    for step in range(start, steps):
        x, y = task.batch(step * 4096 + rank, batch, seq)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if local:
            hook_state.step()
        losses.append(loss.item())
        if on_step is not None:
            on_step(step)
        if target_loss is not None and t_target is None and len(losses) >= 10 and sum(losses[-10:]) / 10 <= target_loss:
            t_target = time.perf_counter() - t0
        if save_at is not None and step + 1 == save_at:
            hook_sd = hook_state.state_dict() if hasattr(hook_state, "load_state_dict") else None  # collective
            msd, osd = _full_state(net, opt) if sharded else (net.state_dict(), opt.state_dict())
            if rank == 0:
                torch.save({"model": msd, "opt": osd, "hook": hook_sd}, save_path)
            dist.barrier()
    if local:
        hook_state.finish()
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        ex, ey = task.batch(-7, 64, seq)  # held out, the same on every rank
        ev = F.cross_entropy(net(ex).flatten(0, 1), ey.flatten()).item()
    if sharded:
        flat = torch.cat([t.detach().flatten() for t in _full_state(net, opt)[0].values()])
    else:
        flat = torch.cat([p.detach().flatten() for p in net.parameters()])
    return {"losses": losses, "eval": ev, "seconds": seconds, "time_to_target": t_target,
            "bytes_sent": getattr(hook_state, "bytes_sent", None), "wire_bytes": getattr(hook_state, "wire_bytes", None),
            "paths": dict(hook_state.paths) if hasattr(hook_state, "paths") else None, "params": flat,
            "peeled": hook_state.peel_fraction() if hasattr(hook_state, "peel_fraction") else None,
            "initial_loss": math.log(net.tok.num_embeddings)}


def train_tp(exchange, steps: int, *, chunks=None, batch=8, seq=32, optimizer="sgd", lr=None, seed=0,
             target_loss=None, model_kw=None, plan_link=None):
    """Trains :class:`TinyTransformer` split over the process group by tensor parallelism
    (:class:`gradcomp.tp.GPT`): every rank sees the same batches, and no gradient is
    all-reduced (each rank's gradients are exact for its share, and the replicated parameters'
    are the same on every rank).

    Args:
        exchange (gradcomp.tp.Exchange or str): the exchange, or its name for
            :func:`gradcomp.tp.make_exchange` (``"fp32"``, ``"bf16"``, ``"acctfm"``).
        steps (int): training steps.
        chunks (list[int] or "plan", optional): token rows per chunk for every parallel layer,
            or ``"plan"``: :func:`gradcomp.tp.plan` for the link ``plan_link``.
        batch, seq, optimizer, lr, seed, target_loss, model_kw: as for :func:`train`.
        plan_link (tuple, optional): ``(bytes_per_s, latency_s)`` for ``chunks="plan"``.

    Returns:
        dict: ``losses``, ``eval`` (held-out loss), ``seconds``, ``step_seconds`` (each step's
        time), ``time_to_target``, ``bytes_sent`` (the exchange's), ``same`` (whether every
        rank holds the same logits and replicated parameters, bit for bit), ``plans`` (the
        planner's, or None), ``initial_loss``.
    """
    if isinstance(exchange, str):
        exchange = tp.make_exchange(exchange)
    model_kw = dict(model_kw or {})
    model = tp.GPT(exchange, seq=seq, seed=seed, **model_kw)
    plans = None
    if chunks == "plan":
        bytes_per_s, latency_s = plan_link
        plans = tp.plan(model, batch * seq, bytes_per_s, latency_s)
    elif chunks is not None:
        for layer in model.parallel_layers():
            layer.chunks = list(chunks)
    if optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=lr or 0.1, momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=lr or 3e-3, weight_decay=0.0)
    task = MarkovTask(vocab=model.tok.num_embeddings, seed=seed)
    losses, times, t_target = [], [], None
    dist.barrier()
    t0 = time.perf_counter()
    for step in range(steps):
        ts = time.perf_counter()
        x, y = task.batch(step * 4096, batch, seq)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - ts)
        if target_loss is not None and t_target is None and len(losses) >= 10 and sum(losses[-10:]) / 10 <= target_loss:
            t_target = time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    with torch.no_grad():
        ex, ey = task.batch(-7, 64, seq)
        logits = model(ex)
        ev = F.cross_entropy(logits.flatten(0, 1), ey.flatten()).item()
    replicated = torch.cat([logits.flatten(), model.tok.weight.detach().flatten(), model.head.weight.detach().flatten()])
    lo, hi = replicated.view(torch.int32).clone(), replicated.view(torch.int32).clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    return {"losses": losses, "eval": ev, "seconds": seconds, "step_seconds": times, "time_to_target": t_target,
            "bytes_sent": exchange.bytes_sent, "same": bool(torch.equal(lo, hi)), "plans": plans,
            "initial_loss": math.log(model.tok.num_embeddings)}
