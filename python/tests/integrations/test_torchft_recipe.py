"""docs/trainers.md's torchft recipe, run as a user runs it: torchft's Lighthouse (started here,
on a free port) and the page's DiLoCo script launched by torchrun for 2 replica groups of one
CPU rank each (gloo), its pseudo-gradients through CompressedProcessGroup (int8). Asserted: every
sync committed, the codec ran (bytes below fp32's), the groups end with the same parameters and
the loss fell."""

import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("torchft")

import torch  # noqa: E402
from torchft.coordination import LighthouseServer  # noqa: E402

import trainer_util  # noqa: E402

DOC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "trainers.md")
MARKER = "<!-- torchft recipe:"
LINE = re.compile(r"group (\d): (\d+) syncs committed, (\d+) compressed all-reduces, (\d+) bytes against fp32's (\d+), "
                  r"held-out loss ([0-9.]+), parameters ([0-9a-f]+)")


def _script() -> str:
    with open(DOC) as f:
        text = f.read()
    assert MARKER in text, f"{DOC} has no {MARKER} block"
    block = text.split(MARKER, 1)[1].split("```python\n", 1)[1]
    return block.split("```", 1)[0]


def _start_loss() -> float:
    # The script's model at its seed, on its held-out batch.
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 8))
    x = torch.randn(16, 32, generator=torch.Generator().manual_seed(99))
    with torch.no_grad():
        return torch.nn.functional.mse_loss(model(x), torch.sin(x[:, :8]) + 0.1 * x[:, 8:16]).item()


def test_torchft_recipe_two_replica_groups(tmp_path):
    script = tmp_path / "diloco_int8.py"
    script.write_text(_script())
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=2, join_timeout_ms=10000)
    try:
        env = {"TORCHFT_LIGHTHOUSE": lighthouse.address()}
        command = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "1", str(script)]
        with ThreadPoolExecutor(max_workers=2) as ex:
            outs = list(ex.map(lambda g: trainer_util.launch(command, {**env, "REPLICA_GROUP_ID": str(g)}), range(2)))
    finally:
        lighthouse.shutdown()
    groups = []
    for g, out in enumerate(outs):
        found = LINE.search(out)
        assert found and int(found[1]) == g, out[-4000:]
        groups.append(found)
    for found in groups:
        syncs, calls, sent, raw = (int(found[i]) for i in range(2, 6))
        assert syncs == 3 and calls == 6, found[0]  # 12 inner steps, a sync every 4; two weight matrices each
        assert 0 < sent < 0.3 * raw, found[0]  # int8 slots against fp32
        assert float(found[6]) < 0.8 * _start_loss(), found[0]  # it learns
    assert groups[0][7] == groups[1][7]  # the same parameters in both groups
