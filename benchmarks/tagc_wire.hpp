#pragma once
// Bytes on the wire and error of one reduce-scatter step of a GPT-2 small gradient (124,439,808
// parameters, flat, in named_parameters() order, model::gpt2_layout) over W simulated ranks, for the baselines and
// the TAGC codec (docs/tagc.md, "Measured"). Used by sketch_bench.cpp (rows tagc_wire/...).
//
// Gradients: rank r's g_r[j] = s_t h_j (a_j + 0.7 b_rj): a, b standard normal-ish (sums of four
// uniforms), h = exp(0.8 z_j) a heavy tail shared by the ranks (the same positions are large on
// every rank, as in data-parallel training), s_t a per-tensor scale (as the demo uses). The
// "independent" world draws h and a per rank instead: the ranks' kept sets barely overlap, the
// union is about W times each rank's (the worst case for a sketch of fixed size).
// Bytes per rank: a ring all-reduce sends 2 (W - 1) / W of the buffer, a ring reduce-scatter
// (W - 1) / W. Error: ||decoded - sum_r g_r|| / ||sum_r g_r|| over the whole buffer, one step
// from zero residuals (TAGC's error feedback owes the rest, exactly).

#include <gradcomp/core/murmur3.hpp>
#include <gradcomp/core/numeric.hpp>
#include <gradcomp/tagc.hpp>
#include <gradcomp/model/published.hpp>
#include <gradcomp/model/split.hpp>
#include <gradcomp/model/tagc.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace tagc_wire {

namespace gc = gradcomp;
namespace gt = gradcomp::tagc;

struct tensor_span {
  std::size_t size;
  float scale;
};

// GPT-2 small (model/published.hpp: 12 layers, d 768, vocab 50257, context 1024, the LM
// head tied to wte), each tensor with the gradient scale the demo gives it (deeper layers and
// the MLP larger, norms and biases small).
inline std::vector<tensor_span> gpt2_small() {
  const gc::layout l = gc::model::gpt2_layout(gc::model::gpt2_small);
  std::vector<tensor_span> t;
  for (const gc::tensor_desc& d : l.tensors()) {
    const std::string& name = d.name;
    const auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
    const bool bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    const std::size_t at = name.find(".h.");
    const float depth = at == std::string::npos ? 1.0f : 0.5f + static_cast<float>(std::stoul(name.substr(at + 3)) + 1) / 12.0f;
    float scale = 6e-5f * depth;
    if (has("wte")) scale = 2e-4f;
    else if (has("wpe")) scale = 3e-5f;
    else if (has(".ln_") || has("ln_f")) scale = (bias ? 5e-6f : 1e-5f) * depth;
    else if (bias) scale = 5e-6f * depth;
    else if (has("c_attn")) scale = 4e-5f * depth;
    else if (has("mlp")) scale = 8e-5f * depth;
    t.push_back({d.elements(), scale});
  }
  return t;
}

inline float unit(std::uint32_t j, std::uint32_t seed) {  // [0, 1)
  return static_cast<float>(gc::murmur3_u32(j, seed) >> 8) * 0x1.0p-24f;
}
inline float normalish(std::uint32_t j, std::uint32_t seed) {
  return (unit(j, seed) + unit(j, seed + 1) + unit(j, seed + 2) + unit(j, seed + 3) - 2.0f) * 1.7320508f;
}

struct world {
  std::uint32_t ranks = 0;
  bool independent = false;
  std::vector<std::vector<float>> g;
  std::vector<double> sum;  // sum_r g_r, in double
  double sum_norm = 0;
};

