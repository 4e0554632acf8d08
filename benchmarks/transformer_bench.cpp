// gradcomp transformer benchmarks (Google Benchmark): the AccTFM hybrid on a [2048 x 4096]
// activation, and the overlap planner on a 48-layer model.
//
// Rows are named <operation>/<case> (benchmarks/report makes a table per operation). Hybrid
// rows (token-level top-k, 1/8 of each row, + piecewise<4>, 256 rows per frame, no feedback)
// report, as benchmarks/cpu_bench.cpp does:
//   GBps            bytes read + written, 1e9 per second: compress reads the 4n input and
//                   writes the payload; decompress reads the payload and writes 4n; accumulate
//                   reads the payload and reads and writes the 4k sums where values were sent
//                   (ranks:8: 8 payloads, all-gathered, accumulated in one call);
//   memcpy_GBps     memcpy of the 4n input bytes (read + write), timed in the same loop (each
//                   iteration: a warm copy timed, then the operation timed);
//   vs_memcpy       GBps / memcpy_GBps; time_vs_memcpy: time per call / time of one copy of
//                   the 4n input; ratio: 4n / payload bytes (one rank's); median_ms.
// Counters use median times (shared machines). Inputs: fixed-seed activations, a log-normal
// scale per token, Student-t(3) values, every 61st channel twenty times larger.
//
// Planner rows: plan_model for 48 layers (8192 tokens x 4096 hidden each, max 32 chunks, the
// plain and the compressed path), all distinct (no layer planned twice) or all alike (planned
// once); median_ms is the time of the whole model, ms_per_layer its 48th.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include <gradcomp/model.hpp>

