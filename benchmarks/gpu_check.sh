#!/usr/bin/env bash
# The whole GPU check in one call, for a machine with an NVIDIA GPU:
#   benchmarks/gpu_check.sh OUTDIR
# Configures the `cuda` preset for the present GPU's architecture (nvidia-smi compute_cap),
# builds the CUDA tests and benchmarks, runs the `gpu` tests and the CUDA benchmarks, and
# writes every log plus summary.md (device, outcome, figures, targets) into OUTDIR.
# About 3-5 minutes on a 16-core machine. Exit status: 0 only if everything ran and passed.
# Environment: GRADCOMP_BUILD_DIR (default build/cuda, the preset's), JOBS (default nproc).
set -uo pipefail

out=${1:?usage: benchmarks/gpu_check.sh OUTDIR}
root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out" && out=$(cd "$out" && pwd)
build=${GRADCOMP_BUILD_DIR:-$root/build/cuda}
jobs=${JOBS:-$(nproc)}
summary=$out/summary.md
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }

# step NAME COMMAND...: runs it with its output in NAME.log, one summary line.
step() {
  local name=$1 t0=$SECONDS rc
  shift
  "$@" >"$out/$name.log" 2>&1
  rc=$?
  say "- $name: $([ $rc -eq 0 ] && echo ok || echo "FAILED (exit $rc)"), $((SECONDS - t0)) s, log: $name.log"
  return $rc
}

say "# gradcomp GPU check"
say ""
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi >"$out/nvidia-smi.log" 2>&1; then
  say "No working nvidia-smi: this machine has no usable NVIDIA GPU. Nothing was run."
  exit 2
fi
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')
say "- device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n1), sm_$cap"
say "- nvcc: $(nvcc --version 2>&1 | tail -n1)"
say "- source: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?') ($(git -C "$root" status --porcelain 2>/dev/null | wc -l) paths changed)"
say "- build: $build, $jobs jobs"
say ""

status=0
cd "$root" || exit 1
step configure cmake --preset cuda -DCMAKE_CUDA_ARCHITECTURES="$cap" -DGRADCOMP_BUILD_EXAMPLES=OFF \
  ${GRADCOMP_BUILD_DIR:+-B "$build"} || { say "configure failed: see configure.log"; exit 1; }
step build cmake --build "$build" -j "$jobs" --target gradcomp_cuda_tests gradcomp_cuda_bench || {
  say "build failed: see build.log"
  exit 1
}
step tests ctest --test-dir "$build" -L gpu --verbose --timeout 900 || status=1
# The TAGC codec on the GPU against the host codec (tests/cuda/tagc_test.cu), on its own line.
step tagc_tests "$build/tests/cuda/gradcomp_cuda_tests" --test-case='tagc*' || status=1
if grep -q "Skipped\|SKIPPED" "$out/tests.log"; then
  say "  WARNING: the gpu tests were skipped (no device visible to the test process)"
  status=1
fi
grep -E "test cases:|assertions:" "$out/tests.log" | sed 's/^/  /' | tee -a "$summary"
step bench "$build/benchmarks/gradcomp_cuda_bench" --benchmark_counters_tabular=true \
  --benchmark_out="$out/bench.json" --benchmark_out_format=json || status=1

say ""
say "## Benchmarks (GBps = bytes read + written per second; ratio = GBps / device copy GBps)"
say ""
if command -v python3 >/dev/null 2>&1 && [ -s "$out/bench.json" ]; then
  python3 - "$out/bench.json" <<'EOF' | tee -a "$summary"
import json, sys
runs = json.load(open(sys.argv[1]))["benchmarks"]
print("| benchmark | us | GBps | copy GBps | ratio | compression | vs 2 reads |")
print("|---|---:|---:|---:|---:|---:|---:|")
by = {}
for r in runs:
    if r.get("run_type", "iteration") != "iteration":
        continue
    by[r["name"]] = r
    f = lambda k: ("%.3g" % r[k]) if k in r else ""
    print(f"| {r['name']} | {f('us')} | {f('GBps')} | {f('copy_GBps')} | {f('ratio')} | {f('compression')} | {f('vs_2reads')} |")
print()
tagc = [r for r in runs if r["name"].startswith("BM_tagc") and r.get("run_type", "iteration") == "iteration"]
if tagc:
    print("TAGC, one rank of W = 4 (phase 0 encode_bitmap; 1 receive_bitmap + encode_sketch; 2 receive_sketch):")
    print()
    print("| benchmark | us | x copy of 4n bytes | rows | items | peeled | rounds |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in tagc:
        g = lambda k: ("%.4g" % r[k]) if k in r else ""
        print(f"| {r['name']} | {g('us')} | {g('x_copy')} | {g('rows')} | {g('items')} | {g('peeled')} | {g('rounds')} |")
    print()
print("Targets:")
def target(name, key, ok, text):
    r = by.get(name)
    if r is None or key not in r:
        print(f"- {text}: not measured ({name})")
    else:
        print(f"- {text}: {r[key]:.3f} -> {'met' if ok(r[key]) else 'NOT met'}")
target("BM_compress_bf16/134217728/manual_time", "ratio", lambda v: v >= 0.85, "bf16 compress at 2^27, ratio >= 0.85")
target("BM_accumulate_bf16/134217728/manual_time", "ratio", lambda v: v >= 0.85, "bf16 accumulate at 2^27, ratio >= 0.85")
target("BM_topk/n:134217728/permille:10/manual_time", "vs_2reads", lambda v: v <= 3.0, "top-k 1% of 2^27, time / two reads <= 3")
EOF
else
  grep -E "^BM_|^Benchmark|^---" "$out/bench.log" | tee -a "$summary"
fi
say ""
say "Overall: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
exit $status
