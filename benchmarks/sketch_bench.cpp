// TAGC count-sketch pieces on the CPU (Google Benchmark): bitmap build, sum-safe pack and
// unpack, sketch encode, structural peel and peel decode, at n = 1e7 and 1e8 floats.
//
// Setting: W = 4 ranks each keep about 1.25% of the positions (independent random sets, so
// the union holds about 4.9%); B = 64; r from ratio 10 (TAGC-2), i.e. about 2 cells per kept
// item; bf16 cells. Counters, as in cpu_bench.cpp:
//   bytes_per_second  bytes the operation must read plus write, per second (each row says what
//                     it counts), from the MEDIAN time per call.
//   memcpy_bps        2 x 4n bytes per memcpy of the 4n-byte fp32 input, timed in the same loop
//                     (each iteration: an untimed copy, a timed copy, then the operation).
//   vs_memcpy         bytes_per_second / memcpy_bps.
//   time_vs_memcpy    time per call / time of one memcpy of the 4n input bytes.
//   median_ms         median time per call.
//
// tagc_rank/...: one rank's share of a TAGC step (W = 4, n = 1e7, default config): phase 0
// (x = g + e, the threshold selection of every shard, the bitmap), phase 1 (every shard's sketch
// and the decode of its own cells for error feedback), receive(1) (the peel decode of its shard).
// tagc_wire/...: bytes on the wire and error of one reduce-scatter step of GPT-2 small
// (tagc_wire.hpp), for fp32 and bf16 reduce-scatter, the TAGC v1 and TAGC-2 presets and ours.
//
// `gradcomp_sketch_bench --peel_curve` prints instead the peeling success curve (fraction of
// kept items peeled against sketch cells per kept item) that benchmarks/results/peel-curve.md holds.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gradcomp/core/murmur3.hpp>
#include <gradcomp/sketch/count_sketch.hpp>
#include <gradcomp/tagc.hpp>

#include "tagc_wire.hpp"

namespace {

namespace gs = gradcomp::sketch;
using clock_type = std::chrono::steady_clock;
constexpr std::uint32_t world = 4, block = 64;
constexpr double keep_per_rank = 0.0125;
constexpr float ratio = 10.0f;

// Rank r keeps j when a hash of (j, r) falls below keep_per_rank: independent sets per rank.
bool rank_keeps(std::size_t j, std::uint32_t r) {
  return gradcomp::murmur3_u32(static_cast<std::uint32_t>(j), 100 + r) < static_cast<std::uint32_t>(keep_per_rank * 4294967296.0);
}

// The data of one size, built once: values in (-1, 1) (|x| >= 0.9875 keeps 1.25%), the
// ranks' bitmaps, their union, the union's geometry and the sum of the ranks' bf16 sketches.
struct setup {
  std::size_t n;
  std::vector<float> x;
  std::vector<std::vector<std::uint32_t>> rank_bm;
  std::vector<std::uint32_t> uni;
  gs::geometry g;
  std::vector<gradcomp::bf16_t> cells;

