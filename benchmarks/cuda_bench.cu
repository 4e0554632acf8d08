// CUDA benchmarks (Google Benchmark, manual time from CUDA events). Each reports:
//   GBps        effective bandwidth: the bytes the operation must read and write, per second
//   copy_GBps   cudaMemcpy device-to-device moving the same number of bytes, same process
//   ratio       GBps / copy_GBps (the targets are ratios: docs/benchmarks.md)
//   compression input bytes / payload bytes
// Top-k also reports vs_2reads: its time over the time of a kernel reading the input twice
// (target: <= 3 at 1% of 2^27 floats). Inputs rotate over enough buffers that each
// iteration's working set is several times the L2 cache; every benchmark warms up first.
// BM_compress_int8 / BM_accumulate_int8 run the grouped path (int_block<8>, groups of 128);
// they have no target yet. BM_tagc times one phase of a TAGC step (us, x_copy: over a device
// copy of the input; the peel's items, peeled and rounds). Without a CUDA device the program
// says so and exits 0.

#include <benchmark/benchmark.h>

#include <gradcomp/cuda.cuh>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace gc = gradcomp;
namespace gcu = gradcomp::cuda;

namespace {

#define BENCH_CUDA(expr)                                                                  \
  do {                                                                                    \
    const cudaError_t e_ = (expr);                                                        \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

struct device_buffer {
  void* p = nullptr;
  std::size_t size = 0;
  explicit device_buffer(std::size_t bytes) : size(bytes) { BENCH_CUDA(cudaMalloc(&p, bytes < 256 ? 256 : bytes)); }
  ~device_buffer() { cudaFree(p); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  std::byte* bytes() const { return static_cast<std::byte*>(p); }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

std::size_t l2_bytes() {
  int dev = 0, l2 = 0;
  BENCH_CUDA(cudaGetDevice(&dev));
  BENCH_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  return static_cast<std::size_t>(l2);
}

// Copies of the working set so that consecutive iterations miss in L2 (>= 4x L2 in total).
std::size_t rotations(std::size_t working_set) {
  const std::size_t want = (4 * l2_bytes() + working_set - 1) / (working_set ? working_set : 1);
  return want < 1 ? 1 : (want > 8 ? 8 : want);
}

__global__ void fill_kernel(float* x, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 15;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    x[i] = (static_cast<float>(h >> 8) * (1.0f / 16777216.0f) - 0.5f) * 1e-2f;  // gradient-like magnitudes
  }
}

// Reads x once (a sum per block, so the loads cannot be dropped).
__global__ void read_kernel(const float* __restrict__ x, std::size_t n, float* sink) {
  float s = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) s += x[i];
  if (s == 12345.0f) sink[blockIdx.x] = s;
}

class timer {
 public:
  timer() {
    BENCH_CUDA(cudaEventCreate(&a_));
    BENCH_CUDA(cudaEventCreate(&b_));
  }
  ~timer() {
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
  }
  template <class F>
  double seconds(F&& f, int reps = 1) {
    BENCH_CUDA(cudaEventRecord(a_));
    for (int i = 0; i < reps; ++i) f(i);
    BENCH_CUDA(cudaEventRecord(b_));
    BENCH_CUDA(cudaEventSynchronize(b_));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, a_, b_));
    return ms * 1e-3 / reps;
  }

 private:
  cudaEvent_t a_, b_;
};

// Device copy bandwidth moving `moved` bytes (half read, half written).
double copy_gbps(std::size_t moved) {
  const std::size_t half = moved / 2;
  device_buffer src(half), dst(half);
  timer t;
  const auto copy = [&](int) { BENCH_CUDA(cudaMemcpyAsync(dst.p, src.p, half, cudaMemcpyDeviceToDevice)); };
  t.seconds(copy, 3);
  return 2.0 * static_cast<double>(half) / t.seconds(copy, 20) / 1e9;
}

