"""The package's surface: docstrings, reprs, one hook per algorithm, the FSDP2 reduce-scatter's
interface, the type stub and the license the wheel carries."""

import ast
import importlib
import importlib.metadata
import inspect
import os

import pytest
import torch

import gradcomp
from gradcomp import ddp, fsdp, localsteps, models, optim, restart, tagc, testing

MODULES = [gradcomp, ddp, fsdp, localsteps, models, optim, restart, tagc, testing]


def _public(module):
    names = getattr(module, "__all__", None) or [n for n, v in vars(module).items()
                                                 if not n.startswith("_") and getattr(v, "__module__", None) == module.__name__]
    return [(n, getattr(module, n)) for n in names if not inspect.ismodule(getattr(module, n))]


def _members(cls):
    for n, v in vars(cls).items():
        if n.startswith("_") and n not in ("__init__", "__call__"):
            continue
        yield n, v


def test_every_public_name_has_a_docstring():
    missing = []
    for module in MODULES:
        assert inspect.getdoc(module), module.__name__
        for name, obj in _public(module):
            if not inspect.getdoc(obj):
                missing.append(f"{module.__name__}.{name}")
            if inspect.isclass(obj):
                for m, v in _members(obj):
                    doc = getattr(v, "__doc__", None) if not isinstance(v, property) else v.fget.__doc__ or v.__doc__
                    if m == "__init__" and obj.__module__.startswith("gradcomp.") and obj.__module__ != "gradcomp._core":
                        continue  # Python classes document their arguments on the class
                    if not doc:
                        missing.append(f"{module.__name__}.{name}.{m}")
    assert not missing, missing


def test_bound_functions_show_real_signatures():
    sig = gradcomp.Compressor.compress.__doc__.splitlines()[0]
    assert sig == "compress(self, grad: torch.Tensor, state: State, out: torch.Tensor) -> int"
    assert gradcomp.PhaseCodec.receive.__doc__.startswith(
        "receive(self, k: int, state: PhaseState, reduced: torch.Tensor, out: torch.Tensor | None = None) -> None")
    assert gradcomp.Tagc.__doc__.startswith("Tagc(preset: str = 'default', **config) -> gradcomp._core.PhaseCodec")
    assert gradcomp.State.restore.__doc__.startswith("restore(self, data: bytes) -> None")
    assert gradcomp.Sharded.encode.__doc__.startswith(
        "encode(self, k: int, grad: torch.Tensor | None, state: ShardedState, out: torch.Tensor) -> None")
    assert gradcomp.Sharded.receive.__doc__.startswith(
        "receive(self, k: int, state: ShardedState, received: torch.Tensor, out: torch.Tensor | None = None) -> None")
    assert gradcomp.Sharded.make_state.__doc__.startswith(
        "make_state(self, n: int, world: int, rank: int, dtype: torch.dtype | None = None, "
        "device: torch.device | str | int | None = None) -> ShardedState")
    assert gradcomp.PhaseCodec.make_state.__doc__.startswith(
        "make_state(self, n: int, world: int, rank: int, device: torch.device | str | int | None = None) -> PhaseState")
    sh = gradcomp.Sharded(name="int8", mode="reduce_scatter")
    st = sh.make_state(n=100, world=2, rank=1)
    send = torch.empty(sh.describe(k=0, state=st)["send_bytes"], dtype=torch.uint8)
    sh.encode(k=0, grad=torch.randn(100), state=st, out=send)  # keyword arguments by their names
    c = gradcomp.Compressor("int8")
    g = torch.randn(100)
    out = torch.empty(c.max_payload_bytes(100), dtype=torch.uint8)
    assert c.compress(grad=g, state=c.make_state(100), out=out) > 0  # keyword arguments by their names
    assert gradcomp.Error.__doc__ and issubclass(gradcomp.Error, RuntimeError)


def test_reprs_show_codec_config_sizes_and_step():
    c = gradcomp.Compressor("topk", density=0.01)
    assert repr(c) == "gradcomp.Compressor('topk', density=0.01, error_feedback=True)"
    st = c.make_state(5000)
    g = torch.randn(5000)
    c.compress(g, st, torch.empty(c.max_payload_bytes(5000), dtype=torch.uint8))
    assert repr(st) == "gradcomp.State(codec='topk', size=5000, step=1, residual=5000, thresholds=0)"
    assert repr(gradcomp.Compressor("int4", error_feedback=True)) == "gradcomp.Compressor('int4', error_feedback=True)"
    t = gradcomp.Tagc("tagc2", bitmap="sum_safe")
    assert repr(t).startswith("gradcomp.Tagc('tagc2', density=") and "sizing='ratio'" in repr(t)
    assert "bitmap='sum_safe'" in repr(t) and "cells='bf16'" in repr(t)
    assert repr(t.make_state(4096, 2, 1)) == "gradcomp.PhaseState(codec='tagc', size=4096, world=2, rank=1, step=0, rows=0)"
    cast = gradcomp.SummableCast("fp16", feedback=False)
    assert repr(cast) == "gradcomp.SummableCast('fp16', feedback=False)"
    assert repr(cast.make_state(10, 2, 0)) == "gradcomp.PhaseState(codec='cast:fp16', size=10, world=2, rank=0, step=0)"
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 4))
    hs = ddp.HookState(model, "topk", density=0.01)  # no process group yet: the paths are chosen later
    assert repr(hs) == ("HookState(codec='topk', density=0.01, path='auto', min_compress_numel=1024, compressed=1 "
                        "parameters / 4096 elements, sharded=?, calls=0, bytes_sent=0)")
    assert repr(ddp.HookState(model, "int8", path="gather")) == (
        "HookState(codec='int8', path='gather', min_compress_numel=1024, compressed=1 parameters / 4096 elements, "
        "sharded=0, calls=0, bytes_sent=0)")
    sc = gradcomp.Sharded("int4", error_feedback=True)
    assert repr(sc) == "gradcomp.Sharded('int4', mode='all_reduce', error_feedback=True)"
    assert repr(gradcomp.Sharded("topk", mode="reduce_scatter", density=0.01)) == (
        "gradcomp.Sharded('topk', mode='reduce_scatter', density=0.01, error_feedback=True)")
    assert repr(sc.make_state(1000, 4, 3, torch.bfloat16)) == (
        "gradcomp.ShardedState(codec='int4', mode='all_reduce', size=1000, world=4, rank=3, dtype='bfloat16', step=0, "
        "stage='encode(0)')")
    fc = fsdp.ShardedCodec("int8", group=64)
    assert repr(fc) == "ShardedCodec(codec='int8', group=64, states=0 / 0 elements, calls=0, bytes_sent=0)"
    assert repr(fsdp.CodecReduceScatter(fc, "<root>")) == "CodecReduceScatter(codec='int8', name='<root>', not yet run)"
    sh = fsdp.ShardedTagc("tagc2")
    assert repr(sh).startswith("ShardedTagc(preset='tagc2', density=") and "states=0 / 0 elements, calls=0" in repr(sh)
    assert repr(fsdp.TagcReduceScatter(sh, "blocks.0")) == "TagcReduceScatter(name='blocks.0', not yet run)"


