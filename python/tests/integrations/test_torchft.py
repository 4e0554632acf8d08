"""gradcomp in torchft: DiLoCo's pseudo-gradients through CompressedProcessGroup (int8) on 2
replicas (threads, an in-process lighthouse, gloo), against the same run on torchft's plain
ProcessGroupGloo: the codec ran (bytes below fp32's), the replicas end identical, the loss
stays within tolerance of the uncompressed run; bad configurations raise ValueError."""

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

pytest.importorskip("torchft")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torchft import Manager, ProcessGroupGloo  # noqa: E402
from torchft._torchft import LighthouseServer  # noqa: E402
from torchft.local_sgd import DiLoCo  # noqa: E402

from gradcomp.integrations.torchft import CompressedProcessGroup  # noqa: E402

SYNC_EVERY, SYNCS = 4, 3
TIMEOUT = timedelta(seconds=30)


_GLOBAL_RNG = threading.Lock()  # the replicas are threads: one seeds and draws at a time


def _model():
    with _GLOBAL_RNG:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8))


def _batch(replica, step):
    g = torch.Generator().manual_seed(1000 * step + replica)
    x = torch.randn(16, 32, generator=g)
    return x, torch.sin(x[:, :8]) + 0.1 * x[:, 8:16]


def _replica(replica, lighthouse, codec):
    model = _model()
    inner = torch.optim.AdamW(model.parameters(), lr=0.01)
    outer = torch.optim.SGD(model.parameters(), lr=0.7, momentum=0.9, nesterov=True)
    pg = ProcessGroupGloo(timeout=TIMEOUT) if codec is None else CompressedProcessGroup(
        ProcessGroupGloo(timeout=TIMEOUT), codec, min_compress_numel=256)
    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    manager = Manager(pg=pg, min_replica_size=2, use_async_quorum=False,
                      load_state_dict=lambda sd: (model.load_state_dict(sd["model"]), inner.load_state_dict(sd["inner"])),
                      state_dict=lambda: {"model": model.state_dict(), "inner": inner.state_dict()},
                      replica_id=f"replica{replica}", store_addr="localhost", store_port=store.port, rank=0,
                      world_size=1, lighthouse_addr=lighthouse, port=0, timeout=TIMEOUT, quorum_timeout=TIMEOUT,
                      connect_timeout=TIMEOUT)
    losses = []
    try:
        with DiLoCo(manager, [model], inner, outer, sync_every=SYNC_EVERY):
            for step in range(SYNC_EVERY * SYNCS):
                x, y = _batch(replica, step)
                loss = torch.nn.functional.mse_loss(model(x), y)
                inner.zero_grad()
                loss.backward()
                inner.step()  # DiLoCo's hook syncs every SYNC_EVERY steps
                losses.append(loss.item())
        x, y = _batch(99, 0)
        with torch.no_grad():
            held_out = torch.nn.functional.mse_loss(model(x), y).item()
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        stats = None if codec is None else (pg.calls, pg.bytes_sent, pg.raw_bytes)
        return flat, held_out, manager.current_step(), stats
    finally:
        manager.shutdown(wait=False)


def _run(codec):
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=2)
    try:
        with ThreadPoolExecutor(max_workers=2) as ex:
            futs = [ex.submit(_replica, r, lighthouse.address(), codec) for r in range(2)]
            return [f.result(timeout=120) for f in futs]
    finally:
        lighthouse.shutdown()


def test_diloco_pseudo_gradients_through_int8():
    torch.set_num_threads(1)
    plain = _run(None)
    packed = _run("int8")
    for flat, held_out, step, stats in packed:
        assert step == SYNCS  # every sync committed
        calls, sent, raw = stats
        assert calls == SYNCS * 2  # the two weight matrices; the biases (< 256 elements) go as they are
        assert 0 < sent < 0.3 * raw  # int8 slots against fp32
    # The replicas decode the same bytes in the same order: identical parameters after the last sync.
    assert torch.equal(packed[0][0], packed[1][0])
    assert torch.equal(plain[0][0], plain[1][0])
    start = torch.nn.functional.mse_loss(_model()(_batch(99, 0)[0]), _batch(99, 0)[1]).item()
    assert plain[0][1] < 0.8 * start  # the run learns
    assert abs(packed[0][1] - plain[0][1]) < 0.02 * start, (packed[0][1], plain[0][1])


def test_bad_configurations_raise():
    with pytest.raises(ValueError, match="error_feedback"):
        CompressedProcessGroup(ProcessGroupGloo(), "topk", density=0.1, error_feedback=True)
    with pytest.raises(ValueError, match="int9"):
        CompressedProcessGroup(ProcessGroupGloo(), "int9")
    with pytest.raises(ValueError, match="torchft ProcessGroup"):
        CompressedProcessGroup(dist.ProcessGroup, "int8")
