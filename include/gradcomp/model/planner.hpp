#pragma once
// The overlap planner (AccTFM's partition search and the compress-or-not decision): how many
// chunks to cut a layer's exchanged tensor into, of which sizes, and whether to compress it,
// so that the pipelined step (compute, compress, send, decode of successive chunks
// overlapped) is shortest. A pure function of its inputs; docs/model.md gives the
// model and its limits.
//
// Model. Chunk i of x_i elements passes four stages in order, each a resource of its own
// that serves chunks in order (a flow shop), with affine times a + b x:
//   compute  a = chunk_overhead_s,               b = compute_s / elements
//   encode   a = call_s,                         b = 1 / encode_elements_per_s
//   network  all-reduce (ring, P ranks): a = 2(P-1) alpha + 2(P-1)/P frame_bytes / beta,
//                                        b = 2(P-1)/P wire_bytes_per_element / beta
//            all-gather (P ranks):       a = (P-1) (alpha + frame_bytes / beta),
//                                        b = (P-1) wire_bytes_per_element / beta
//   decode   all-reduce: a = call_s, b = 1 / decode_elements_per_s; all-gather: P times that
//            (every rank accumulates all P payloads)
// (codec_shares_compute folds encode into the compute stage). F[s][i] = max(F[s][i-1],
// F[s-1][i]) + t_s(x_i); the step time is F[last][c]. For each chunk count c the sizes
// minimise a smoothed makespan (log-sum-exp in place of max, annealed) by exponentiated-
// gradient steps from the equal split, then are rounded to whole granules and polished by
// one-granule moves; the equal split is always a candidate, so a plan is never worse than
// the best equal split. Both paths (plain and compressed) are planned; compress is chosen
// only when strictly faster.

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "../core/frame.hpp"
#include "../core/status.hpp"
#include "../state.hpp"