inline const world& world_of(std::uint32_t ranks, bool independent = false) {
  static std::unique_ptr<world> w;
  if (w && w->ranks == ranks && w->independent == independent) return *w;
  w.reset();
  w = std::make_unique<world>();
  w->ranks = ranks;
  w->independent = independent;
  const auto layout = gpt2_small();
  std::size_t n = 0;
  for (const auto& t : layout) n += t.size;
  w->g.assign(ranks, std::vector<float>(n));
  w->sum.assign(n, 0.0);
  std::size_t j = 0;
  for (const auto& t : layout)
    for (std::size_t i = 0; i < t.size; ++i, ++j) {
      const auto u = static_cast<std::uint32_t>(j);
      const float h = std::exp(0.8f * normalish(u, 10)), a = normalish(u, 20);
      for (std::uint32_t r = 0; r < ranks; ++r) {
        const std::uint32_t own = 1000 + 10 * r;
        w->g[r][j] = independent ? t.scale * std::exp(0.8f * normalish(u, own)) * normalish(u, own + 5)
                                 : t.scale * h * (a + 0.7f * normalish(u, 100 + 10 * r));
        w->sum[j] += w->g[r][j];
      }
    }
  for (double s : w->sum) w->sum_norm += s * s;
  w->sum_norm = std::sqrt(w->sum_norm);
  return *w;
}

struct figures {
  double bytes_per_rank = 0;  // ring model
  double buffer_bytes = 0;    // what one rank hands to the transport, all phases
  double rel_error = 0;
  double peeled = 1;          // of the union's positions
  double cells_per_item = 0;
  double union_density = 0;
};

inline double ring(std::uint32_t w, double bytes, bool all_reduce) {
  return (all_reduce ? 2.0 : 1.0) * (w - 1) / w * bytes;
}

// Plain reduce-scatter of fp32 or bf16 values (bf16: each partial sum rounded, as a ring does).
inline figures cast_step(const world& w, bool bf16) {
  const std::size_t n = w.sum.size();
  figures f;
  f.buffer_bytes = static_cast<double>(w.ranks * ((n + w.ranks - 1) / w.ranks)) * (bf16 ? 2 : 4);
  f.bytes_per_rank = ring(w.ranks, f.buffer_bytes, false);
  double err = 0;
  for (std::size_t j = 0; j < n; ++j) {
    float acc = bf16 ? gc::bf16_t::from_float(w.g[0][j]).to_float() : w.g[0][j];
    for (std::uint32_t r = 1; r < w.ranks; ++r) {
      acc = bf16 ? gc::bf16_t::from_float(acc + gc::bf16_t::from_float(w.g[r][j]).to_float()).to_float() : acc + w.g[r][j];
    }
    err += (acc - w.sum[j]) * (acc - w.sum[j]);
  }
  f.rel_error = std::sqrt(err) / w.sum_norm;
  return f;
}

// Element-wise reduction of one rank's phase buffer into the running total.
inline void reduce_into(const gc::summable::phase& p, std::vector<std::byte>& total, const std::vector<std::byte>& add) {
  for (std::size_t i = 0; i < p.count; ++i) {
    if (p.type == gc::summable::wire_type::u32) {
      std::uint32_t a, b;
      std::memcpy(&a, total.data() + 4 * i, 4);
      std::memcpy(&b, add.data() + 4 * i, 4);
      a = p.op == gc::summable::reduction::bitwise_or ? a | b : a + b;
      std::memcpy(total.data() + 4 * i, &a, 4);
    } else if (p.type == gc::summable::wire_type::f32) {
      float a, b;
      std::memcpy(&a, total.data() + 4 * i, 4);
      std::memcpy(&b, add.data() + 4 * i, 4);
      a += b;
      std::memcpy(total.data() + 4 * i, &a, 4);
    } else {
      gc::bf16_t a, b;
      std::memcpy(&a, total.data() + 2 * i, 2);
      std::memcpy(&b, add.data() + 2 * i, 2);
      a = gc::bf16_t::from_float(a.to_float() + b.to_float());
      std::memcpy(total.data() + 2 * i, &a, 2);
    }
  }
}

