// gradcomp CPU benchmarks (Google Benchmark): compress, decompress and accumulate of every
// codec, through the public compressor API only, with partition::whole (one frame).
//
// Rows are named <operation>/<codec>/n:<elements>, the codec being the quantizer, preceded by
// the sparsifier ("topk1%+bf16") when it is not dense and followed by "+residual" for error
// feedback. The transforms' rows (transform/, inverse/) are named by transform and block. n = 1e6 (4 MB of fp32) and 1e7 (40 MB). Inputs: fixed-seed Student-t (3 dof).
// Counters (benchmarks/report turns them into docs/benchmarks.md):
//   GBps         effective bandwidth, 1e9 bytes/s: the bytes the operation must read plus
//                those it must write, each counted once, at the median time. compress: the
//                fp32 input (4n) + the payload, + 8n with residual feedback (read and write e);
//                decompress: payload + 4n; accumulate: payload + 8n (dense) or 8k (sparse,
//                the k touched sums). Extra passes the library makes (CRC32C, validation,
//                sampling) are its cost and are not counted.
//   memcpy_GBps  the same figure for memcpy of as many bytes (half of them read, half
//                written), timed in the same loop: each iteration copies once untimed (to
//                put the buffers back where a previous step left them), once timed, then
//                runs the operation, so both see the same machine load.
//   vs_memcpy    GBps / memcpy_GBps (= memcpy time / our time).
//   vs_naive     naive time / our time, the naive loop (benchmarks/naive.hpp) timed in the
//                same loop: at least 3 runs, and while its total time is below ours.
//   ratio        compression ratio: 4n / payload bytes (frame header included).
//   median_ms    median time of one call.
// Medians, not means: the machines are shared and a mean follows preemptions. Google
// Benchmark's own Time column is the mean of the operation (manual time); its CPU column
// also covers the memcpy and naive runs.
// Before timing, rows without feedback check that the naive loop decodes to the same floats
// as the library, so both do the same work (not threshold and random-k, whose naive loops
// select differently); a row that fails is skipped with an error.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <gradcomp/gradcomp.hpp>
#include <gradcomp/transform/dct.hpp>
#include <gradcomp/transform/hadamard.hpp>

#include "naive.hpp"

namespace {

namespace gc = gradcomp;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

// Student-t (3 dof) = z / sqrt(chi2_3 / 3) from splitmix64 and Box-Muller (the standard
// distributions differ between library implementations).
const std::vector<float>& input(std::size_t n) {
  static std::map<std::size_t, std::vector<float>> cache;
  if (auto it = cache.find(n); it != cache.end()) return it->second;
  std::uint64_t s = 0x6772616463ull + n;
  const auto uniform = [&s] {  // (0, 1)
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (static_cast<double>((z ^ (z >> 31)) >> 11) + 0.5) * 0x1.0p-53;
  };
  const auto normal = [&uniform] { return std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform()); };
  std::vector<float> v(n);
  for (float& x : v) {
    const double z = normal(), a = normal(), b = normal(), c = normal();
    x = static_cast<float>(1e-3 * z / std::sqrt((a * a + b * b + c * c) / 3.0));
  }
  return cache.emplace(n, std::move(v)).first->second;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return v.size() % 2 ? *mid : 0.5 * (*mid + *std::max_element(v.begin(), mid));
}