namespace gradcomp::model {

struct network {
  double latency_s = 0;              // alpha, per message
  double bytes_per_s = INFINITY;     // beta
  static network gbit(double gbit_per_s, double latency_s = 5e-6) { return {latency_s, gbit_per_s * 1e9 / 8}; }
};

enum class collective { all_reduce, all_gather };

// A way of sending chunks: the codec's speed and output size, and the collective it needs.
struct wire_path {
  double wire_bytes_per_element = 2;          // payload bytes per dense element (bf16: 2)
  double frame_bytes = 0;                     // fixed bytes per chunk (a frame header)
  double encode_elements_per_s = INFINITY;    // INFINITY: no encode (already bf16)
  double decode_elements_per_s = INFINITY;    // decode + accumulate of one payload
  double call_s = 0;                          // fixed time per codec call
  collective coll = collective::all_reduce;   // summable payloads all-reduce; others all-gather
};

struct layer_problem {
  std::size_t elements = 0;     // elements the layer exchanges (tokens x hidden)
  std::size_t granule = 1;      // chunk sizes are multiples of it (a token row: hidden)
  double compute_s = 0;         // compute producing them, all chunks together
  double chunk_overhead_s = 0;  // fixed compute cost per chunk (launches, smaller GEMMs)
  std::size_t ranks = 2;        // tensor-parallel group size
  friend bool operator==(const layer_problem&, const layer_problem&) = default;
};

struct planner_options {
  network net;
  wire_path plain;                // sending uncompressed (default: bf16, all-reduced)
  wire_path compressed;           // the codec (given, or measure_path())
  std::size_t max_chunks = 32;
  bool codec_shares_compute = false;
  int iterations = 60;            // smoothing steps per chunk count
};

struct plan {
  bool compress = false;
  std::vector<std::size_t> sizes;  // elements per chunk, in order
  double seconds = 0;              // the chosen plan's step time
  double plain_seconds = 0;        // best plan sending uncompressed
  double compressed_seconds = 0;   // best plan compressing
  std::size_t chunks() const { return sizes.size(); }
};

namespace detail {

struct stage {
  double a = 0, b = 0;  // time of a chunk of x elements: a + b x
};
struct stages {
  std::array<stage, 4> s;
  std::size_t count = 0;
};

inline stages stages_of(const layer_problem& p, const planner_options& o, const wire_path& w) {
  const double P = static_cast<double>(p.ranks), alpha = o.net.latency_s, beta = o.net.bytes_per_s;
  const bool gather = w.coll == collective::all_gather;
  const double msgs = gather ? P - 1 : 2 * (P - 1), share = gather ? P - 1 : 2 * (P - 1) / P;
  const double decodes = gather ? P : 1;
  const stage compute{p.chunk_overhead_s, p.elements ? p.compute_s / static_cast<double>(p.elements) : 0.0};
  const stage encode{w.call_s, 1.0 / w.encode_elements_per_s};
  const stage send{msgs * alpha + share * w.frame_bytes / beta, share * w.wire_bytes_per_element / beta};
  const stage decode{decodes * w.call_s, decodes / w.decode_elements_per_s};
  stages st;
  if (o.codec_shares_compute) {
    st.s = {stage{compute.a + encode.a, compute.b + encode.b}, send, decode, stage{}};
    st.count = 3;
  } else {
    st.s = {compute, encode, send, decode};
    st.count = 4;
  }
  return st;
}

template <class X>
double makespan(const stages& st, std::span<const X> x) {
  std::array<double, 4> f{};
  for (const X xi : x) {
    double prev = 0;
    for (std::size_t s = 0; s < st.count; ++s)
      prev = f[s] = std::max(f[s], prev) + st.s[s].a + st.s[s].b * static_cast<double>(xi);
  }
  return f[st.count - 1];
}

// The smoothed makespan's gradient d/dx_i (soft maximum with temperature tau), into g.
inline void smoothed_gradient(const stages& st, std::span<const double> x, double tau, std::vector<double>& w,
                              std::vector<double>& adj, std::span<double> g) {
  const std::size_t c = x.size(), S = st.count;
  w.assign(S * c, 0.0);  // weight of the predecessor in the same stage (chunk i - 1)
  std::array<double, 4> f{};
  for (std::size_t i = 0; i < c; ++i)
    for (std::size_t s = 0; s < S; ++s) {
      double m = 0, wl = i > 0 ? 1.0 : 0.0;
      if (i > 0 && s > 0) {
        const double u = f[s], v = f[s - 1], d = std::abs(u - v) / tau, e = std::exp(-d);
        m = std::max(u, v) + tau * std::log1p(e);
        wl = u >= v ? 1 / (1 + e) : e / (1 + e);
      } else {
        m = i > 0 ? f[s] : s > 0 ? f[s - 1] : 0.0;
      }
      f[s] = m + st.s[s].a + st.s[s].b * x[i];
      w[i * S + s] = wl;
    }
  adj.assign(S * c, 0.0);
  adj[(c - 1) * S + S - 1] = 1;
  for (std::size_t i = c; i-- > 0;)
    for (std::size_t s = S; s-- > 0;) {
      const double a = adj[i * S + s], wl = w[i * S + s];
      g[i] += a * st.s[s].b;
      if (i > 0) adj[(i - 1) * S + s] += a * wl;
      if (s > 0) adj[i * S + s - 1] += a * (1 - wl);
    }
}

// Whole granules per chunk from continuous sizes in elements: the cumulative boundaries
// rounded to the nearest granule, each chunk at least one.
inline std::vector<std::size_t> round_units(std::span<const double> x, std::size_t granule, std::size_t units) {
  const std::size_t c = x.size();
  std::vector<std::size_t> u(c);
  double cumulative = 0;
  std::size_t previous = 0;
  for (std::size_t i = 0; i < c; ++i) {
    cumulative += x[i];
    auto b = i + 1 == c ? units : static_cast<std::size_t>(std::llround(cumulative / static_cast<double>(granule)));
    b = std::clamp(b, previous + 1, units - (c - 1 - i));
    u[i] = b - previous;
    previous = b;
  }
  return u;
}

}  // namespace detail

// Elements per chunk from granules per chunk: the last chunk takes what a partial last
// granule leaves.
inline std::vector<std::size_t> sizes_from_units(const layer_problem& p, std::span<const std::size_t> units) {
  std::vector<std::size_t> sizes(units.size());
  std::size_t left = p.elements;
  for (std::size_t i = 0; i < units.size(); ++i) left -= sizes[i] = std::min(left, units[i] * p.granule);
  return sizes;
}

// The step time of given chunk sizes (elements) on one path.
inline double pipeline_seconds(const layer_problem& p, const planner_options& o, const wire_path& w,
                               std::span<const std::size_t> sizes) {
  return detail::makespan(detail::stages_of(p, o, w), sizes);
}

// The best chunking of p on path w: {seconds, sizes}.
inline std::pair<double, std::vector<std::size_t>> best_chunking(const layer_problem& p, const planner_options& o,
                                                                 const wire_path& w) {
  const detail::stages st = detail::stages_of(p, o, w);
  const std::size_t granule = std::max<std::size_t>(p.granule, 1);
  const std::size_t units = p.elements == 0 ? 1 : (p.elements + granule - 1) / granule;
  const layer_problem q = [&] { layer_problem r = p; r.granule = granule; return r; }();
  const auto time_of = [&](const std::vector<std::size_t>& u) {  // (no allocation: polish calls it often)
    std::array<double, 4> f{};
    std::size_t left = q.elements;
    for (const std::size_t ui : u) {
      const std::size_t x = std::min(left, ui * granule);
      left -= x;
      double prev = 0;
      for (std::size_t s = 0; s < st.count; ++s)
        prev = f[s] = std::max(f[s], prev) + st.s[s].a + st.s[s].b * static_cast<double>(x);
    }
    return f[st.count - 1];
  };
  std::pair<double, std::vector<std::size_t>> best{INFINITY, {}};
  const auto consider = [&](const std::vector<std::size_t>& u) {
    const double t = time_of(u);
    if (t < best.first * (1 - 1e-12)) best = {t, sizes_from_units(q, u)};
  };
  // One-granule moves between any two chunks while they help, where a granule is a sizeable
  // part of a chunk (else rounding costs next to nothing).
  const auto polish = [&](std::vector<std::size_t>& u) {
    const std::size_t c = u.size();
    double t = time_of(u);
    for (int sweep = 0; sweep < 64 && units <= 64 * c; ++sweep) {
      bool moved = false;
      for (std::size_t j = 0; j < c; ++j)
        for (std::size_t k = 0; k < c; ++k) {
          if (j == k || u[j] <= 1) continue;
          --u[j], ++u[k];
          if (const double tt = time_of(u); tt < t * (1 - 1e-12)) {
            t = tt, moved = true;
          } else {
            ++u[j], --u[k];
          }
        }
      if (!moved) break;
    }
  };
  const double total = static_cast<double>(p.elements);
  const std::size_t most = std::min(o.max_chunks, units);
  const auto equal_split = [&](std::size_t c) {
    std::vector<std::size_t> u(c, units / c);
    for (std::size_t i = 0; i < units % c; ++i) ++u[i];
    return u;
  };
  std::vector<double> equal_time(most + 1);
  for (std::size_t c = 1; c <= most; ++c) {
    equal_time[c] = time_of(equal_split(c));
    consider(equal_split(c));
  }
  const double best_equal = best.first;
  std::vector<double> x, g, weights, adj;
  for (std::size_t c = 2; c <= most; ++c) {
    // Uneven sizes gained at most 10% over the best equal split in small problems solved by
    // brute force: chunk counts whose equal split takes 1.25x the best are not refined.
    if (!(total > 0) || equal_time[c] > 1.25 * best_equal) continue;
    std::vector<std::size_t> equal = equal_split(c);
    polish(equal);
    consider(equal);
    // Exponentiated-gradient descent on the smoothed makespan, from the equal split, in
    // elements (a last, partial granule weighs what it holds).
    x.assign(c, total / static_cast<double>(c));
    const double m0 = detail::makespan(st, std::span<const double>(x));
    if (!(m0 > 0) || !std::isfinite(m0)) continue;
    std::vector<double> best_x = x;
    double best_m = m0;
    for (int it = 0; it < o.iterations; ++it) {
      const double left = 1 - static_cast<double>(it) / o.iterations;
      g.assign(c, 0.0);
      detail::smoothed_gradient(st, x, m0 * (0.02 * left + 1e-4), weights, adj, g);
      double gmax = 0, sum = 0;
      for (double v : g) gmax = std::max(gmax, std::abs(v));
      if (!(gmax > 0)) break;
      for (std::size_t i = 0; i < c; ++i) sum += x[i] *= std::exp(-(0.5 * left + 0.01) * g[i] / gmax);
      for (double& v : x) v *= total / sum;
      if (const double m = detail::makespan(st, std::span<const double>(x)); m < best_m) best_m = m, best_x = x;
    }
    std::vector<std::size_t> u = detail::round_units(best_x, granule, units);
    polish(u);
    consider(u);
  }
  return best;
}

inline plan plan_layer(const layer_problem& p, const planner_options& o) {
  auto plain = best_chunking(p, o, o.plain);
  auto packed = best_chunking(p, o, o.compressed);
  plan r;
  r.plain_seconds = plain.first;
  r.compressed_seconds = packed.first;
  r.compress = packed.first < plain.first;
  r.seconds = r.compress ? packed.first : plain.first;
  r.sizes = std::move(r.compress ? packed.second : plain.second);
  return r;
}

// One plan per layer; identical problems (a transformer's repeated layers) are planned once.
inline std::vector<plan> plan_model(std::span<const layer_problem> layers, const planner_options& o) {
  std::vector<plan> plans;
  plans.reserve(layers.size());
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto same = std::find(layers.begin(), layers.begin() + static_cast<std::ptrdiff_t>(i), layers[i]);
    plans.push_back(same != layers.begin() + static_cast<std::ptrdiff_t>(i)
                        ? plans[static_cast<std::size_t>(same - layers.begin())]
                        : plan_layer(layers[i], o));
  }
  return plans;
}

