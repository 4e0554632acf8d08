"""A short run of the byte-mutation harness of the Python entry points
(tests/fuzz/python_mutation.py), in-process: every entry point, a fixed number of executions with
a fixed seed, no property violation; and the harness itself reports the violations it exists
to find."""

import importlib.util
import json
import os

import pytest

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fuzz", "python_mutation.py")
if not os.path.exists(HARNESS):
    pytest.skip("tests/fuzz/python_mutation.py is not next to these tests (an installed copy)", allow_module_level=True)

_spec = importlib.util.spec_from_file_location("gradcomp_python_mutation", HARNESS)
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)

RUNS = 1000  # per entry point, with a fixed seed: the 44 entry points take a few seconds
SEED = 34


@pytest.mark.parametrize("name", harness.entry_names())
def test_entry_point_holds_the_property(name, tmp_path):
    (target,) = harness.select([name])
    stats = harness.fuzz(target, SEED, runs=RUNS, crash_dir=str(tmp_path))
    assert stats.violations == [], stats.violations[:3]
    assert stats.executions == RUNS
    # The mutations reach the checks: some inputs are refused, with codes the harness knows.
    assert sum(stats.errors.values()) > RUNS // 10, dict(stats.errors)
    assert stats.successes + sum(stats.errors.values()) == RUNS


def test_inputs_are_reproducible_from_seed_and_execution():
    (target,) = harness.select(["Sharded(topk_int8).restore_elastic"])
    target.ensure_built()
    made = []
    for _ in range(2):
        rng = harness.iteration_rng(SEED, target.name, 12345)
        p = target.params(rng)
        made.append((p, [bytes(b) for b in target.make_input(rng, p)]))
    assert made[0] == made[1]


def test_the_harness_reports_what_it_exists_to_find(tmp_path):
    # A fake entry point that, now and then, raises a KeyError, writes its output before raising
    # gradcomp.Error, writes its input, or raises gradcomp.Error without a known code.
    kinds = ["exception", "modified", "input", "code"]
    target = harness.SelfTest(kinds, every=5)
    stats = harness.fuzz(target, SEED, runs=RUNS, crash_dir=str(tmp_path))
    found = {v["kind"] for v in stats.violations}
    assert found == {"exception", "modified on error", "input written", "unknown code"}
    assert stats.successes > 0 and stats.errors["truncated"] > 0
    # Each violation left a reproducer that replays to the same violation.
    v = next(v for v in stats.violations if v["kind"] == "modified on error")
    with open(v["file"]) as f:
        rec = json.load(f)
    assert rec["iteration"] == v["iteration"] and rec["input_hex"]
    assert os.path.exists(v["file"][:-len(".json")] + ".bin")
    original = harness.all_targets
    harness.all_targets = lambda: [harness.SelfTest(kinds, every=5)]
    try:
        assert harness.replay(v["file"]) == 1
    finally:
        harness.all_targets = original
