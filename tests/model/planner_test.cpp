// The overlap planner: the pipeline model in closed form, the search against brute force on
// small problems, and the limits (infinite bandwidth, tiny bandwidth, high latency, many ranks).
#include <doctest/doctest.h>

#include <gradcomp/model/planner.hpp>
#include <gradcomp/model/router.hpp>
#include <gradcomp/model/tagc.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace gm = gradcomp::model;

namespace {

gm::wire_path codec(double bytes_per_element, double elements_per_s) {
  gm::wire_path w;
  w.wire_bytes_per_element = bytes_per_element;
  w.frame_bytes = 88;
  w.encode_elements_per_s = elements_per_s;
  w.decode_elements_per_s = 2 * elements_per_s;
  w.call_s = 5e-6;
  w.coll = gm::collective::all_gather;
  return w;
}

// A tensor-parallel layer: 8192 tokens x 4096 hidden, 2 ms of compute.
gm::layer_problem layer(std::size_t ranks = 2) { return {8192 * 4096, 4096, 2e-3, 10e-6, ranks}; }

gm::planner_options options(double gbit, double latency = 5e-6) {
  gm::planner_options o;
  o.net = gm::network::gbit(gbit, latency);
  o.compressed = codec(0.4, 2e9);
  return o;
}

// Every split of `units` granules into at most max_chunks parts: the best step time.
double brute_force(const gm::layer_problem& p, const gm::planner_options& o, const gm::wire_path& w) {
  const std::size_t units = (p.elements + p.granule - 1) / p.granule;
  double best = INFINITY;
  std::vector<std::size_t> parts;
  const std::function<void(std::size_t)> split = [&](std::size_t left) {
    if (left == 0) {
      const auto sizes = gm::sizes_from_units(p, parts);
      best = std::min(best, gm::pipeline_seconds(p, o, w, sizes));
      return;
    }
    if (parts.size() == o.max_chunks) return;
    for (std::size_t u = 1; u <= left; ++u) {
      parts.push_back(u);
      split(left - u);
      parts.pop_back();
    }
  };
  split(units);
  return best;
}

}  // namespace

TEST_CASE("planner: the pipeline model in closed form") {
  const gm::layer_problem p{1000, 1, 1e-3, 0, 2};
  gm::planner_options o;
  o.net = {1e-4, 1e6};  // 100 us, 1 MB/s
  o.compressed = codec(1.0, 1e6);
  o.compressed.call_s = 0;
  // One chunk: the stages one after another. compute 1 ms, encode 1 ms, send (all-gather, 2
  // ranks) 100 us + 88 B + 1000 B at 1 MB/s, decode 2 x 1000 / 2e6 s.
  const double one = 1e-3 + 1e-3 + (1e-4 + 1088e-6) + 1e-3;
  CHECK(gm::pipeline_seconds(p, o, o.compressed, std::vector<std::size_t>{1000}) == doctest::Approx(one).epsilon(1e-12));
  // Equal chunks: one chunk's pass plus (c - 1) times the slowest stage.
  const double c5 = 0.2e-3 + 0.2e-3 + (1e-4 + 288e-6) + 0.2e-3 + 4 * (1e-4 + 288e-6);
  CHECK(gm::pipeline_seconds(p, o, o.compressed, std::vector<std::size_t>(5, 200)) == doctest::Approx(c5).epsilon(1e-12));
  // Encode folded into compute when they share an engine.
  o.codec_shares_compute = true;
  CHECK(gm::pipeline_seconds(p, o, o.compressed, std::vector<std::size_t>{1000}) == doctest::Approx(one).epsilon(1e-12));
  const double shared5 = 0.4e-3 + (1e-4 + 288e-6) + 0.2e-3 + 4 * 0.4e-3;  // now compute + encode is the slowest
  CHECK(gm::pipeline_seconds(p, o, o.compressed, std::vector<std::size_t>(5, 200)) ==
        doctest::Approx(shared5).epsilon(1e-12));
  // The plain path all-reduces: 2(P-1)/P of the bytes and 2(P-1) latencies.
  const double plain = 1e-3 + (2e-4 + 2000e-6) + 0;
  o.codec_shares_compute = false;
  CHECK(gm::pipeline_seconds(p, o, o.plain, std::vector<std::size_t>{1000}) == doctest::Approx(plain).epsilon(1e-12));
}

TEST_CASE("planner: against brute force on small problems (fixed seed)") {
  std::mt19937 gen(2024);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int exact = 0, cases = 0;
  for (int trial = 0; trial < 150; ++trial) {
    gm::layer_problem p;
    p.granule = 1 + static_cast<std::size_t>(u(gen) * 4);
    p.elements = p.granule * (2 + static_cast<std::size_t>(u(gen) * 11)) - (u(gen) < 0.3 ? p.granule / 2 : 0);
    p.compute_s = 1e-3 * u(gen);
    p.chunk_overhead_s = u(gen) < 0.5 ? 0 : 1e-4 * u(gen);
    p.ranks = 2 + static_cast<std::size_t>(u(gen) * 6);
    gm::planner_options o;
    o.max_chunks = 6;
    o.codec_shares_compute = u(gen) < 0.3;
    o.net = {u(gen) < 0.5 ? 0.0 : 1e-4 * u(gen), 1e6 * (0.5 + u(gen))};
    o.compressed = codec(0.2 + u(gen), 1e4 * (0.5 + 2 * u(gen)));
    o.compressed.call_s = u(gen) < 0.5 ? 0 : 5e-5 * u(gen);
    o.plain.encode_elements_per_s = u(gen) < 0.5 ? INFINITY : 5e4;
    for (const gm::wire_path* w : {&o.plain, &o.compressed}) {
      const double best = brute_force(p, o, *w);
      const auto found = gm::best_chunking(p, o, *w);
      CAPTURE(trial);
      CHECK(found.first >= best * (1 - 1e-12));
      CHECK(found.first <= best * 1.02);
      CHECK(found.first == doctest::Approx(gm::pipeline_seconds(p, o, *w, found.second)).epsilon(1e-12));
      std::size_t total = 0;
      for (std::size_t s : found.second) total += s;
      CHECK(total == p.elements);
      CHECK(found.second.size() <= o.max_chunks);
      exact += found.first <= best * (1 + 1e-9);
      ++cases;
    }
  }
  MESSAGE("planner optimal (to 1e-9) in " << exact << " of " << cases << " problems, within 2% in all");
  CHECK(exact >= cases * 95 / 100);
}