// A codec's wire_path measured on this host: the fastest of `repeats` compress and accumulate
// calls of comp on `sample` (CPU backend; a GPU trainer measures its own backend). A sample
// of one chunk gives its frame size.
template <class C>
result<wire_path> measure_path(const C& comp, std::span<const float> sample, collective coll = collective::all_gather,
                       int repeats = 3) {
  using clock = std::chrono::steady_clock;
  const std::size_t n = sample.size();
  state st = comp.make_state(n);
  std::vector<std::byte> payload(comp.template max_payload_bytes<float>(n));
  std::vector<float> out(n, 0.0f);
  double encode = INFINITY, decode = INFINITY;
  std::size_t bytes = 0;
  for (int r = 0; r < std::max(repeats, 1); ++r) {
    const auto t0 = clock::now();
    const auto w = comp.template compress<float>(sample, st, payload);
    const auto t1 = clock::now();
    if (!w) return w.error();
    bytes = *w;
    const auto s = comp.template accumulate<float>(std::span<const std::byte>(payload.data(), bytes), out);
    const auto t2 = clock::now();
    if (!s) return s;
    encode = std::min(encode, std::chrono::duration<double>(t1 - t0).count());
    decode = std::min(decode, std::chrono::duration<double>(t2 - t1).count());
  }
  const double frames = static_cast<double>(comp.template chunk_count<float>(n));
  wire_path w;
  w.frame_bytes = static_cast<double>(frame::header_bytes);
  const double values = std::max(0.0, static_cast<double>(bytes) - frames * w.frame_bytes);
  w.wire_bytes_per_element = n ? values / static_cast<double>(n) : 0;
  w.encode_elements_per_s = static_cast<double>(n) / std::max(encode, 1e-9);
  w.decode_elements_per_s = static_cast<double>(n) / std::max(decode, 1e-9);
  w.coll = coll;
  return w;
}

}  // namespace gradcomp::model