def test_one_hook_per_algorithm_and_wrong_states_raise():
    assert not hasattr(ddp, "hook")
    assert set(ddp.__all__) == {"HookState", "TagcHookState", "compress_hook", "shard_of", "tagc_hook"}
    model = torch.nn.Linear(64, 64)
    hs = ddp.HookState(model, "int8")
    with pytest.raises(TypeError, match=r"tagc_hook expects a gradcomp\.ddp\.TagcHookState.*got HookState"):
        ddp.tagc_hook(hs, None)
    with pytest.raises(ValueError, match="path must be"):
        ddp.HookState(model, "int8", path="ring")
    th = ddp.TagcHookState.__new__(ddp.TagcHookState)  # its constructor needs a process group
    with pytest.raises(TypeError, match=r"compress_hook expects a gradcomp\.ddp\.HookState.*got TagcHookState"):
        ddp.compress_hook(th, None)
    with pytest.raises(TypeError, match="got NoneType"):
        ddp.compress_hook(None, None)
    for hook in (ddp.compress_hook, ddp.tagc_hook):  # DDP's register_comm_hook checks the annotations
        sig = inspect.signature(hook)
        assert list(sig.parameters) == ["state", "bucket"]
        assert sig.parameters["bucket"].annotation is torch.distributed.GradBucket
        assert sig.return_annotation == torch.futures.Future[torch.Tensor]


def test_fsdp_reduce_scatter_uses_the_public_api():
    # gradcomp.fsdp reaches FSDP2 only through the public FSDPModule.set_custom_reduce_scatter; its
    # reduce-scatter provides the two methods FSDP2 calls, with the keywords FSDP2 passes
    # (checked against torch 2.15).
    from torch.distributed.fsdp import FSDPModule

    assert hasattr(FSDPModule, "set_custom_reduce_scatter")
    with open(fsdp.__file__) as f:
        assert "_fully_shard" not in f.read()  # no private torch module
    every = [fsdp.TagcReduceScatter(fsdp.ShardedTagc(), "m"), fsdp.CodecReduceScatter(fsdp.ShardedCodec("int8"), "m")]
    for rs in every:
        assert list(inspect.signature(rs.__call__).parameters) == ["output_tensor", "input_tensor", "group", "op", "async_op"]
        assert list(inspect.signature(rs.allocate).parameters) == ["size", "dtype", "device"]
        t = rs.allocate((10,), dtype=torch.bfloat16, device=torch.device("cpu"))
        assert t.shape == (10,) and t.dtype == torch.bfloat16
    # Where torch still has the interface's abstract base class, the methods it declares match.
    try:
        api = importlib.import_module("torch.distributed.fsdp._fully_shard._fsdp_api")
    except ImportError:
        return
    base = getattr(api, "ReduceScatter", None)
    if base is not None:
        for name in base.__abstractmethods__ | {"allocate"}:
            want = [p for p in inspect.signature(getattr(base, name)).parameters if p != "self"]
            for rs in every:
                assert list(inspect.signature(getattr(rs, name)).parameters) == want, (type(rs).__name__, name)
    with pytest.raises(ValueError, match="no fully_shard modules"):
        fsdp.attach(torch.nn.Linear(4, 4))


def _installed(name):
    return os.path.join(os.path.dirname(gradcomp.__file__), name)


def test_the_package_ships_type_stubs():
    assert os.path.isfile(_installed("py.typed"))
    with open(_installed("_core.pyi")) as f:
        stub = f.read()
    tree = ast.parse(stub)
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert {"Compressor", "State", "PhaseCodec", "PhaseState", "Sharded", "ShardedState", "Error"} <= classes, classes
    assert {"codecs", "Tagc", "SummableCast"} <= functions, functions
    assert "def compress(self, grad: torch.Tensor, state: State, out: torch.Tensor) -> int:" in stub
    assert "import torch" in stub


def test_the_wheel_carries_the_license():
    dist = importlib.metadata.distribution("gradcomp")
    files = [f for f in dist.files or [] if f.name == "LICENSE"]
    assert files, "no LICENSE in the installed distribution"
    text = files[0].read_text()
    assert "Apache License" in text and "Version 2.0" in text
    here = os.path.join(os.path.dirname(__file__), "..", "..", "LICENSE")
    if os.path.isfile(here):  # the repository's own file
        with open(here) as f:
            assert f.read() == text