// One TAGC step on every rank: phase 0 all-reduced, phase 1 reduce-scattered.
inline figures tagc_step(const world& w, const gt::config& cfg) {
  const gt::codec c(cfg);
  const std::size_t n = w.sum.size();
  std::vector<gt::state> st(w.ranks);
  for (std::uint32_t r = 0; r < w.ranks; ++r)
    if (!c.make_state(n, w.ranks, r, st[r])) return {};
  figures f;
  std::vector<float> out(n, 0.0f);
  for (std::size_t k = 0; k < 2; ++k) {
    const auto p = c.describe(k, st[0]);
    if (!p) return {};
    std::vector<std::byte> total(p->bytes()), mine(p->bytes());
    for (std::uint32_t r = 0; r < w.ranks; ++r) {
      if (!c.encode(k, w.g[r], st[r], r == 0 ? total : mine)) return {};
      if (r > 0) reduce_into(*p, total, mine);
    }
    f.buffer_bytes += static_cast<double>(p->bytes());
    f.bytes_per_rank += ring(w.ranks, static_cast<double>(p->bytes()), k == 0);
    for (std::uint32_t r = 0; r < w.ranks; ++r) {
      const gc::chunk_range mine_range = gc::summable::shard_of(n, w.ranks, r);
      const std::span<const std::byte> got = k == 0 ? std::span<const std::byte>(total)
                                                    : std::span<const std::byte>(total).subspan(r * p->shard_bytes(), p->shard_bytes());
      if (!c.receive(k, st[r], got, k == 0 ? std::span<float>{} : std::span<float>(out).subspan(mine_range.offset, mine_range.count)))
        return {};
    }
  }
  double err = 0, items = 0, peeled = 0;
  for (std::size_t j = 0; j < n; ++j) err += (out[j] - w.sum[j]) * (out[j] - w.sum[j]);
  for (const auto& s : st) items += s.stats.items, peeled += s.stats.peeled;
  f.rel_error = std::sqrt(err) / w.sum_norm;
  f.peeled = items > 0 ? peeled / items : 1.0;
  f.cells_per_item = items > 0 ? static_cast<double>(w.ranks) * st[0].rows * cfg.block / items : 0.0;
  f.union_density = items / static_cast<double>(n);
  return f;
}

// TAGC's routing on the summable path (model::split with tagc_routing()): the codec over
// the MLP, embeddings and LM head, the other tensors reduce-scattered as bf16, tensors under
// 64 Ki elements as fp32. Peeled, cells per item: the sketch part's; union: of the whole buffer.
inline figures routed_step(const world& w, const gt::config& cfg) {
  namespace gm = gc::model;
  const gm::split sp(gm::gpt2_layout(gm::gpt2_small), gm::tagc_routing());
  const std::size_t n = w.sum.size();
  if (sp.get_layout().extent() != n) return {};
  figures total;
  double err2 = 0;
  for (std::size_t p = 0; p < sp.parts(); ++p) {
    world part;
    part.ranks = w.ranks;
    part.g.assign(w.ranks, std::vector<float>(sp.size(p)));
    part.sum.assign(sp.size(p), 0.0);
    part.sum_norm = 1.0;  // rel_error then holds the part's absolute error
    for (std::uint32_t r = 0; r < w.ranks; ++r)
      if (!sp.gather<float>(p, w.g[r], part.g[r])) return {};
    if (!sp.gather<double>(p, w.sum, part.sum)) return {};
    const figures f = p == 0 ? tagc_step(part, cfg) : cast_step(part, p == 1);
    total.bytes_per_rank += f.bytes_per_rank;
    total.buffer_bytes += f.buffer_bytes;
    err2 += f.rel_error * f.rel_error;
    if (p == 0) {
      total.peeled = f.peeled;
      total.cells_per_item = f.cells_per_item;
      total.union_density = f.union_density * static_cast<double>(sp.size(0)) / static_cast<double>(n);
    }
  }
  total.rel_error = std::sqrt(err2) / w.sum_norm;
  return total;
}

}  // namespace tagc_wire