// Runs op(rotation) in the timing loop and sets the counters.
template <class Op>
void run(benchmark::State& state, std::size_t moved_bytes, double compression, std::size_t sets, Op&& op) {
  timer t;
  t.seconds([&](int i) { op(static_cast<std::size_t>(i) % sets); }, 3);  // warm-up
  double total = 0;
  std::size_t k = 0;
  for (auto _ : state) {
    const double s = t.seconds([&](int) { op(k++ % sets); });
    state.SetIterationTime(s);
    total += s;
  }
  const double gbps = static_cast<double>(moved_bytes) * static_cast<double>(state.iterations()) / total / 1e9;
  const double copy = copy_gbps(moved_bytes);
  state.counters["GBps"] = gbps;
  state.counters["copy_GBps"] = copy;
  state.counters["ratio"] = gbps / copy;
  state.counters["compression"] = compression;
  state.counters["us"] = total / static_cast<double>(state.iterations()) * 1e6;
}

using dense_bf16 = gc::compressor<gc::partition::whole, gc::sparsify::dense, gc::quantize::bf16, gc::feedback::none>;
using dense_bf16_residual = gc::compressor<gc::partition::whole, gc::sparsify::dense, gc::quantize::bf16, gc::feedback::residual>;
using topk_plain = gc::compressor<gc::partition::whole, gc::sparsify::topk, gc::quantize::none, gc::feedback::none>;
// The grouped path (cuda/groups.cuh): int8 codes, one f32 scale per 128 values.
using dense_int8 = gc::compressor<gc::partition::whole, gc::sparsify::dense, gc::quantize::int_block<8>, gc::feedback::none>;

// One set of device buffers for compressing n floats with comp.
template <class C>
struct compress_set {
  device_buffer grad, payload, state, workspace, report;
  gcu::device_state st;
  compress_set(const C& comp, std::size_t n, std::uint32_t seed)
      : grad(4 * n),
        payload(comp.template max_payload_bytes<float>(n)),
        state(gcu::state_bytes(comp, n)),
        workspace(gcu::compress_workspace_bytes<float>(comp, n)),
        report(sizeof(gcu::report)) {
    fill_kernel<<<1024, 256>>>(grad.as<float>(), n, seed);
    st = *gcu::make_state(comp, {state.bytes(), state.size}, n);
    BENCH_CUDA(cudaDeviceSynchronize());
  }
  void compress(const C& comp, std::size_t n) {
    const gc::status s = gcu::compress<float>(comp, {nullptr, {workspace.bytes(), workspace.size}},
                                              std::span<const float>(grad.as<float>(), n), st,
                                              {payload.bytes(), payload.size}, report.as<gcu::report>());
    if (!s) {
      std::fprintf(stderr, "compress: %s\n", s.detail());
      std::exit(1);
    }
  }
};

template <class C>
void bench_compress(benchmark::State& state, const C& comp, std::size_t moved_per_element) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::size_t payload = comp.template max_payload_bytes<float>(n);
  const std::size_t sets = rotations(4 * n + payload);
  std::vector<std::unique_ptr<compress_set<C>>> s;
  for (std::size_t i = 0; i < sets; ++i) s.push_back(std::make_unique<compress_set<C>>(comp, n, static_cast<std::uint32_t>(i + 1)));
  run(state, moved_per_element * n + payload, 4.0 * static_cast<double>(n) / static_cast<double>(payload), sets,
      [&](std::size_t i) { s[i]->compress(comp, n); });
}

void BM_compress_bf16(benchmark::State& state) { bench_compress(state, dense_bf16{}, 4); }          // read g
void BM_compress_bf16_residual(benchmark::State& state) { bench_compress(state, dense_bf16_residual{}, 12); }  // g, e, e'
void BM_compress_int8(benchmark::State& state) { bench_compress(state, dense_int8{}, 4); }          // read g

