#pragma once
// The demo's transformer section: the GPT-2 small layout (Hugging Face names) classified into
// roles and routed TAGC's way (MLP, embeddings and the tied LM head through the sketch slot,
// here top-k 1% + bf16 + residual until the count sketch is in the library; the other large
// tensors as bf16; tensors under 64 Ki elements as fp32), one synthetic gradient step with
// telemetry: each tensor's role, codec, bytes, ratio and error, then totals per role. Then the
// overlap planner for one layer's tensor-parallel exchange at 1, 10 and 100 Gbit/s, with the
// AccTFM hybrid's throughput measured here (CPU backend).

#include <gradcomp/gradcomp.hpp>
#include <gradcomp/model.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace transformer_report {

namespace gc = gradcomp;
namespace gm = gradcomp::model;

// Fixed-seed heavy-tailed values (normal x exp(normal)), scaled per role.
inline void fill(const gc::layout& l, const std::vector<gc::role>& roles, std::vector<float>& g) {
  std::uint64_t s = 0x747261;
  const auto uniform = [&] {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (static_cast<double>((z ^ (z >> 31)) >> 11) + 0.5) * 0x1.0p-53;
  };
  for (std::size_t t = 0; t < l.size(); ++t) {
    const gc::role r = roles[t];
    const double scale = r == gc::role::norm || r == gc::role::bias ? 5e-6 : r == gc::role::lm_head ? 2e-4 : 6e-5;
    for (std::size_t j = l[t].offset; j < l[t].offset + l[t].elements(); ++j) {
      const double a = std::sqrt(-2 * std::log(uniform())), b = 6.283185307179586 * uniform();
      g[j] = static_cast<float>(scale * a * std::cos(b) * std::exp(0.5 * a * std::sin(b)));
    }
  }
}

inline std::string shape_of(const gc::tensor_desc& t) {
  std::string s = "[";
  for (std::size_t i = 0; i < t.shape.size(); ++i) s += (i ? " x " : "") + std::to_string(t.shape[i]);
  return s + "]";
}

inline void routing_section() {
  using R = gm::tagc_router<>;
  gm::sketch_stand_in::config sketch;
  sketch.sparsify.density = 0.01;
  const R r(gm::gpt2_layout(gm::gpt2_small), gm::tagc_routing(),
            {gm::sketch_stand_in(sketch), gm::bf16_cast(), gm::fp32_plain()});
  const gc::layout& l = r.get_layout();
  std::vector<gc::role> roles(l.size());
  for (std::size_t t = 0; t < l.size(); ++t) roles[t] = r.role_of(t);
  std::vector<float> g(l.extent());
  fill(l, roles, g);
  auto st = r.make_state();
  std::vector<std::byte> payload(r.max_payload_bytes<float>());
  gm::telemetry tel;
  const auto sent = r.compress<float>(g, st, payload, &tel);
  if (!sent) {
    std::printf("router: %s\n", sent.error().detail());
    return;
  }
  // Per tensor: bytes, and the squared error and norm summed over its chunks.
  std::vector<double> bytes(l.size()), e2(l.size()), g2(l.size()), seconds(l.size());
  for (const gm::chunk_stats& c : tel.chunks) {
    bytes[c.tensor] += static_cast<double>(c.bytes);
    g2[c.tensor] += c.gradient_norm * c.gradient_norm;
    e2[c.tensor] += std::pow(c.rel_error * c.gradient_norm, 2);
    seconds[c.tensor] += c.seconds;
  }
  const char* codec_names[] = {"top-k 1% bf16 +EF (sketch slot)", "bf16", "fp32 (small)"};
  std::printf("\ntransformer roles and routing: GPT-2 small (Hugging Face names), %zu tensors, %zu parameters, one step\n",
              l.size(), l.parameters());
  std::printf("  %-34s %-13s %-13s %-32s %10s %8s %10s\n", "tensor", "shape", "role", "codec", "bytes", "ratio", "rel. error");
  for (std::size_t t = 0; t < l.size(); ++t) {
    const bool shown = t < 2 + 12 || t + 2 >= l.size();  // embeddings, layer 0, final norm
    if (t == 14) std::printf("  ... layers 1 to 11: as layer 0\n");
    if (!shown) continue;
    std::printf("  %-34s %-13s %-13s %-32s %10.0f %8.2f %10.3e\n", l[t].name.c_str(), shape_of(l[t]).c_str(),
                gc::to_string(roles[t]), codec_names[r.route(t)], bytes[t], 4.0 * static_cast<double>(l[t].elements()) / bytes[t],
                g2[t] > 0 ? std::sqrt(e2[t] / g2[t]) : 0.0);
  }
  std::printf("\n  %-13s %7s %12s %-32s %12s %8s %10s %9s\n", "role", "tensors", "parameters", "codec", "bytes", "ratio",
              "rel. error", "ms");
  double all_bytes = 0, all_e2 = 0, all_g2 = 0;
  for (std::size_t k = 0; k < gc::role_count; ++k) {
    std::size_t count = 0, params = 0, slot = 0;
    double b = 0, e = 0, n = 0, ms = 0;
    for (std::size_t t = 0; t < l.size(); ++t)
      if (static_cast<std::size_t>(roles[t]) == k)
        ++count, params += l[t].elements(), slot = r.route(t), b += bytes[t], e += e2[t], n += g2[t], ms += 1e3 * seconds[t];
    if (count == 0) continue;
    all_bytes += b, all_e2 += e, all_g2 += n;
    std::printf("  %-13s %7zu %12zu %-32s %12.0f %8.2f %10.3e %9.1f\n", gc::to_string(static_cast<gc::role>(k)), count,
                params, codec_names[slot], b, 4.0 * static_cast<double>(params) / b, n > 0 ? std::sqrt(e / n) : 0.0, ms);
  }
  std::printf("  %-13s %7zu %12zu %-32s %12.0f %8.2f %10.3e\n", "all", l.size(), l.parameters(), "", all_bytes,
              4.0 * static_cast<double>(l.parameters()) / all_bytes, std::sqrt(all_e2 / all_g2));
  std::printf("  bytes: frames, headers included; ratio: fp32 bytes / bytes; rel. error: ||decoded - g|| / ||g|| of this\n"
              "  step (top-k's residual goes out in later steps); ms: compress time (telemetry, per chunk, summed).\n"
              "  The router is the gather path, so its sketch slot holds top-k; TAGC's count sketch over the same roles\n"
              "  runs on the summable path (model::split + tagc::codec, docs/model.md).\n");
}