// The timing loop (see the counters above). bytes: read + written per call of run().
template <class Run, class Naive>
void measure(benchmark::State& st, double bytes, double ratio, Run&& run, Naive&& naive) {
  const auto copy_bytes = static_cast<std::size_t>(bytes / 2);
  std::vector<std::byte> src(copy_bytes, std::byte{1}), dst(copy_bytes);
  std::vector<double> ours, copy, base;
  double ours_total = 0, base_total = 0;
  for (auto _ : st) {
    std::memcpy(dst.data(), src.data(), copy_bytes);
    benchmark::ClobberMemory();
    auto t0 = clock_type::now();
    std::memcpy(dst.data(), src.data(), copy_bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    copy.push_back(seconds_since(t0));
    if (base.size() < 3 || base_total < ours_total) {
      t0 = clock_type::now();
      naive();
      benchmark::ClobberMemory();
      base.push_back(seconds_since(t0));
      base_total += base.back();
    }
    t0 = clock_type::now();
    run();
    benchmark::ClobberMemory();
    ours.push_back(seconds_since(t0));
    st.SetIterationTime(ours.back());
    ours_total += ours.back();
  }
  const double t = median(ours), t_copy = median(copy);
  if (t <= 0 || t_copy <= 0) return;
  st.counters["GBps"] = bytes / t * 1e-9;
  st.counters["memcpy_GBps"] = 2.0 * static_cast<double>(copy_bytes) / t_copy * 1e-9;
  st.counters["vs_memcpy"] = st.counters["GBps"] / st.counters["memcpy_GBps"];
  st.counters["vs_naive"] = median(base) / t;
  st.counters["ratio"] = ratio;
  st.counters["median_ms"] = 1e3 * t;
}

enum class op { compress, decompress, accumulate };

// One row: `c` against the naive loop `base` on the same input.
template <class C, class Naive>
void codec_row(benchmark::State& st, const C& c, std::size_t n, op kind, Naive base, bool check) {
  const std::vector<float>& g = input(n);
  gc::state s = c.make_state(n);
  std::vector<std::byte> payload(c.template max_payload_bytes<float>(n));
  const auto sent = c.template compress<float>(g, s, payload);
  if (!sent) return st.SkipWithError(sent.error().detail());
  const std::span<const std::byte> frames(payload.data(), *sent);
  std::vector<float> out(n, 0.0f), expect(n, 0.0f);
  base.encode(g.data());
  if (check) {
    base.decode(expect.data(), false);
    if (!c.template decompress<float>(frames, std::span<float>(out)) ||
        std::memcmp(out.data(), expect.data(), 4 * n) != 0)
      return st.SkipWithError("the naive loop and the library decode to different values");
  }
  const double dense = 4.0 * static_cast<double>(n), bytes = static_cast<double>(*sent);
  const double kept = static_cast<double>(gc::frame::parse_header(payload.data(), *sent)->kept_count);
  bool ok = true;
  const auto decode = [&](bool add) {
    ok &= add ? c.template accumulate<float>(frames, std::span<float>(out)).ok()
              : c.template decompress<float>(frames, std::span<float>(out)).ok();
    benchmark::DoNotOptimize(out.data());
  };
  const double ratio = dense / bytes;
  if (kind == op::compress) {
    measure(st, dense + bytes + (C::feedback::has_state ? 2 * dense : 0.0), ratio,
            [&] {
              ok &= c.template compress<float>(g, s, payload).ok();
              benchmark::DoNotOptimize(payload.data());
            },
            [&] { base.encode(g.data()); });
  } else if (kind == op::decompress) {
    measure(st, bytes + dense, ratio, [&] { decode(false); }, [&] { base.decode(expect.data(), false); });
  } else {
    const double sums = C::sparsifier::is_dense ? 2 * dense : 8 * kept;
    measure(st, bytes + sums, ratio, [&] { decode(true); }, [&] { base.decode(expect.data(), true); });
  }
  if (!ok) st.SkipWithError("the library returned an error");
}

// memcpy against itself: vs_memcpy near 1 shows how noisy the machine is.
void memcpy_row(benchmark::State& st, std::size_t n) {
  const std::vector<float>& src = input(n);
  std::vector<float> dst(n);
  const auto copy = [&] {
    std::memcpy(dst.data(), src.data(), 4 * n);
    benchmark::DoNotOptimize(dst.data());
  };
  measure(st, 8.0 * static_cast<double>(n), 1.0, copy, copy);
}

// The orthogonal transforms (transform/hadamard.hpp, transform/dct.hpp) over one chunk in place,
// forward or inverse, against the naive transform: each block's matrix applied as a product
// (b multiply-adds per value instead of log2 b butterfly passes), the Hadamard transform's
// random signs applied before (forward) or after (inverse) it. Bytes: the chunk read and
// written (8n); both must agree to 1e-4 of the input's largest value before timing.
struct transform_case {
  std::size_t block;
  std::map<std::size_t, std::vector<float>> matrices;  // per block length (a chunk's tail is cut shorter), row-major
  std::vector<float> signs_before, signs_after;         // per element (+1 / -1), or empty
};

template <class Fast>
void transform_row(benchmark::State& st, std::size_t n, const transform_case& t, Fast fast) {
  std::vector<float> x = input(n), y(n), in(n);
  const auto naive = [&] {
    for (std::size_t i = 0; i < n; ++i) in[i] = t.signs_before.empty() ? x[i] : t.signs_before[i] * x[i];
    gc::transform::for_each_block(n, t.block, [&](std::size_t at, std::size_t b) {
      const std::vector<float>& m = t.matrices.at(b);
      for (std::size_t i = 0; i < b; ++i) {
        float sum = 0.0f;
        for (std::size_t j = 0; j < b; ++j) sum += m[i * b + j] * in[at + j];
        y[at + i] = t.signs_after.empty() ? sum : t.signs_after[at + i] * sum;
      }
    });
  };
  naive();
  std::vector<float> check = x;
  fast(check.data());
  float most = 0.0f, worst = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    most = std::max(most, std::fabs(x[i]));
    worst = std::max(worst, std::fabs(check[i] - y[i]));
  }
  if (!(worst <= 1e-4f * most)) {
    st.SkipWithError("the transform and its matrix disagree");
    return;
  }
  measure(st, 8.0 * static_cast<double>(n), 1.0, [&] { fast(x.data()); }, naive);
}

