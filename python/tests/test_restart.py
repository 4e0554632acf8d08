"""gradcomp.restart: a rank SIGKILLed under torchrun --max-restarts and the run resumed bit for
bit (top-k + EF, TAGC by DDP hook, TAGC by FSDP2, the sharded path, local steps, 1-bit Adam); a kill while a checkpoint
is written; truncated and corrupted checkpoints refused and skipped; the ranks agreeing on a
step; a restart at 3 ranks from 4; the usage example of docs/reliability.md."""

import os
import random
import re
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch
import torch.distributed as dist

import gradcomp
from gradcomp import restart

import dist_util

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "restart_worker.py")
DOC = os.path.join(HERE, "..", "..", "docs", "reliability.md")
STEPS, EVERY = 30, 5
VARIANTS = ("topk", "tagc", "fsdp-tagc", "sharded", "localsteps", "onebit", "demo")
# Where each variant's doomed rank dies: in the forward pass (the other rank then waits in the
# backward pass's collective), after the backward pass, or with its checkpoint file written and
# fsynced but not yet renamed (the other rank's file of that step is complete).
KILL_AT = {"topk": "forward", "tagc": "backward", "fsdp-tagc": "forward", "sharded": "save-written", "localsteps": "backward",
           "onebit": "backward", "demo": "backward"}