inline void planner_section() {
  // One GPT-2 small layer under 2-way tensor parallelism: the MLP output, 8 x 1024 tokens x
  // 768, all-reduced after a compute of 2 x tokens x 768 x 3072 x 2 / 2 FLOPs per rank at an
  // assumed 50 TFLOP/s (a GPU's; the codec speeds below are this CPU's).
  const std::size_t tokens = 8 * 1024, hidden = 768;
  gm::layer_problem p{tokens * hidden, hidden, 2.0 * tokens * hidden * 3072 * 2 / 2 / 50e12, 10e-6, 2};
  const gm::acctfm<4> h(gm::acctfm_config<4>(hidden, 1.0 / 8, 256));
  std::vector<float> sample(256 * hidden);
  for (std::size_t j = 0; j < sample.size(); ++j) {
    const float x = static_cast<float>(j);
    sample[j] = std::sin(0.37f * x) * std::exp(std::cos(0.11f * x));
  }
  const auto measured = gm::measure_path(h, sample, gm::collective::all_gather, 5);
  if (!measured) return;
  gm::planner_options o;
  o.compressed = *measured;
  std::printf("\noverlap planner: one GPT-2 small layer, 2-way tensor parallel, %zu x %zu activations, compute %.2f ms\n",
              tokens, hidden, 1e3 * p.compute_s);
  std::printf("  AccTFM hybrid (row top-k 1/8 + piecewise<4>), measured here: %.2f bytes/element, compress %.0f M "
              "elements/s, accumulate %.0f M elements/s\n",
              o.compressed.wire_bytes_per_element, 1e-6 * o.compressed.encode_elements_per_s,
              1e-6 * o.compressed.decode_elements_per_s);
  std::printf("  %-9s %-10s %7s %-22s %10s %12s %12s %13s\n", "link", "choice", "chunks", "rows per chunk", "step ms",
              "bf16 ms", "hybrid ms", "no overlap ms");
  for (double gbit : {1.0, 10.0, 100.0}) {
    o.net = gm::network::gbit(gbit, 5e-6);
    const gm::plan pl = gm::plan_layer(p, o);
    const double serial = gm::pipeline_seconds(p, o, pl.compress ? o.compressed : o.plain, std::vector<std::size_t>{p.elements});
    std::string rows = std::to_string(pl.sizes.front() / hidden);
    if (pl.chunks() > 1)
      rows += " .. " + std::to_string(pl.sizes[pl.chunks() / 2] / hidden) + " .. " +
              std::to_string(pl.sizes.back() / hidden);
    char link[32];
    std::snprintf(link, sizeof link, "%g Gb/s", gbit);
    std::printf("  %-9s %-10s %7zu %-22s %10.2f %12.2f %12.2f %13.2f\n", link, pl.compress ? "compress" : "bf16",
                pl.chunks(), rows.c_str(), 1e3 * pl.seconds, 1e3 * pl.plain_seconds, 1e3 * pl.compressed_seconds, 1e3 * serial);
  }
  std::printf("  rows per chunk: first .. middle .. last chunk; no overlap: the chosen path in one chunk.\n");
}

}  // namespace transformer_report

inline void print_transformer_report() {
  transformer_report::routing_section();
  transformer_report::planner_section();
}