TEST_CASE("planner: never worse than the best equal split, sizes are whole granules") {
  const gm::layer_problem p = layer();
  for (double gbit : {1.0, 10.0, 100.0}) {
    const gm::planner_options o = options(gbit);
    const auto found = gm::best_chunking(p, o, o.compressed);
    double best_equal = INFINITY;
    for (std::size_t c = 1; c <= o.max_chunks; ++c) {
      std::vector<std::size_t> units(c, 8192 / c);
      for (std::size_t i = 0; i < 8192 % c; ++i) ++units[i];
      best_equal = std::min(best_equal, gm::pipeline_seconds(p, o, o.compressed, gm::sizes_from_units(p, units)));
    }
    CHECK(found.first <= best_equal);
    for (std::size_t s : found.second) CHECK(s % p.granule == 0);
  }
}

TEST_CASE("planner: the limits") {
  const gm::layer_problem p = layer();
  SUBCASE("infinite bandwidth, no latency: bf16 uncompressed, one chunk") {
    gm::planner_options o = options(INFINITY, 0);
    const gm::plan pl = gm::plan_layer(p, o);
    CHECK_FALSE(pl.compress);
    CHECK(pl.chunks() == 1);
    CHECK(pl.seconds == doctest::Approx(p.compute_s + p.chunk_overhead_s));
    CHECK(pl.compressed_seconds > pl.plain_seconds);
  }
  SUBCASE("tiny bandwidth: compress") {
    const gm::plan pl = gm::plan_layer(p, options(0.01));
    CHECK(pl.compress);
    CHECK(pl.compressed_seconds < pl.plain_seconds);
    // The wire dominates: nearly the ratio of the bytes sent.
    CHECK(pl.plain_seconds / pl.compressed_seconds == doctest::Approx(2.0 / 0.4).epsilon(0.02));
  }
  SUBCASE("higher latency: fewer chunks") {
    std::size_t previous = ~std::size_t{0};
    std::vector<std::size_t> counts;
    for (double latency : {0.0, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1.0}) {
      const gm::plan pl = gm::plan_layer(p, options(10, latency));
      CHECK(pl.chunks() <= previous);
      previous = pl.chunks();
      counts.push_back(pl.chunks());
    }
    CHECK(counts.front() > 4);
    CHECK(counts.back() == 1);
  }
  SUBCASE("many ranks: the gather path's bytes grow with the ranks, an all-reduce's do not") {
    // 0.4 B per element gathered from P - 1 ranks against 2 (P - 1) / P x 2 B all-reduced:
    // compression pays at 2 ranks, not at 16 (its decode grows with P too).
    CHECK(gm::plan_layer(layer(2), options(10)).compress);
    CHECK_FALSE(gm::plan_layer(layer(16), options(10)).compress);
  }
  SUBCASE("a free codec of fewer bytes always pays where bytes cost time") {
    gm::planner_options o = options(100);
    o.compressed = codec(0.4, INFINITY);
    o.compressed.call_s = 0;
    o.compressed.frame_bytes = 0;
    o.compressed.coll = gm::collective::all_reduce;
    CHECK(gm::plan_layer(p, o).compress);
  }
}

TEST_CASE("planner: plan_model plans each distinct layer once, measure_path times a real codec") {
  std::vector<gm::layer_problem> layers(48, layer());
  layers[0].compute_s = 1e-3;  // the first layer differs
  const auto plans = gm::plan_model(layers, options(10));
  REQUIRE(plans.size() == 48);
  for (std::size_t i = 2; i < 48; ++i) CHECK(plans[i].sizes == plans[1].sizes);
  CHECK(plans[0].seconds < plans[1].seconds);

  std::vector<float> sample(1 << 16);
  for (std::size_t i = 0; i < sample.size(); ++i) sample[i] = std::sin(static_cast<float>(i) * 0.37f);
  const auto w = gm::measure_path(gm::bf16_cast(), sample, gm::collective::all_reduce);
  REQUIRE(w.ok());
  CHECK(w->wire_bytes_per_element == 2.0);  // one frame: its header apart, two bytes a value
  CHECK(w->frame_bytes == 88.0);
  CHECK(w->coll == gm::collective::all_reduce);
  CHECK(std::isfinite(w->encode_elements_per_s));
  CHECK(w->encode_elements_per_s > 0);
  CHECK(w->decode_elements_per_s > 0);
  gm::sketch_stand_in::config bad;
  bad.sparsify.density = 2;
  CHECK_FALSE(gm::measure_path(gm::sketch_stand_in(bad), sample).ok());
}