namespace {

using clock_type = std::chrono::steady_clock;
namespace gc = gradcomp;
namespace gm = gradcomp::model;

constexpr std::size_t tokens = 2048, hidden = 4096, n = tokens * hidden;
using H = gm::acctfm<4>;

double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

const std::vector<float>& activation(std::uint32_t seed = 1) {
  static std::vector<std::vector<float>> cache(8);
  std::vector<float>& x = cache[seed % 8];
  if (!x.empty()) return x;
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::chi_squared_distribution<float> chi2(3.0f);
  x.resize(n);
  for (std::size_t t = 0; t < tokens; ++t) {
    const float scale = std::exp(0.5f * normal(gen));
    for (std::size_t h = 0; h < hidden; ++h)
      x[t * hidden + h] = (h % 61 == 7 ? 20.0f : 1.0f) * scale * normal(gen) / std::sqrt(chi2(gen) / 3.0f + 1e-12f);
  }
  return x;
}

const H& hybrid() {
  static const H h(gm::acctfm_config<4>(hidden, 1.0 / 8, 256));
  return h;
}

std::vector<std::byte> payload_of(const std::vector<float>& x) {
  auto st = hybrid().make_state(n);
  std::vector<std::byte> p(hybrid().max_payload_bytes<float>(n));
  p.resize(*hybrid().compress<float>(x, st, p));
  return p;
}

// Each iteration: memcpy of the 4n input twice (the second timed), then op() timed.
template <class Op>
void measure(benchmark::State& st, double bytes_rw, double payload_bytes, Op&& op) {
  const std::vector<float>& src = activation();
  std::vector<float> dst(n);
  std::vector<double> ours, copy;
  for (auto _ : st) {
    std::memcpy(dst.data(), src.data(), 4 * n);
    benchmark::ClobberMemory();
    auto t0 = clock_type::now();
    std::memcpy(dst.data(), src.data(), 4 * n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    copy.push_back(seconds_since(t0));
    t0 = clock_type::now();
    op();
    benchmark::ClobberMemory();
    const double t = seconds_since(t0);
    st.SetIterationTime(t);
    ours.push_back(t);
  }
  const double t_ours = median(ours), t_copy = median(copy);
  if (t_ours <= 0 || t_copy <= 0) return;
  st.counters["GBps"] = bytes_rw / t_ours * 1e-9;
  st.counters["memcpy_GBps"] = 8.0 * n / t_copy * 1e-9;
  st.counters["vs_memcpy"] = (bytes_rw / t_ours) / (8.0 * n / t_copy);
  st.counters["time_vs_memcpy"] = t_ours / t_copy;
  st.counters["ratio"] = 4.0 * n / payload_bytes;
  st.counters["median_ms"] = 1e3 * t_ours;
}

void BM_acctfm_compress(benchmark::State& st) {
  const auto& x = activation();
  auto state = hybrid().make_state(n);
  std::vector<std::byte> p(hybrid().max_payload_bytes<float>(n));
  const double bytes = static_cast<double>(payload_of(x).size());
  bool ok = true;
  measure(st, 4.0 * n + bytes, bytes, [&] {
    ok &= hybrid().compress<float>(x, state, p).ok();
    benchmark::DoNotOptimize(p.data());
  });
  if (!ok) st.SkipWithError("compress failed");
}

void BM_acctfm_decompress(benchmark::State& st) {
  const auto p = payload_of(activation());
  std::vector<float> out(n);
  bool ok = true;
  measure(st, static_cast<double>(p.size()) + 4.0 * n, static_cast<double>(p.size()), [&] {
    ok &= hybrid().decompress<float>(p, out).ok();
    benchmark::DoNotOptimize(out.data());
  });
  if (!ok) st.SkipWithError("decompress failed");
}

// One payload, or 8 ranks' (all-gathered, back to back), accumulated into an fp32 sum.
void BM_acctfm_accumulate(benchmark::State& st, std::size_t ranks) {
  std::vector<std::byte> gathered;
  for (std::size_t r = 0; r < ranks; ++r) {
    const auto p = payload_of(activation(static_cast<std::uint32_t>(r + 1)));
    gathered.insert(gathered.end(), p.begin(), p.end());
  }
  const double kept = static_cast<double>(tokens * gc::sparsify::row_topk::per_row(hybrid().get_config().sparsify));
  std::vector<float> sum(n, 0.0f);
  bool ok = true;
  measure(st, static_cast<double>(gathered.size()) + static_cast<double>(ranks) * 8.0 * kept,
          static_cast<double>(gathered.size()) / static_cast<double>(ranks), [&] {
            ok &= gm::accumulate_gathered<H, float>(hybrid(), gathered, 0, sum).ok();
            benchmark::DoNotOptimize(sum.data());
          });
  if (!ok) st.SkipWithError("accumulate failed");
}

void BM_planner_48_layers(benchmark::State& st, bool distinct) {
  std::vector<gm::layer_problem> layers(48, gm::layer_problem{8192 * 4096, 4096, 2e-3, 10e-6, 2});
  if (distinct)
    for (std::size_t i = 0; i < layers.size(); ++i) layers[i].compute_s *= 1.0 + 0.01 * static_cast<double>(i);
  gm::planner_options o;
  o.net = gm::network::gbit(10);
  o.compressed = {0.4, 88, 2e9, 4e9, 5e-6, gm::collective::all_gather};
  std::vector<double> times;
  for (auto _ : st) {
    const auto t0 = clock_type::now();
    auto plans = gm::plan_model(layers, o);
    benchmark::DoNotOptimize(plans.data());
    const double t = seconds_since(t0);
    st.SetIterationTime(t);
    times.push_back(t);
  }
  st.counters["median_ms"] = 1e3 * median(times);
  st.counters["ms_per_layer"] = 1e3 * median(times) / 48;
}

}  // namespace

template <class Fn>
void add(const char* name, Fn&& fn, double min_time = 0.5) {
  benchmark::RegisterBenchmark(name, std::forward<Fn>(fn))->UseManualTime()->Unit(benchmark::kMillisecond)->MinTime(min_time);
}

int main(int argc, char** argv) {
  std::vector<char*> args(argv, argv + argc);  // tabular counters unless the caller chose otherwise
  bool tabular_set = false;
  for (int i = 1; i < argc; ++i) tabular_set |= std::strncmp(argv[i], "--benchmark_counters_tabular", 28) == 0;
  static char tabular[] = "--benchmark_counters_tabular=true";
  if (!tabular_set) args.insert(args.begin() + 1, tabular);
  int count = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  add("compress/acctfm_2048x4096", BM_acctfm_compress);
  add("decompress/acctfm_2048x4096", BM_acctfm_decompress);
  add("accumulate/acctfm_2048x4096/ranks:1", [](benchmark::State& st) { BM_acctfm_accumulate(st, 1); });
  add("accumulate/acctfm_2048x4096/ranks:8", [](benchmark::State& st) { BM_acctfm_accumulate(st, 8); });
  add("planner/48_layers_alike", [](benchmark::State& st) { BM_planner_48_layers(st, false); }, 0.1);
  add("planner/48_layers_distinct", [](benchmark::State& st) { BM_planner_48_layers(st, true); }, 0.1);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