// ---------------------------------------------------------------------------------------------
// Registration.
// ---------------------------------------------------------------------------------------------
constexpr std::size_t sizes[] = {1000000, 10000000};
std::string size_name(std::size_t n) { return n == 1000000 ? "1e6" : "1e7"; }
const char* op_name(op k) { return k == op::compress ? "compress" : k == op::decompress ? "decompress" : "accumulate"; }

template <class Fn>
void add(const std::string& name, Fn&& fn) {
  benchmark::RegisterBenchmark(name.c_str(), std::forward<Fn>(fn))
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->MinTime(0.2);
}

template <class S, class Q, class F = gc::feedback::none>
using codec = gc::compressor<gc::partition::whole, S, Q, F>;

// Rows of `ops` at both sizes; make(n) builds the naive loop for n elements.
template <class C, class Make>
void add_rows(const std::string& name, const C& c, Make make, std::vector<op> ops, bool check) {
  for (const std::size_t n : sizes)
    for (const op k : ops)
      add(std::string(op_name(k)) + "/" + name + "/n:" + size_name(n),
          [=](benchmark::State& st) { codec_row(st, c, n, k, make(n), check); });
}

const std::vector<op> all_ops{op::compress, op::decompress, op::accumulate};

// A quantizer with sparsify::dense: all three operations; with error feedback, compress.
template <class Q>
void dense_rows(const std::string& name, typename Q::config qc = {}, bool with_residual = false) {
  using plain = codec<gc::sparsify::dense, Q>;
  add_rows(name, plain({.quantize = qc}), [qc](std::size_t n) { return naive::quantizer<Q>(qc, n); }, all_ops, true);
  if (!with_residual) return;
  using fed = codec<gc::sparsify::dense, Q, gc::feedback::residual>;
  add_rows(name + "+residual", fed({.quantize = qc}),
           [qc](std::size_t n) { return naive::residual(naive::quantizer<Q>(qc, n), n); }, {op::compress}, false);
}

// A sparsifier with bf16 values: all three operations; with error feedback, compress.
template <class S>
void sparse_rows(const std::string& name, const typename S::config& sc, naive::sparse::rule rule, double density,
                 std::size_t cols = 0, bool with_residual = false) {
  const auto make = [=](std::size_t n) { return naive::sparse(rule, density, n, cols); };
  const bool exact = rule == naive::sparse::rule::topk || rule == naive::sparse::rule::row_topk;
  add_rows(name + "+bf16", codec<S, gc::quantize::bf16>({.sparsify = sc}), make, all_ops, exact);
  if (!with_residual) return;
  add_rows(name + "+bf16+residual", codec<S, gc::quantize::bf16, gc::feedback::residual>({.sparsify = sc}),
           [=](std::size_t n) { return naive::residual(make(n), n); }, {op::compress}, false);
}

template <unsigned Bits, gc::quantize::int_range Range>
void int_rows(const std::string& name, bool with_residual = false) {
  using Q = gc::quantize::int_block<Bits, Range>;
  dense_rows<Q>(name, {}, with_residual);
  dense_rows<Q>(name + "_stochastic", {.round = gc::quantize::rounding::stochastic});
}