  explicit setup(std::size_t count) : n(count), x(count), rank_bm(world), uni(gs::bitmap_words(count), 0u) {
    for (std::size_t j = 0; j < n; ++j)
      x[j] = static_cast<float>(gradcomp::murmur3_u32(static_cast<std::uint32_t>(j), 7)) * 0x1.0p-31f - 1.0f;
    for (std::uint32_t r = 0; r < world; ++r) {
      rank_bm[r].assign(uni.size(), 0u);
      (void)gs::build_bitmap(n, [r](std::size_t j) { return rank_keeps(j, r); }, std::span<std::uint32_t>(rank_bm[r]));
      (void)gs::bitmap_or(uni, rank_bm[r]);
    }
    g = *gs::make_geometry(n, block, ratio);
    std::vector<std::byte> ws(gs::encode_workspace_bytes<gradcomp::bf16_t>(g));
    cells.resize(g.cells());
    (void)gs::encode<gradcomp::bf16_t>(g, x, uni, {}, ws, cells);
  }
};

setup& data(std::size_t n) {
  static std::unique_ptr<setup> current;  // one size in memory at a time
  if (!current || current->n != n) {
    current.reset();
    current = std::make_unique<setup>(n);
  }
  return *current;
}

double seconds_since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

template <class Op>
void measure(benchmark::State& st, const setup& d, double bytes_rw, Op&& op) {
  std::vector<float> dst(d.n);
  std::vector<double> ours, copy;
  double total = 0;
  for (auto _ : st) {
    std::memcpy(dst.data(), d.x.data(), 4 * d.n);
    benchmark::ClobberMemory();
    auto t0 = clock_type::now();
    std::memcpy(dst.data(), d.x.data(), 4 * d.n);
    benchmark::ClobberMemory();
    copy.push_back(seconds_since(t0));
    t0 = clock_type::now();
    op();
    benchmark::ClobberMemory();
    ours.push_back(seconds_since(t0));
    st.SetIterationTime(ours.back());
    total += ours.back();
  }
  const double t = median(ours), tc = median(copy);
  const double bw = bytes_rw / t, copy_bw = 8.0 * static_cast<double>(d.n) / tc;
  st.counters["bytes_per_second"] = benchmark::Counter(bw * total, benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
  st.counters["memcpy_bps"] = benchmark::Counter(copy_bw * total, benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
  st.counters["vs_memcpy"] = bw / copy_bw;
  st.counters["time_vs_memcpy"] = t / tc;
  st.counters["median_ms"] = 1e3 * t;
}

// Bitmap of |x| >= 0.9875 (one rank's kept set). Bytes: read 4n, write n / 8.
void bm_bitmap_build(benchmark::State& st, std::size_t n) {
  setup& d = data(n);
  std::vector<std::uint32_t> bm(d.uni.size());
  measure(st, d, 4.0 * n + n / 8.0, [&] {
    (void)gs::build_bitmap(n, [&](std::size_t j) { return std::fabs(d.x[j]) >= 0.9875f; }, std::span<std::uint32_t>(bm));
    benchmark::DoNotOptimize(bm.data());
  });
}

// One rank's bitmap to the sum-safe form (W = 4: 3 bits per position) and the summed buffer
// back to the union. Bytes: n / 8 + 3n / 8 (the 10 fields per word round up the latter).
void bm_sum_safe(benchmark::State& st, std::size_t n, bool pack) {
  setup& d = data(n);
  const auto l = gs::sum_safe_layout::make(world);
  std::vector<std::uint32_t> sums(l.words(n), 0u), packed(l.words(n)), out(d.uni.size());
  for (std::uint32_t r = 0; r < world; ++r) {
    (void)gs::to_sum_safe(d.rank_bm[r], n, world, packed);
    for (std::size_t w = 0; w < sums.size(); ++w) sums[w] += packed[w];
  }
  measure(st, d, 4.0 * (d.uni.size() + sums.size()), [&] {
    if (pack) {
      (void)gs::to_sum_safe(d.rank_bm[0], n, world, packed);
      benchmark::DoNotOptimize(packed.data());
    } else {
      (void)gs::union_from_sum_safe(sums, n, world, out);
      benchmark::DoNotOptimize(out.data());
    }
  });
}

// Encode of the union's positions into bf16 cells. Bytes: the dense input 4n (the kept values
// are spread over most cache lines), the bitmap n / 8, the cells 2 r B.
void bm_encode(benchmark::State& st, std::size_t n) {
  setup& d = data(n);
  std::vector<std::byte> ws(gs::encode_workspace_bytes<gradcomp::bf16_t>(d.g));
  std::vector<gradcomp::bf16_t> cells(d.g.cells());
  measure(st, d, 4.0 * n + n / 8.0 + 2.0 * d.g.cells(), [&] {
    (void)gs::encode<gradcomp::bf16_t>(d.g, d.x, d.uni, {}, ws, cells);
    benchmark::DoNotOptimize(cells.data());
  });
  st.counters["cells_per_item"] = static_cast<double>(d.g.cells()) / static_cast<double>(gs::bitmap_popcount(d.uni));
}

// Structural peel (the peelable set) or the full decode of the summed bf16 cells into the
// dense fp32 output. Bytes: bitmap n / 8 (+ cells 2 r B and the output 4n for the decode).
void bm_peel(benchmark::State& st, std::size_t n, bool values) {
  setup& d = data(n);
  const std::size_t items = gs::bitmap_popcount(d.uni);
  std::vector<std::byte> ws(gs::peel_workspace_bytes(d.g, items));
  std::vector<float> out(n);
  std::vector<std::uint32_t> peelable(d.uni.size());
  gs::peel_stats stats;
  const double bytes = n / 8.0 + (values ? 2.0 * d.g.cells() + 4.0 * n : 4.0 * d.uni.size());
  measure(st, d, bytes, [&] {
    const auto r = values ? gs::decode<gradcomp::bf16_t>(d.g, d.uni, d.cells, ws, out)
                          : gs::structural_peel(d.g, d.uni, ws, peelable);
    if (r) stats = *r;
    benchmark::DoNotOptimize(out.data());
  });
  st.counters["peeled"] = static_cast<double>(stats.peeled) / static_cast<double>(stats.items);
  st.counters["rounds"] = stats.rounds;
  st.counters["workspace_MiB"] = static_cast<double>(ws.size()) / 1048576.0;
}

void bm_memcpy(benchmark::State& st, std::size_t n) {
  setup& d = data(n);
  std::vector<float> dst(n);
  measure(st, d, 8.0 * n, [&] {
    std::memcpy(dst.data(), d.x.data(), 4 * n);
    benchmark::DoNotOptimize(dst.data());
  });
}

// One rank's phases of a TAGC step (the other ranks' buffers simulated once). Bytes: phase 0
// reads g and e and writes e (12n) plus the bitmap; phase 1 reads x and the union, writes the
// cells and e at the union (about 4n + cells); receive reads the shard's cells, writes 4n / W.
void bm_tagc_rank(benchmark::State& st, std::size_t n, int which) {
  setup& d = data(n);
  namespace gt = gradcomp::tagc;
  const gt::codec c;
  std::vector<gt::state> ranks(world);
  std::vector<std::vector<float>> g(world, std::vector<float>(n));
  for (std::uint32_t r = 0; r < world; ++r) {
    (void)c.make_state(n, world, r, ranks[r]);
    for (std::size_t j = 0; j < n; ++j) g[r][j] = static_cast<float>(gradcomp::murmur3_u32(static_cast<std::uint32_t>(j), 50 + r)) * 0x1.0p-31f - 1.0f;
  }
  std::vector<std::byte> bits, cells;
  for (std::size_t k = 0; k < 2; ++k) {  // every rank's phases, summed
    const auto p = *c.describe(k, ranks[0]);
    std::vector<std::byte> total(p.bytes()), mine(p.bytes());
    for (std::uint32_t r = 0; r < world; ++r) {
      (void)c.encode(k, g[r], ranks[r], r == 0 ? total : mine);
      if (r > 0) tagc_wire::reduce_into(p, total, mine);
    }
    for (std::uint32_t r = 0; r < world && k == 0; ++r) (void)c.receive(0, ranks[r], total, {});
    (k == 0 ? bits : cells) = total;
  }
  gt::state& s = ranks[0];
  const auto p1 = *c.describe(1, s);
  const std::span<const std::byte> shard = std::span<const std::byte>(cells).first(p1.shard_bytes());
  std::vector<std::byte> out_cells(p1.bytes()), out_bits(bits.size());
  std::vector<float> out(gradcomp::summable::shard_of(n, world, 0).count);
  const double bytes = which == 0 ? 12.0 * n + bits.size() : which == 1 ? 4.0 * n + n / 8.0 + p1.bytes() : shard.size() + 4.0 * out.size();
  measure(st, d, bytes, [&] {
    if (which == 0) {
      s.at = gt::stage::encode_bitmap;
      (void)c.encode(0, g[0], s, out_bits);
    } else if (which == 1) {
      s.at = gt::stage::encode_sketch;
      (void)c.encode(1, {}, s, out_cells);
    } else {
      s.at = gt::stage::receive_sketch;
      (void)c.receive(1, s, shard, out);
    }
    benchmark::DoNotOptimize(out.data());
  });
  const gradcomp::sketch::peel_stats& ps = which == 1 ? s.own : s.stats;  // phase 1: its own cells
  st.counters["peeled"] = static_cast<double>(ps.peeled) / std::max<double>(1.0, ps.items);
}

// One row of the wire table: counters only (Iterations(1); the step itself is not timed).
void bm_wire(benchmark::State& st, std::uint32_t ranks, int variant, bool independent) {
  const tagc_wire::world& w = tagc_wire::world_of(ranks, independent);
  tagc_wire::figures f;
  for (auto _ : st) {
    namespace gt = gradcomp::tagc;
    gt::config cfg;  // ours: adaptive sizing, OR bitmap, bf16 cells, B = 1
    if (variant == 2) cfg = gt::preset_v1();
    if (variant == 3) cfg = gt::preset_tagc2();
    if (variant == 5) cfg.bitmap = gt::bitmap_mode::sum_safe;
    if (variant == 6) cfg.block = 64;  // the published block, r from the fullest lane
    f = variant < 2 ? tagc_wire::cast_step(w, variant == 1) : variant == 7 ? tagc_wire::routed_step(w, cfg) : tagc_wire::tagc_step(w, cfg);
    st.SetIterationTime(1.0);
  }
  const double bf16 = tagc_wire::cast_step(w, true).bytes_per_rank;
  st.counters["MB_per_rank"] = f.bytes_per_rank / 1e6;
  st.counters["x_fewer_than_bf16"] = bf16 / f.bytes_per_rank;
  st.counters["rel_error"] = f.rel_error;
  st.counters["peeled"] = f.peeled;
  st.counters["cells_per_item"] = f.cells_per_item;
  st.counters["union"] = f.union_density;
}

template <class Fn>
void add(const std::string& name, std::size_t n, Fn&& fn) {
  benchmark::RegisterBenchmark(name.c_str(), [n, fn](benchmark::State& s) { fn(s, n); })
      ->UseManualTime()
      ->Unit(benchmark::kMillisecond)
      ->Iterations(n > 10000000 ? 5 : 20);
}

void register_all() {
  for (std::size_t n : {std::size_t{10000000}, std::size_t{100000000}}) {
    const std::string sz = n == 10000000 ? "/n:1e7" : "/n:1e8";
    add("memcpy" + sz, n, bm_memcpy);
    add("bitmap_build" + sz, n, bm_bitmap_build);
    add("sum_safe_pack/W:4" + sz, n, [](benchmark::State& s, std::size_t m) { bm_sum_safe(s, m, true); });
    add("sum_safe_union/W:4" + sz, n, [](benchmark::State& s, std::size_t m) { bm_sum_safe(s, m, false); });
    add("sketch_encode/bf16" + sz, n, bm_encode);
    add("structural_peel" + sz, n, [](benchmark::State& s, std::size_t m) { bm_peel(s, m, false); });
    add("peel_decode/bf16" + sz, n, [](benchmark::State& s, std::size_t m) { bm_peel(s, m, true); });
    if (n > 10000000) continue;
    add("tagc_rank/encode_bitmap/W:4" + sz, n, [](benchmark::State& s, std::size_t m) { bm_tagc_rank(s, m, 0); });
    add("tagc_rank/encode_sketch/W:4" + sz, n, [](benchmark::State& s, std::size_t m) { bm_tagc_rank(s, m, 1); });
    add("tagc_rank/receive_sketch/W:4" + sz, n, [](benchmark::State& s, std::size_t m) { bm_tagc_rank(s, m, 2); });
  }
  const char* variants[] = {"fp32_reduce_scatter", "bf16_reduce_scatter", "tagc_v1_preset", "tagc2_preset",
                            "ours_or",             "ours_sum_safe",       "ours_or_block64",     "ours_routed"};
  const auto wire = [&](std::uint32_t ranks, int v, bool independent) {
    const std::string world_name = independent ? "/gpt2_small_independent_ranks" : "/gpt2_small";
    benchmark::RegisterBenchmark(("tagc_wire/" + std::string(variants[v]) + "/W:" + std::to_string(ranks) + world_name).c_str(),
                                 [ranks, v, independent](benchmark::State& s) { bm_wire(s, ranks, v, independent); })
        ->UseManualTime()
        ->Iterations(1)
        ->Unit(benchmark::kSecond);
  };
  for (std::uint32_t ranks : {4u, 8u})
    for (int v = 0; v < 8; ++v) wire(ranks, v, false);
  for (int v : {3, 4}) wire(8, v, true);  // the union of 8 barely overlapping ranks
}

// The curve: for each size n and block B, the union of 4 ranks at 1.25% each (a fresh random
// set per seed) and r = round(cells_per_item * items / B). Each entry: the fraction of kept
// items peeled, averaged over the seeds, and how many seeds peeled every item.
int peel_curve() {
  constexpr int seeds = 3;
  const std::size_t sizes[] = {1000000, 10000000};
  const std::uint32_t blocks[] = {1, 16, 64, 256};
  const double cpis[] = {0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.22, 1.25, 1.27, 1.3,
                         1.35, 1.4, 1.5, 1.6, 1.7, 1.8, 2.0, 2.5, 3.0};
  constexpr std::size_t ncpi = sizeof cpis / sizeof cpis[0];
  struct entry {
    double rate = 0;
    int all = 0;
  };
  std::vector<std::vector<entry>> table;  // [column][cpi]
  for (std::size_t n : sizes) {
    std::vector<std::vector<entry>> cols(std::size(blocks), std::vector<entry>(ncpi));
    for (int seed = 0; seed < seeds; ++seed) {
      std::vector<std::uint32_t> uni(gs::bitmap_words(n), 0u);
      for (std::uint32_t r = 0; r < world; ++r) {
        const auto salt = static_cast<std::uint32_t>(1000 * seed + r);
        for (std::size_t w = 0; w < uni.size(); ++w)
          uni[w] |= gs::bitmap_word([salt](std::size_t j) { return rank_keeps(j, salt); }, w, n);
      }
      const std::size_t items = gs::bitmap_popcount(uni);
      for (std::size_t b = 0; b < std::size(blocks); ++b) {
        for (std::size_t k = 0; k < ncpi; ++k) {
          const auto rows = static_cast<std::uint32_t>(std::lround(cpis[k] * static_cast<double>(items) / blocks[b]));
          const gs::geometry g = *gs::make_geometry_rows(n, blocks[b], std::max(rows, 1u));
          std::vector<std::byte> ws(gs::peel_workspace_bytes(g, items));
          std::vector<std::uint32_t> peelable(uni.size());
          const auto st = gs::structural_peel(g, uni, ws, peelable);
          if (!st) return 1;
          cols[b][k].rate += static_cast<double>(st->peeled) / static_cast<double>(st->items) / seeds;
          cols[b][k].all += st->peeled == st->items ? 1 : 0;
        }
      }
    }
    for (auto& c : cols) table.push_back(std::move(c));
  }
  std::printf("| cells/item |");
  for (std::size_t n : sizes)
    for (std::uint32_t b : blocks) std::printf(" n=%s B=%u |", n == 1000000 ? "1e6" : "1e7", b);
  std::printf("\n|---|");
  for (std::size_t c = 0; c < table.size(); ++c) std::printf("---|");
  std::printf("\n");
  for (std::size_t k = 0; k < ncpi; ++k) {
    std::printf("| %.2f |", cpis[k]);
    for (const auto& col : table) std::printf(" %.4f (%d/%d) |", col[k].rate, col[k].all, seeds);
    std::printf("\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--peel_curve") == 0) return peel_curve();
  std::vector<char*> args(argv, argv + argc);
  static char tabular[] = "--benchmark_counters_tabular=true";
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
