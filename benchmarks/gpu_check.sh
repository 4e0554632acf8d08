#!/usr/bin/env bash
# The whole GPU check in one call, for a machine with an NVIDIA GPU:
#   benchmarks/gpu_check.sh OUTDIR
# Configures the `cuda` preset for the present GPU's architecture (nvidia-smi compute_cap),
# builds the CUDA tests, benchmarks and the NCCL example while the Python extension builds with
# its CUDA kernels, then runs: the `gpu` C++ tests, the NCCL example on every GPU present, the
# Python `gpu` tests, the Python benchmark (codecs on CUDA tensors against a device copy and
# torch.topk) and the CUDA benchmarks. Writes every log, summary.md and summary.json into
# OUTDIR. About 4-6 minutes on a 16-core H200 machine. Exit status: 0 only if everything ran
# and passed.
# Environment: GRADCOMP_BUILD_DIR (default build/cuda, the preset's), JOBS (default nproc),
# GRADCOMP_GPU_BIN (a folder with gradcomp_cuda_tests, gradcomp_cuda_bench and gradcomp_nccl
# built beforehand for this GPU: skips the C++ build), PYTHON (default python3).
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
py=${PYTHON:-python3}
site=$build/python-site
# The Python extension with its CUDA kernels, built beside the C++ (its own log).
rm -rf "$site"
( t0=$SECONDS; CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=$cap -DGRADCOMP_PYTHON_CUDA=ON" CMAKE_BUILD_PARALLEL_LEVEL=$jobs \
    "$py" -m pip install --no-build-isolation --no-deps --no-index --target "$site" ./python >"$out/python_build.log" 2>&1
  echo "exit $? after $((SECONDS - t0)) s" >>"$out/python_build.log" ) &
pybuild=$!

if [ -n "${GRADCOMP_GPU_BIN:-}" ]; then
  bin_tests=$GRADCOMP_GPU_BIN/gradcomp_cuda_tests bin_bench=$GRADCOMP_GPU_BIN/gradcomp_cuda_bench bin_nccl=$GRADCOMP_GPU_BIN/gradcomp_nccl
  say "- C++ binaries: prebuilt, $GRADCOMP_GPU_BIN"
else
  # NCCL from the CUDA toolkit, the system, or PyPI's nvidia-nccl wheel (torch's).
  nccl_args=()
  nccl_py=$("$py" -c "import nvidia.nccl, os; print(nvidia.nccl.__path__[0])" 2>/dev/null || true)
  if [ -n "$nccl_py" ] && [ -f "$nccl_py/include/nccl.h" ]; then
    nccl_args=(-DGRADCOMP_NCCL_INCLUDE_DIR="$nccl_py/include" -DGRADCOMP_NCCL_LIBRARY="$(ls "$nccl_py"/lib/libnccl.so* | head -n1)")
  fi
  step configure cmake --preset cuda -DCMAKE_CUDA_ARCHITECTURES="$cap" "${nccl_args[@]}" \
    ${GRADCOMP_BUILD_DIR:+-B "$build"} || { say "configure failed: see configure.log"; exit 1; }
  targets=(gradcomp_cuda_tests gradcomp_cuda_bench)
  grep -q gradcomp_nccl "$build/build.ninja" && targets+=(gradcomp_nccl)
  step build cmake --build "$build" -j "$jobs" --target "${targets[@]}" || { say "build failed: see build.log"; exit 1; }
  bin_tests=$build/tests/cuda/gradcomp_cuda_tests bin_bench=$build/benchmarks/gradcomp_cuda_bench bin_nccl=$build/examples/nccl/gradcomp_nccl
fi

step tests "$bin_tests" --duration=true || status=1
if grep -q "no CUDA device" "$out/tests.log"; then
  say "  WARNING: the gpu tests were skipped (no device visible to the test process)"
  status=1
fi
grep -E "test cases:|assertions:" "$out/tests.log" | sed 's/^/  /' | tee -a "$summary"
if [ -x "$bin_nccl" ]; then
  step nccl "$bin_nccl" --steps 100 --print-every 99 || status=1
else
  say "- nccl: not built (no NCCL found)"
  status=1
fi

wait "$pybuild"
say "- python_build: $(tail -n1 "$out/python_build.log"), log: python_build.log"
if grep -q "^exit 0" "$out/python_build.log"; then
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
  step python_info "$py" -c "import gradcomp, json; print(json.dumps(gradcomp.build_info()))" || status=1
  step python_tests "$py" -m pytest -q -m gpu -p no:cacheprovider python/tests || status=1
  tail -n1 "$out/python_tests.log" | sed 's/^/  /' | tee -a "$summary"
  step python_bench "$py" benchmarks/gpu_python.py "$out/python_bench.json" || status=1
else
  status=1
fi
step bench "$bin_bench" --benchmark_counters_tabular=true --benchmark_min_time=0.2 \
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
if [ -s "$out/python_bench.json" ]; then
  say ""
  say "## Codecs on CUDA tensors from Python (x copy = bandwidth / device copy of the same bytes)"
  say ""
  grep "^|" "$out/python_bench.log" | tee -a "$summary" >/dev/null
fi
say ""
say "Overall: $([ $status -eq 0 ] && echo PASS || echo FAIL)"
# One JSON beside the Markdown: the outcome, the step lines and the benchmarks' figures.
"$py" - "$out" "$status" <<'EOF' || true
import json, os, sys
out, status = sys.argv[1], int(sys.argv[2])
load = lambda f: json.load(open(os.path.join(out, f))) if os.path.exists(os.path.join(out, f)) else None
steps = [l[2:].strip() for l in open(os.path.join(out, "summary.md")) if l.startswith("- ")]
json.dump({"pass": status == 0, "steps": steps, "cuda_bench": load("bench.json"), "python_bench": load("python_bench.json")},
          open(os.path.join(out, "summary.json"), "w"), indent=1)
EOF
exit $status