def _kills():
    """variant -> (step, rank, where), drawn with a fixed seed."""
    rng, out = random.Random(34), {}
    for v in VARIANTS:
        step, rank = rng.randrange(EVERY, STEPS - 2), rng.randrange(2)
        if KILL_AT[v].startswith("save"):
            step = (step // EVERY + 1) * EVERY - 1  # the step whose save is the (EVERY)th
        out[v] = (step, rank, KILL_AT[v])
    return out


KILLS = _kills()


def _torchrun(args, tmp, nproc=2, max_restarts=1, timeout=300, script=WORKER, cwd=None):
    env = dict(os.environ)
    # torch 2.15's torchrun shares its rendezvous store with the workers and keeps it across
    # restarts: a restarted gloo group can read the dead attempt's addresses from it (measured:
    # 4 of 5 restarts failed with "connectFullMesh failed ... Connection refused"). This gives each
    # attempt a store of its own (docs/reliability.md).
    env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           f"--max-restarts={max_restarts}", script] + list(args)
    p = subprocess.run(cmd, env=env, cwd=cwd or tmp, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Every variant's final parameters, run without checkpoints or kills (one torchrun)."""
    tmp = tmp_path_factory.mktemp("reference")
    out = str(tmp / "ref.pt")
    rc, log = _torchrun(["--variant", ",".join(VARIANTS), "--steps", str(STEPS), "--out", out], tmp, max_restarts=0)
    assert rc == 0, log[-6000:]
    ref = torch.load(out, weights_only=False)
    assert all(ref["same"].values()), ref["same"]
    return ref["params"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_killed_rank_restarts_and_resumes_bit_for_bit(variant, uninterrupted, tmp_path):
    step, rank, where = KILLS[variant]
    out, ck = str(tmp_path / "run.pt"), str(tmp_path / "ckpt")
    rc, log = _torchrun(["--variant", variant, "--steps", str(STEPS), "--every", str(EVERY), "--dir", ck, "--out", out,
                         "--kill-step", str(step), "--kill-rank", str(rank), "--kill-at", where], tmp_path)
    assert rc == 0, log[-6000:]
    assert os.path.exists(out + ".killed"), log[-3000:]  # the doomed rank did die
    with open(out + ".start0") as f:
        assert f.read() == "0"
    # The restart resumed from the newest checkpoint every rank had: the last save before the
    # kill, or, killed while saving, the one before.
    want = (step // EVERY) * EVERY if not where.startswith("save") else step + 1 - EVERY
    with open(out + ".start1") as f:
        assert int(f.read()) == want, (variant, step, where)
    if where.startswith("save"):
        assert f"skipping step {step + 1}" in log, log[-3000:]  # the incomplete step, named
    got = torch.load(out, weights_only=False)
    assert got["same"][variant], "replicas differ"
    assert torch.equal(got["params"][variant].view(torch.int32), uninterrupted[variant].view(torch.int32)), variant
    # keep=2: the two newest steps, both complete, nothing else (no temporary file).
    assert sorted(os.listdir(ck)) == sorted(restart.file_name(s, r, 2) for s in (STEPS - EVERY, STEPS) for r in (0, 1))


# ---- one process: files, damage, RNG


def _linear(seed=0):
    torch.manual_seed(seed)
    net = torch.nn.Linear(8, 4)
    opt = torch.optim.AdamW(net.parameters(), lr=0.01)
    return net, opt


def _train(net, opt, steps):
    for _ in range(steps):
        loss = net(torch.randn(3, 8)).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _flat(net):
    return torch.cat([p.detach().flatten() for p in net.parameters()]).clone()


def _damage(path, how):
    data = bytearray(open(path, "rb").read())
    if how == "truncated":
        data = data[:len(data) - 100]
    elif how == "header-only":
        data = data[:20]
    elif how == "bit-flip":
        data[len(data) // 2] ^= 0x10
    elif how == "bad-magic":
        data[0:8] = b"NOTGCCKP"
    elif how == "trailing":
        data += b"\0"
    with open(path, "wb") as f:
        f.write(bytes(data))


CODES = {"truncated": "truncated", "header-only": "truncated", "bit-flip": "checksum_mismatch", "bad-magic": "bad_magic",
         "trailing": "size_mismatch"}


@pytest.mark.parametrize("how", sorted(CODES))
def test_a_damaged_checkpoint_is_refused_and_the_previous_one_used(how, tmp_path):
    net, opt = _linear()
    ck = restart.Checkpointer(tmp_path, {"model": net, "optimizer": opt}, every=5, keep=3)
    assert ck.resume() == 0 and ck.resumed_from is None
    at5 = None
    for step in range(1, 11):
        _train(net, opt, 1)
        ck.maybe_save(step)
        if step == 5:
            at5 = _flat(net)
    newest = ck.path(10)
    assert restart.verify(newest) == {"step": 10, "rank": 0, "world": 1, "bytes": os.path.getsize(newest)}
    _damage(newest, how)
    with pytest.raises(restart.CheckpointError) as e:
        restart.verify(newest)
    assert e.value.code == CODES[how] and e.value.path == newest and newest in str(e.value)
    assert isinstance(e.value, gradcomp.Error)
    with pytest.raises(restart.CheckpointError):
        restart.load(newest)
    net2, opt2 = _linear(seed=1)
    ck2 = restart.Checkpointer(tmp_path, {"model": net2, "optimizer": opt2}, every=5, keep=3)
    with pytest.warns(restart.CheckpointWarning, match=re.escape(newest) + ".*" + CODES[how]):
        assert ck2.resume() == 5
    assert torch.equal(_flat(net2), at5)
    assert opt2.state_dict()["state"][0]["step"] == 5
    assert not os.path.exists(newest)  # a newer, damaged step goes: a later save rewrites it


def test_the_random_generators_continue_where_they_were(tmp_path):
    net, opt = _linear()
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    ck = restart.Checkpointer(tmp_path, {"model": net}, every=1)
    ck.save(1)
    want = (torch.rand(4), random.random(), np.random.rand(3))
    random.seed(9)
    np.random.seed(9)
    torch.manual_seed(9)
    assert restart.Checkpointer(tmp_path, {"model": net}).resume() == 1
    got = (torch.rand(4), random.random(), np.random.rand(3))
    assert torch.equal(got[0], want[0]) and got[1] == want[1] and np.array_equal(got[2], want[2])


def test_bad_arguments_and_missing_states_raise(tmp_path):
    net, opt = _linear()
    with pytest.raises(TypeError, match="'x'.*state_dict"):
        restart.Checkpointer(tmp_path, {"x": object()})
    with pytest.raises(ValueError, match="every"):
        restart.Checkpointer(tmp_path, {"model": net}, every=0)
    with pytest.raises(ValueError, match="keep"):
        restart.Checkpointer(tmp_path, {"model": net}, keep=0)
    restart.Checkpointer(tmp_path, {"model": net}).save(3)
    with pytest.raises(KeyError, match="no state 'optimizer'"):
        restart.Checkpointer(tmp_path, {"model": net, "optimizer": opt}).resume()
    assert restart.load(os.path.join(tmp_path, restart.file_name(3, 0, 1)))["step"] == 3


# A child process that saves step 5, then dies (SIGKILL) while saving step 10: with half the
# file written, or with the whole temporary file written and fsynced but not yet renamed.
_CHILD = textwrap.dedent("""
    import os, signal, sys, torch
    from gradcomp import restart
    torch.manual_seed(0)
    net = torch.nn.Linear(8, 4)
    ck = restart.Checkpointer(sys.argv[1], {"model": net}, every=5)
    for step in range(1, 11):
        with torch.no_grad():
            net.weight.add_(1.0)
        if step == 5:
            torch.save({k: v.clone() for k, v in net.state_dict().items()}, sys.argv[1] + ".at5")
        if step == 10:
            restart._fault = lambda at, path: os.kill(os.getpid(), signal.SIGKILL) if at == sys.argv[2] else None
        ck.maybe_save(step)
""")


@pytest.mark.parametrize("stage", ["partial", "written"])
def test_a_kill_while_writing_leaves_the_previous_checkpoint(stage, tmp_path):
    d = str(tmp_path / "ckpt")
    os.makedirs(d)
    p = subprocess.run([sys.executable, "-c", _CHILD, d, stage], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=120)
    assert p.returncode == -9, p.stdout
    tmp, done = sorted(os.listdir(d))
    assert done == restart.file_name(5, 0, 1), done
    assert tmp.startswith("." + restart.file_name(10, 0, 1) + ".tmp"), tmp  # the interrupted write
    net = torch.nn.Linear(8, 4)
    ck = restart.Checkpointer(d, {"model": net}, every=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the previous checkpoint is whole: nothing to warn about
        assert ck.resume() == 5
    want = torch.load(d + ".at5", weights_only=True)
    assert all(torch.equal(v, want[k]) for k, v in net.state_dict().items())
    assert os.listdir(d) == [restart.file_name(5, 0, 1)]  # the temporary file is gone


# ---- several ranks, spawned (a plain launcher)


def _agree(rank, world, directory):
    """Saves steps 3, 6 and 9; rank 1's step 9 and rank 0's step 6 are then damaged: every rank
    must resume from step 3."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gradcomp import ddp, testing

    def build():
        torch.manual_seed(0)
        net = testing.TinyTransformer(d=32, heads=2, layers=1, seq=16)
        model = DDP(net)
        hook = ddp.HookState(model, "topk", density=0.05, path="gather")
        model.register_comm_hook(hook, ddp.compress_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return net, model, opt, {"model": net, "optimizer": opt, "hook": hook}

    net, model, opt, states = build()
    ck = restart.Checkpointer(directory, states, every=3, keep=3)
    task = testing.MarkovTask(vocab=64)
    at3 = None
    for step in range(9):
        x, y = task.batch(step * 4096 + rank, 4, 16)
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        ck.maybe_save(step + 1)
        if step + 1 == 3:
            at3 = _flat(net)
    dist.barrier()
    if rank == 0:
        _damage(os.path.join(directory, restart.file_name(9, 1, world)), "bit-flip")
        _damage(os.path.join(directory, restart.file_name(6, 0, world)), "truncated")
    dist.barrier()
    net2, _, _, states2 = build()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = restart.Checkpointer(directory, states2, every=3, keep=3).resume()
    said = [str(w.message) for w in caught if issubclass(w.category, restart.CheckpointWarning)]
    every = [None] * world
    dist.all_gather_object(every, (start, said, bool(torch.equal(_flat(net2), at3))))
    return every


def test_ranks_agree_on_the_newest_step_every_rank_verified(tmp_path):
    got = dist_util.run(2, _agree, str(tmp_path))
    assert [g[0] for g in got] == [3, 3], got
    assert all(g[2] for g in got), "the model is not step 3's"
    # Each rank names its own damaged file and the reason.
    assert any(restart.file_name(6, 0, 2) in m and "truncated" in m for m in got[0][1]), got[0][1]
    assert any(restart.file_name(9, 1, 2) in m and "checksum_mismatch" in m for m in got[1][1]), got[1][1]
    assert sorted(os.listdir(tmp_path)) == [restart.file_name(3, r, 2) for r in (0, 1)]


def _owed(hook):
    """What a hook state still owes the averaged update, per compressed parameter, summed over
    the ranks (a collective): TAGC's residuals; top-k's gather residuals / W; its sharded
    states' sender and owner residuals."""
    from gradcomp import ddp

    out = {}
    world = dist.get_world_size()
    if isinstance(hook, ddp.TagcHookState):  # summed in fp32 in rank order, as the elastic restore sums
        for name, st in sorted(hook.states.items()):
            mine = torch.from_numpy(np.asarray(st.residual).copy())
            every = [torch.empty_like(mine) for _ in range(world)]
            dist.all_gather(every, mine)
            out[name] = sum(every)
        return out
    for name in sorted(hook.paths):
        if hook.paths[name] == "gather":
            v = torch.from_numpy(np.asarray(hook.states[name].residual).astype(np.float64)) / world
        else:
            st = hook.sharded_states[name]
            v, size = torch.zeros(st.size, dtype=torch.float64), -(-st.size // st.world)
            for j in range(st.world):
                r = torch.from_numpy(np.asarray(st.sender_residual(j)).astype(np.float64))
                v[j * size:j * size + r.numel()] += r
            off, _ = st.shard
            o = torch.from_numpy(np.asarray(st.owner_residual).astype(np.float64))
            v[off:off + o.numel()] += o
        dist.all_reduce(v)
        out[name] = v
    return out


def _elastic(rank, world, directory, steps_before):
    """At 4 ranks: 6 steps, checkpointed at 3 and 6. At 3 ranks: resume, then 3 more steps."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from gradcomp import ddp, testing

    report = {}
    for label in ("topk", "tagc"):
        torch.manual_seed(0)
        net = testing.TinyTransformer(d=32, heads=2, layers=1, seq=16)
        model = DDP(net)
        if label == "tagc":
            hook = ddp.TagcHookState(model)
            model.register_comm_hook(hook, ddp.tagc_hook)
        else:
            hook = ddp.HookState(model, "topk", density=0.05)  # "auto": some parameters sharded at 3 and 4 ranks
            model.register_comm_hook(hook, ddp.compress_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        torch.manual_seed(100 + rank)
        ck = restart.Checkpointer(os.path.join(directory, label), {"model": net, "optimizer": opt, "hook": hook}, every=3)
        start = ck.resume()
        r = {"start": start, "paths": sorted(set(getattr(hook, "paths", {"": "tagc"}).values()))}
        if start:
            r["owed"] = _owed(hook)
            r["params"] = _flat(net)
            r["momentum"] = torch.cat([opt.state[p]["momentum_buffer"].flatten() for p in net.parameters()])
        task = testing.MarkovTask(vocab=64)
        losses = []
        for step in range(start, start + steps_before):
            x, y = task.batch(step * 4096 + rank, 4, 16)
            x = torch.where(torch.rand(x.shape) < 0.1, torch.zeros_like(x), x)
            loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            ck.maybe_save(step + 1)
        if not start:
            r["owed"] = _owed(hook)
            r["params"] = _flat(net)
            r["momentum"] = torch.cat([opt.state[p]["momentum_buffer"].flatten() for p in net.parameters()])
        r["same"] = dist_util.all_same(_flat(net))
        r["finite"] = all(np.isfinite(losses))
        report[label] = r
    return report


def test_a_restart_with_fewer_ranks_continues_through_the_elastic_restore(tmp_path):
    before = dist_util.run(4, _elastic, str(tmp_path), 6)
    after = dist_util.run(3, _elastic, str(tmp_path), 3)
    for label in ("topk", "tagc"):
        b, a = before[label], after[label]
        assert b["start"] == 0 and a["start"] == 6, (label, b["start"], a["start"])
        # Exact: the model and the optimizer (replicated: rank r reads saved rank r's file).
        assert torch.equal(a["params"], b["params"]) and torch.equal(a["momentum"], b["momentum"]), label
        # The hook states: what is owed to the averaged update, summed over the ranks, is kept:
        # TAGC's residual sum exactly; top-k's up to the fp32 rounding of the restore's sums.
        for name, owed in b["owed"].items():
            diff = float((a["owed"][name] - owed).abs().max())
            assert diff <= (0.0 if label == "tagc" else 1e-6), (label, name, diff)
        assert a["same"] and a["finite"], label
    # "auto" at density 0.05: every matrix sharded at 4 ranks; at 3 the attention's output
    # projection (1,024 elements) is gathered, so its state crossed paths in the restore.
    assert before["topk"]["paths"] == ["sharded"] and after["topk"]["paths"] == ["gather", "sharded"]


# ---- the usage example of docs/reliability.md, verbatim


def _example():
    if not os.path.isfile(DOC):
        pytest.skip("docs/reliability.md is not beside these tests")
    with open(DOC) as f:
        text = f.read()
    m = re.search(r"<!-- restart-example: python/tests/test_restart.py runs it -->\s*```python\n(.*?)```", text, re.S)
    assert m, "the example block of docs/reliability.md"
    return m.group(1)


def test_the_documented_example_runs_and_resumes(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(_example())
    rc, log = _torchrun([], tmp_path, max_restarts=3, script=str(script))
    assert rc == 0, log[-6000:]
    assert "rank 0: steps 0 to 60" in log, log[-3000:]
    ck = tmp_path / "ckpt"
    assert sorted(os.listdir(ck)) == sorted(restart.file_name(s, r, 2) for s in (40, 60) for r in (0, 1))
    for name in os.listdir(ck):
        restart.verify(str(ck / name))
    rc, log = _torchrun([], tmp_path, max_restarts=3, script=str(script))  # a second run: nothing left to do
    assert rc == 0 and "rank 0: steps 60 to 60" in log, log[-3000:]
