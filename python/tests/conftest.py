import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)  # python/: its gradcomp/ has no built extension
# Test the installed package, even when pytest runs from python/ (`python -m` puts the working
# directory first on sys.path); dist_util is imported from here.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != SOURCE]
sys.path.insert(0, HERE)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device and a CUDA build of gradcomp (skipped otherwise)")


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is None:
        return
    import pytest
    import torch

    import gradcomp

    if not gradcomp.build_info()["cuda"]:
        pytest.skip("this build of gradcomp has no CUDA kernels")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


def _device_params():
    import pytest

    return ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def pytest_generate_tests(metafunc):
    """``device``: every test that takes it runs once per backend, on the CPU and (marked ``gpu``,
    skipped without a CUDA device or a CUDA build) on cuda:0."""
    if "device" in metafunc.fixturenames:
        metafunc.parametrize("device", _device_params())