// Accumulates one dense payload of n floats into a sum.
template <class C>
void bench_accumulate(benchmark::State& state, const C& comp) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const std::size_t bytes = comp.template max_payload_bytes<float>(n);
  const std::size_t sets = rotations(bytes + 4 * n);
  struct set {
    std::unique_ptr<compress_set<C>> c;
    std::unique_ptr<device_buffer> sum, ws, rep;
  };
  std::vector<set> s(sets);
  for (std::size_t i = 0; i < sets; ++i) {
    s[i].c = std::make_unique<compress_set<C>>(comp, n, static_cast<std::uint32_t>(i + 1));
    s[i].c->compress(comp, n);
    s[i].sum = std::make_unique<device_buffer>(4 * n);
    s[i].ws = std::make_unique<device_buffer>(gcu::decode_workspace_bytes<float>(comp, n, comp.template chunk_count<float>(n)));
    s[i].rep = std::make_unique<device_buffer>(sizeof(gcu::report));
    BENCH_CUDA(cudaMemset(s[i].sum->p, 0, 4 * n));
  }
  BENCH_CUDA(cudaDeviceSynchronize());
  // Essential bytes: payload read once, sum read and written. Validation before writing reads
  // the payload a second time (not counted; see docs/cuda.md).
  run(state, bytes + 8 * n, 4.0 * static_cast<double>(n) / static_cast<double>(bytes), sets, [&](std::size_t i) {
    const gc::status st = gcu::accumulate<float>(comp, {nullptr, {s[i].ws->bytes(), s[i].ws->size}},
                                                 std::span<const std::byte>(s[i].c->payload.bytes(), bytes),
                                                 std::span<float>(s[i].sum->template as<float>(), n),
                                                 s[i].rep->template as<gcu::report>());
    if (!st) std::exit(1);
  });
}

void BM_accumulate_bf16(benchmark::State& state) { bench_accumulate(state, dense_bf16{}); }
void BM_accumulate_int8(benchmark::State& state) { bench_accumulate(state, dense_int8{}); }

void BM_topk(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const double density = static_cast<double>(state.range(1)) / 1000.0;
  const topk_plain comp({.sparsify = {.density = density}});
  bench_compress(state, comp, 4);
  // Two reads of the input, for the top-k target.
  device_buffer x(4 * n), sink(4 * 4096);
  fill_kernel<<<1024, 256>>>(x.as<float>(), n, 7);
  timer t;
  const auto read2 = [&](int) {
    read_kernel<<<4096, 256>>>(x.as<float>(), n, sink.as<float>());
    read_kernel<<<4096, 256>>>(x.as<float>(), n, sink.as<float>());
  };
  t.seconds(read2, 2);
  const double two_reads = t.seconds(read2, 10);
  state.counters["vs_2reads"] = state.counters["us"] * 1e-6 / two_reads;
}

// TAGC (cuda/tagc.cuh), one rank's share of a step with W = 4: the other ranks' kept positions
// come from their first step and stay fixed; rank 0 runs every step in full (default config,
// padded sketch layout, reduce-scatter shard). The row's time is its phase only:
//   phase 0  encode_bitmap: x = g + e, the threshold search of the 4 shards, the bitmap
//   phase 1  receive_bitmap + encode_sketch: union, r, cell index, the 4 shards' cells and the
//            peel of its own cells (error feedback)
//   phase 2  receive_sketch: the peel of its shard's cells
// x_copy: the time over a device copy of the 4n input bytes, measured in the same run.
__global__ void or_kernel(const std::uint32_t* words, std::size_t count, std::uint32_t world, std::uint32_t* out) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count; i += std::size_t{gridDim.x} * blockDim.x) {
    std::uint32_t v = 0;
    for (std::uint32_t r = 0; r < world; ++r) v |= words[r * count + i];
    out[i] = v;
  }
}