// The transforms, forward and inverse, at both sizes.
void transform_rows() {
  namespace tf = gc::transform;
  // Hadamard blocks of 256 (m = 8, even: both directions scale by 1/16, so repeated calls keep
  // the data's scale); DCT blocks of 64 (DeMo's 64 x 64 chunks are rows of 64 here).
  const tf::hadamard::config hc{.block = 256, .seed = 7};
  const tf::dct::config dc{.block = 64};
  for (const std::size_t n : sizes)
    for (const bool fwd : {true, false}) {
      const std::string op = fwd ? "transform/" : "inverse/";
      transform_case h{hc.block, {}, {}, {}}, c{dc.block, {}, {}, {}};
      for (std::size_t b = 2; b <= hc.block; b *= 2) {  // H_b scaled as the direction scales it
        const unsigned m = tf::log2_of(b);
        const float scale = tf::pow2_neg(fwd ? (m + 1) / 2 : m / 2);
        std::vector<float>& hm = h.matrices[b];
        for (std::size_t i = 0; i < b; ++i)
          for (std::size_t j = 0; j < b; ++j) hm.push_back(std::popcount(i & j) % 2 ? -scale : scale);
      }
      std::vector<float>& signs = fwd ? h.signs_before : h.signs_after;
      for (std::size_t i = 0; i < n; ++i) signs.push_back(tf::negated(hc.seed, 0, i) ? -1.0f : 1.0f);
      for (std::size_t b = 2; b <= dc.block; b *= 2) {  // column j: the transform of the j-th unit vector
        std::vector<float>& cm = c.matrices[b];
        cm.resize(b * b);
        std::vector<float> e(b), tmp(b);
        for (std::size_t j = 0; j < b; ++j) {
          std::fill(e.begin(), e.end(), 0.0f);
          e[j] = 1.0f;
          fwd ? tf::dct::forward_block(dc, 0, 0, e.data(), tmp.data(), b) : tf::dct::inverse_block(dc, 0, 0, e.data(), tmp.data(), b);
          for (std::size_t i = 0; i < b; ++i) cm[i * b + j] = e[i];
        }
      }
      add(op + "hadamard256/n:" + size_name(n), [=](benchmark::State& st) {
        transform_row(st, n, h, [=](float* x) { gc::cpu::detail::transform_chunk<tf::hadamard>(hc, 0, x, n, !fwd); });
      });
      add(op + "dct64/n:" + size_name(n), [=](benchmark::State& st) {
        transform_row(st, n, c, [=](float* x) { gc::cpu::detail::transform_chunk<tf::dct>(dc, 0, x, n, !fwd); });
      });
    }
}

void register_all() {
  using namespace gc::quantize;
  using naive_rule = naive::sparse::rule;
  for (const std::size_t n : sizes) add("memcpy/n:" + size_name(n), [n](benchmark::State& st) { memcpy_row(st, n); });
  // Casts, then scaled fp8 (one power-of-two scale per 128 values).
  dense_rows<none>("fp32");
  dense_rows<bf16>("bf16", {}, true);
  dense_rows<fp16>("fp16", {}, true);
  dense_rows<fp8_e4m3>("fp8_e4m3", {}, true);
  dense_rows<fp8_e5m2>("fp8_e5m2");
  dense_rows<fp8_e4m3>("fp8_e4m3_scaled", {.group = 128});
  dense_rows<fp8_e5m2>("fp8_e5m2_scaled", {.group = 128});
  // int_block, groups of 128: symmetric / asymmetric, nearest / stochastic rounding.
  int_rows<8, int_range::symmetric>("int8", true);
  int_rows<8, int_range::asymmetric>("int8_asym");
  int_rows<4, int_range::symmetric>("int4", true);
  int_rows<4, int_range::asymmetric>("int4_asym");
  int_rows<2, int_range::symmetric>("int2");
  int_rows<2, int_range::asymmetric>("int2_asym");
  // The peers' quantizers and AccTFM's piecewise.
  dense_rows<qsgd<4>>("qsgd4");
  dense_rows<terngrad>("terngrad");
  dense_rows<sign>("sign", {}, true);
  dense_rows<natural>("natural");
  dense_rows<piecewise<4>>("piecewise4");
  dense_rows<piecewise<8>>("piecewise8");
  // Sparsifiers (bf16 values); row top-k over rows of 4096 (a hidden size).
  using namespace gc::sparsify;
  sparse_rows<topk>("topk1%", {.density = 0.01}, naive_rule::topk, 0.01, 0, true);
  sparse_rows<topk>("topk0.1%", {.density = 0.001}, naive_rule::topk, 0.001, 0, true);
  sparse_rows<threshold>("threshold1%", {.density = 0.01}, naive_rule::threshold, 0.01, 0, true);
  sparse_rows<randomk>("randomk1%", {.density = 0.01}, naive_rule::randomk, 0.01);
  sparse_rows<row_topk>("row_topk1%", {.cols = 4096, .density = 0.01}, naive_rule::row_topk, 0.01, 4096);
  transform_rows();
}

}  // namespace

int main(int argc, char** argv) {
  // Tabular console counters unless the caller chose otherwise.
  std::vector<char*> args(argv, argv + argc);
  static char tabular[] = "--benchmark_counters_tabular=true";
  if (std::none_of(argv + 1, argv + argc, [](const char* a) { return std::strstr(a, "counters_tabular") != nullptr; }))
    args.insert(args.begin() + 1, tabular);
  int count = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&count, args.data());
  if (benchmark::ReportUnrecognizedArguments(count, args.data())) return 1;
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