void BM_tagc(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const int phase = static_cast<int>(state.range(1));
  constexpr std::uint32_t world = 4;
  const gcu::tagc::codec tagc(gc::tagc::config{}, gcu::tagc::sketch_layout::padded);
  std::vector<std::unique_ptr<device_buffer>> mem;
  std::vector<gcu::tagc::device_state> st(world);
  device_buffer grads(4 * n * world), ws(*tagc.workspace_bytes(n, world));
  for (std::uint32_t r = 0; r < world; ++r) {
    mem.push_back(std::make_unique<device_buffer>(*tagc.state_bytes(n, world)));
    if (!tagc.make_state({mem[r]->bytes(), mem[r]->size}, n, world, r, st[r])) std::exit(1);
    fill_kernel<<<1024, 256>>>(grads.as<float>() + r * n, n, 11 + r);
  }
  const gc::summable::phase p0 = *tagc.describe(0, st[0]), p1 = *tagc.describe(1, st[0]);
  device_buffer sends(world * p0.bytes()), uni(p0.bytes()), cells(p1.bytes()), out(4 * gc::summable::shard_size(n, world));
  const gcu::executor ex{nullptr, {ws.bytes(), ws.size}};
  const auto grad = [&](std::uint32_t r) { return std::span<const float>(grads.as<float>() + r * n, n); };
  for (std::uint32_t r = 0; r < world; ++r)
    if (!tagc.encode_bitmap(ex, st[r], grad(r), {sends.bytes() + r * p0.bytes(), p0.bytes()})) std::exit(1);
  or_kernel<<<1024, 256>>>(sends.as<std::uint32_t>(), p0.count, world, uni.as<std::uint32_t>());
  if (!tagc.finish_step(nullptr, st[0])) std::exit(1);
  BENCH_CUDA(cudaDeviceSynchronize());
  cudaEvent_t ev[4];
  for (auto& e : ev) BENCH_CUDA(cudaEventCreate(&e));
  const auto one_step = [&] {
    BENCH_CUDA(cudaEventRecord(ev[0]));
    bool ok = tagc.encode_bitmap(ex, st[0], grad(0), {sends.bytes(), p0.bytes()}).ok();
    BENCH_CUDA(cudaEventRecord(ev[1]));
    ok = ok && tagc.receive_bitmap(ex, st[0], {uni.bytes(), p0.bytes()}).ok();
    ok = ok && tagc.encode_sketch(ex, st[0], {cells.bytes(), p1.bytes()}).ok();
    BENCH_CUDA(cudaEventRecord(ev[2]));
    ok = ok && tagc.receive_sketch(ex, st[0], {cells.bytes(), p1.shard_bytes()}, gc::summable::received::shard,
                                   {out.as<float>(), gc::summable::shard_of(n, world, 0).count}).ok();
    BENCH_CUDA(cudaEventRecord(ev[3]));
    ok = ok && tagc.finish_step(nullptr, st[0]).ok();
    if (!ok) std::exit(1);
    BENCH_CUDA(cudaEventSynchronize(ev[3]));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, ev[phase], ev[phase + 1]));
    return ms * 1e-3;
  };
  for (int i = 0; i < 2; ++i) one_step();  // warm-up
  double total = 0;
  for (auto _ : state) {
    const double s = one_step();
    state.SetIterationTime(s);
    total += s;
  }
  const gcu::tagc::step_report rep = *tagc.read_report(st[0]);
  const double us = total / static_cast<double>(state.iterations()) * 1e6;
  const double copy_us = 8.0 * static_cast<double>(n) / copy_gbps(8 * n) / 1e3;  // 4n bytes read + 4n written
  state.counters["us"] = us;
  state.counters["x_copy"] = us / copy_us;
  state.counters["rows"] = rep.rows;
  state.counters["items"] = phase == 2 ? rep.stats.items : rep.own.items;
  state.counters["peeled"] = phase == 2 ? rep.stats.peeled : rep.own.peeled;
  state.counters["rounds"] = phase == 2 ? rep.stats.rounds : rep.own.rounds;
  for (auto& e : ev) cudaEventDestroy(e);
}

constexpr std::int64_t n24 = std::int64_t{1} << 24, n27 = std::int64_t{1} << 27;

BENCHMARK(BM_compress_bf16)->Arg(n24)->Arg(n27)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_accumulate_bf16)->Arg(n24)->Arg(n27)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_compress_bf16_residual)->Arg(n24)->Arg(n27)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_compress_int8)->Arg(n24)->Arg(n27)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_accumulate_int8)->Arg(n24)->Arg(n27)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_tagc)
    ->ArgsProduct({{n24, n27}, {0, 1, 2}})
    ->ArgNames({"n", "phase"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_topk)
    ->ArgsProduct({{n24, n27}, {1, 10, 100}})  // density in 1/1000: 0.1%, 1%, 10%
    ->ArgNames({"n", "permille"})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::printf("gradcomp CUDA benchmarks: no usable CUDA device (%s); nothing to measure\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 0;
  }
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  benchmark::AddCustomContext("device", prop.name);
  benchmark::AddCustomContext("compute_capability", std::to_string(prop.major) + std::to_string(prop.minor));
  benchmark::AddCustomContext("l2_bytes", std::to_string(prop.l2CacheSize));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
