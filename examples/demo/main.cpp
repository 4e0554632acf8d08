// gradcomp demo: one synthetic GPT-2 gradient, every policy composition gradcomp offers.
//
// Builds a gradient buffer laid out like GPT-2 small's parameters (the Hugging Face / nanoGPT
// names and shapes), fills it with fixed-seed heavy-tailed values whose scale depends on the
// tensor (embeddings sparse-ish, biases small), then compresses it, partition: chunks of
// 4 MiB, with every quantizer alone (dense, no feedback), the biased ones again with residual
// feedback, and every quantizer after top-k 1% with residual feedback (plus top-k 10%), and
// prints, per composition: compression ratio, relative L2 error of one step, for residual
// feedback the error after 10 steps of the same gradient (sum of the decoded steps against
// 10 g: error feedback at work), and compress / decompress / accumulate throughput against
// memcpy; int4 with and without the fifth policy, transform::hadamard (a seeded rotation of each
// block of 256 values before quantizing). Then the sections of the other headers: GPT-2 small's
// tensors routed by role and the overlap planner, TAGC on 4 simulated ranks, and local steps on
// 4 simulated replicas (localsteps::synchroniser, int4 + error feedback).
//
//   gradcomp_demo            scaled-down model (4 layers, vocab 8192; ~35M parameters)
//   gradcomp_demo --full     real GPT-2 small (12 layers, vocab 50257; ~124M parameters)
//   gradcomp_demo --layout   also list every tensor of the buffer

#include <gradcomp/gradcomp.hpp>

#include "localsteps_report.hpp"
#include "transformer_report.hpp"
#include "tagc_report.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace gc = gradcomp;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// ---------------------------------------------------------------------------------------------
// Model layout (GPT-2: Conv1D weights are stored [in x out]).
// ---------------------------------------------------------------------------------------------
struct model_shape {
  const char* label;
  std::size_t layers, vocab, n_ctx, d_model;
};

struct tensor {
  std::string name;
  std::size_t rows, cols;  // cols == 0: a vector of `rows` elements
  std::size_t offset = 0;
  std::size_t size() const { return cols == 0 ? rows : rows * cols; }
  std::string shape() const {  // snprintf: g++ 12 -O3 warns (-Wrestrict) on "[" + std::string
    char buf[48];
    if (cols == 0) {
      std::snprintf(buf, sizeof buf, "[%zu]", rows);
    } else {
      std::snprintf(buf, sizeof buf, "[%zu x %zu]", rows, cols);
    }
    return buf;
  }
};

std::vector<tensor> gpt2_layout(const model_shape& m) {
  const std::size_t d = m.d_model;
  std::vector<tensor> t;
  t.push_back({"transformer.wte.weight", m.vocab, d});
  t.push_back({"transformer.wpe.weight", m.n_ctx, d});
  for (std::size_t l = 0; l < m.layers; ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    t.push_back({h + "ln_1.weight", d, 0});
    t.push_back({h + "ln_1.bias", d, 0});
    t.push_back({h + "attn.c_attn.weight", d, 3 * d});
    t.push_back({h + "attn.c_attn.bias", 3 * d, 0});
    t.push_back({h + "attn.c_proj.weight", d, d});
    t.push_back({h + "attn.c_proj.bias", d, 0});
    t.push_back({h + "ln_2.weight", d, 0});
    t.push_back({h + "ln_2.bias", d, 0});
    t.push_back({h + "mlp.c_fc.weight", d, 4 * d});
    t.push_back({h + "mlp.c_fc.bias", 4 * d, 0});
    t.push_back({h + "mlp.c_proj.weight", 4 * d, d});
    t.push_back({h + "mlp.c_proj.bias", d, 0});
  }
  t.push_back({"transformer.ln_f.weight", d, 0});
  t.push_back({"transformer.ln_f.bias", d, 0});
  std::size_t offset = 0;
  for (auto& x : t) {
    x.offset = offset;
    offset += x.size();
  }
  return t;
}

// ---------------------------------------------------------------------------------------------
// Synthetic gradient: value = scale * z * exp(w), z and w standard normal (a normal with a
// log-normal scale: heavy tails, as real gradients have). Each tensor has its own stream (seeded
// from its name), so the values do not depend on the order of generation.
// ---------------------------------------------------------------------------------------------
class rng {
 public:
  explicit rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform_open() { return (static_cast<float>(next() >> 40) + 0.5f) * 0x1.0p-24f; }  // (0, 1)
  float heavy_tailed() {  // Box-Muller pair: z * exp(w)
    const float r = std::sqrt(-2.0f * std::log(uniform_open()));
    const float a = 6.2831853f * uniform_open();
    return r * std::cos(a) * std::exp(r * std::sin(a));
  }

 private:
  std::uint64_t s_;
};

std::uint64_t name_seed(std::string_view s) {  // FNV-1a
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return h;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// Per-tensor gradient scale, and the fraction of rows that carry a gradient (token embedding:
// only the tokens of the batch; tied to the LM head, the other rows get a much smaller one).
float tensor_scale(const tensor& t, std::size_t layer, std::size_t layers) {
  const float depth = 0.5f + static_cast<float>(layer + 1) / static_cast<float>(layers);  // deeper: larger
  if (t.name.find("wte") != std::string::npos) return 2e-4f;
  if (t.name.find("wpe") != std::string::npos) return 3e-5f;
  if (t.name.find(".ln_") != std::string::npos || t.name.find("ln_f") != std::string::npos)
    return (ends_with(t.name, ".bias") ? 5e-6f : 1e-5f) * depth;
  if (ends_with(t.name, ".bias")) return 5e-6f * depth;
  if (t.name.find("c_attn") != std::string::npos) return 4e-5f * depth;
  if (t.name.find("mlp") != std::string::npos) return 8e-5f * depth;
  return 6e-5f * depth;
}

std::size_t layer_of(const tensor& t) {
  const auto p = t.name.find(".h.");
  return p == std::string::npos ? 0 : static_cast<std::size_t>(std::strtoul(t.name.c_str() + p + 3, nullptr, 10));
}

void fill_gradient(const std::vector<tensor>& layout, std::size_t layers, std::vector<float>& g) {
  for (const tensor& t : layout) {
    rng r(0x5eed ^ name_seed(t.name));
    const float scale = tensor_scale(t, layer_of(t), layers);
    float* p = g.data() + t.offset;
    if (t.name.find("wte") != std::string::npos) {
      // ~20% of the vocabulary appears in the batch; the other rows get a 100x smaller gradient.
      for (std::size_t row = 0; row < t.rows; ++row) {
        const float s = (r.next() % 5 == 0) ? scale : scale * 0.01f;
        for (std::size_t c = 0; c < t.cols; ++c) p[row * t.cols + c] = s * r.heavy_tailed();
      }
    } else {
      for (std::size_t i = 0; i < t.size(); ++i) p[i] = scale * r.heavy_tailed();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Running one composition.
// ---------------------------------------------------------------------------------------------
struct buffers {
  std::span<const float> g;
  std::vector<float> sum;           // decoded steps, accumulated
  std::vector<float> decoded;       // the last step, decompressed
  std::vector<std::byte> payload;  // sized for the largest composition (dense fp32)
  double g_norm = 0;               // ||g||
};

struct row {
  std::string sparsify, values, feedback;
  double ratio = 0, err1 = 0, err10 = -1, compress_gbs = 0, decompress_gbs = 0, accumulate_gbs = 0;
  double ratio_u32 = 0;   // the same frames with u32 index lists (0: no index list)
  std::string indices;    // index encoding of the first frame
  double memcpy_gbs = 0;  // memcpy of the gradient buffer (read + write), measured before the row
};

// ||k g - sum|| / ||k g||
double relative_error(const buffers& b, double k) {
  double e = 0;
  for (std::size_t i = 0; i < b.g.size(); ++i) {
    const double d = k * static_cast<double>(b.g[i]) - static_cast<double>(b.sum[i]);
    e += d * d;
  }
  return std::sqrt(e) / (k * b.g_norm);
}

[[noreturn]] void fail(const char* what, const gc::status& s) {
  std::fprintf(stderr, "gradcomp_demo: %s failed: %s (%s)\n", what, gc::to_string(s.code()), s.detail());
  std::exit(1);
}

// Effective memcpy bandwidth of the gradient bytes (2 x 4n bytes per copy), GB/s, best of 3.
double measure_memcpy(std::span<const float> src, std::vector<float>& dst) {
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 3; ++i) {
    const auto t0 = clock_type::now();
    std::memcpy(dst.data(), src.data(), src.size_bytes());
    best = std::min(best, seconds_since(t0));
  }
  volatile float sink = dst[dst.size() / 2];  // keep the copies observable
  (void)sink;
  return 2.0 * static_cast<double>(src.size_bytes()) / best / 1e9;
}

constexpr std::size_t chunk_bytes = std::size_t{4} << 20;
constexpr int feedback_steps = 10;  // steps of the same gradient with residual feedback
constexpr int plain_steps = 3;      // without feedback: steps only for timing (best of)

const char* index_name(gc::frame::index_format f) {
  switch (f) {
    case gc::frame::index_format::u32_list: return "u32";
    case gc::frame::index_format::delta: return "delta";
    case gc::frame::index_format::bitmap: return "bitmap";
    case gc::frame::index_format::seeded: return "seeded";
    default: return "-";
  }
}

// Row top-k sees the buffer as rows of d_model values: chunks of whole rows (3 MiB = 1024 rows).
constexpr std::size_t d_model = 768;

// T: the fifth policy, a transform of each chunk before it is quantized (identity: none).
template <class S, class Q, class F, class T = gc::transform::identity>
row run(buffers& b, double density, const std::string& sparsify_name, const char* value_name,
        const typename Q::config& quantize = {}, const typename S::config& sparsify = {}) {
  using C = gc::compressor<gc::partition::chunks, S, Q, F, T>;
  typename C::config cfg{};
  cfg.partition.chunk_bytes = S::kind == gc::selection::row_topk ? 4 * d_model * 1024 : chunk_bytes;
  cfg.quantize = quantize;
  cfg.sparsify = sparsify;
  cfg.seed = 42;
  if constexpr (!S::is_dense) cfg.sparsify.density = density;
  const C comp(cfg);
  if (auto s = comp.validate(); !s) fail("validate", s);

  const std::size_t n = b.g.size();
  gc::state st = comp.make_state(n);
  const double memcpy_gbs = measure_memcpy(b.g, b.sum);  // spread over the run: the reference is the median
  std::fill(b.sum.begin(), b.sum.end(), 0.0f);
  const double dense_bytes = 4.0 * static_cast<double>(n);

  row out;
  out.sparsify = sparsify_name;
  out.values = value_name;
  out.feedback = gc::momentum_feedback<F> ? "momentum" : F::has_state ? "residual" : "none";
  out.memcpy_gbs = memcpy_gbs;
  if constexpr (!S::is_dense) {  // what the index encodings gain: the first step with u32 lists
    typename C::config lists = cfg;
    lists.compact_indices = false;
    gc::state fresh = comp.make_state(n);
    const auto sent = C(lists).template compress<float>(b.g, fresh, b.payload);
    if (!sent) fail("compress", sent.error());
    out.ratio_u32 = dense_bytes / static_cast<double>(*sent);
  }
  double best_compress = std::numeric_limits<double>::infinity();
  double best_decompress = best_compress, best_accumulate = best_compress;
  double payload_bytes = 0;
  const int steps = F::has_state ? feedback_steps : plain_steps;
  for (int step = 0; step < steps; ++step) {
    auto t0 = clock_type::now();
    const auto sent = comp.template compress<float>(b.g, st, b.payload);
    best_compress = std::min(best_compress, seconds_since(t0));
    if (!sent) fail("compress", sent.error());
    payload_bytes = static_cast<double>(*sent);
    if (step == 0) out.indices = index_name(gc::frame::parse(b.payload, false)->indices);
    const std::span<const std::byte> sent_bytes(b.payload.data(), *sent);

    t0 = clock_type::now();
    const auto d = comp.template decompress<float>(sent_bytes, b.decoded);
    best_decompress = std::min(best_decompress, seconds_since(t0));
    if (!d) fail("decompress", d);

    t0 = clock_type::now();
    const auto s = comp.template accumulate<float>(sent_bytes, b.sum);
    best_accumulate = std::min(best_accumulate, seconds_since(t0));
    if (!s) fail("accumulate", s);
    if (step == 0) {
      out.err1 = relative_error(b, 1.0);
      // The first step accumulated into zeros: decompress must have written the same values.
      for (std::size_t i = 0; i < n; ++i)
        if (!(b.decoded[i] == b.sum[i]) && !(std::isnan(b.decoded[i]) && std::isnan(b.sum[i]))) {
          std::fprintf(stderr, "gradcomp_demo: decompress and accumulate disagree at %zu\n", i);
          std::exit(1);
        }
    }
  }
  if (F::has_state) out.err10 = relative_error(b, static_cast<double>(steps));
  out.ratio = dense_bytes / payload_bytes;
  // Effective bandwidth: bytes the operation must read + write (as in benchmarks/cpu_bench.cpp).
  const double residual_bytes = F::has_state ? 2 * dense_bytes : 0.0;  // residual read + written
  out.compress_gbs = (dense_bytes + payload_bytes + residual_bytes) / best_compress / 1e9;  // (a transform's pass not counted)
  out.decompress_gbs = (payload_bytes + dense_bytes) / best_decompress / 1e9;  // every fp32 value written
  // accumulate reads the payload, and reads and writes the fp32 sum where values were sent.
  std::size_t kept = 0;  // (threshold: the capacity, an upper bound)
  for (std::size_t i = 0, c = comp.template chunk_count<float>(n); i < c; ++i)
    kept += S::kept(cfg.sparsify, comp.template chunk<float>(n, i).count);
  if (S::kind == gc::selection::random) out.ratio_u32 = 0;  // no index list to compare with
  out.accumulate_gbs = (payload_bytes + 8.0 * static_cast<double>(kept)) / best_accumulate / 1e9;
  return out;
}

// Every quantizer, with sparsifier S and feedback F (default configs, stochastic ones seeded).
template <class S, class F>
void run_quantizers(buffers& b, double density, const std::string& name, std::vector<row>& rows) {
  using namespace gc::quantize;
  const auto add = [&]<class Q>(Q, const char* label, const typename Q::config& c = {}) {
    rows.push_back(run<S, Q, F>(b, density, name, label, c));
  };
  add(none{}, "fp32");
  add(bf16{}, "bf16");
  add(fp16{}, "fp16");
  add(fp8_e4m3{}, "fp8 e4m3");
  add(fp8_e5m2{}, "fp8 e5m2");
  add(fp8_e4m3{}, "e4m3/128", {.group = 128});
  add(int_block<8>{}, "int8");
  add(int_block<8>{}, "int8 sr", {.round = rounding::stochastic});
  add(int_block<4>{}, "int4");
  if constexpr (S::is_dense)  // int4 on the rotated chunks: transform::hadamard, blocks of 256 (docs/transforms.md)
    rows.push_back(run<S, int_block<4>, F, gc::transform::hadamard>(b, density, name, "int4 rot"));
  add(int_block<4, int_range::asymmetric>{}, "int4 asym");
  add(int_block<2>{}, "int2 sr", {.round = rounding::stochastic});
  add(piecewise<4>{}, "piecewise4");
  add(qsgd<4>{}, "qsgd 4b");
  add(terngrad{}, "terngrad");
  add(sign{}, "sign");
  add(natural{}, "natural");
}

// The rotated codecs against their plain rows of the table: the error at the same bytes.
void print_rotation(const std::vector<row>& rows) {
  const auto find = [&](const char* sparsify, const char* values) -> const row* {
    for (const row& r : rows)
      if (r.sparsify == sparsify && r.values == values) return &r;
    return nullptr;
  };
  const row *plain = find("dense", "int4"), *rotated = find("dense", "int4 rot");
  const row *plain_ef = find("dense+EF", "int4"), *rotated_ef = find("dense+EF", "int4 rot");
  if (!plain || !rotated || !plain_ef || !rotated_ef) return;
  std::printf("\nRotation: int4 (groups of 128) with and without transform::hadamard on this heavy-tailed gradient, ratio %.2f\n",
              rotated->ratio);
  std::printf("  error of one step       %.3e -> %.3e rotated (%.1fx lower)\n", plain->err1, rotated->err1,
              plain->err1 / rotated->err1);
  std::printf("  error of %d steps, EF   %.3e -> %.3e rotated (%.1fx lower)\n", feedback_steps, plain_ef->err10,
              rotated_ef->err10, plain_ef->err10 / rotated_ef->err10);
  std::printf("  compress                %.2f -> %.2f GB/s (the transform's pass over each chunk)\n", plain->compress_gbs,
              rotated->compress_gbs);
}

void usage() {
  std::puts(
      "usage: gradcomp_demo [--full] [--layout]\n"
      "  --full    real GPT-2 small sizes (12 layers, vocab 50257, ~124M parameters, ~3 GB of memory)\n"
      "            instead of the scaled-down default (4 layers, vocab 8192, ~35M parameters)\n"
      "  --layout  list every tensor of the gradient buffer");
}

}  // namespace

int main(int argc, char** argv) {
  bool full = false, show_layout = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--full") {
      full = true;
    } else if (a == "--layout") {
      show_layout = true;
    } else if (a == "--help" || a == "-h") {
      usage();
      return 0;
    } else {
      std::fprintf(stderr, "gradcomp_demo: unknown argument '%s'\n", argv[i]);
      usage();
      return 2;
    }
  }

  const model_shape m = full ? model_shape{"GPT-2 small", 12, 50257, 1024, 768}
                             : model_shape{"GPT-2 small, scaled down (--full for the real sizes)", 4, 8192, 1024, 768};
  const std::vector<tensor> layout = gpt2_layout(m);
  const std::size_t n = layout.back().offset + layout.back().size();

  std::vector<float> g(n);
  const auto t_fill = clock_type::now();
  fill_gradient(layout, m.layers, g);
  const double fill_s = seconds_since(t_fill);

  buffers b;
  b.g = g;
  b.sum.assign(n, 0.0f);
  b.decoded.assign(n, 0.0f);
  {
    using largest = gc::compressor<gc::partition::chunks, gc::sparsify::dense, gc::quantize::none, gc::feedback::none>;
    b.payload.assign(largest({.partition = {.chunk_bytes = chunk_bytes}}).max_payload_bytes<float>(n), std::byte{0});
  }
  double norm2 = 0;
  for (float x : g) norm2 += static_cast<double>(x) * static_cast<double>(x);
  b.g_norm = std::sqrt(norm2);

  std::printf("gradcomp %d.%d.%d demo: %s\n", GRADCOMP_VERSION_MAJOR, GRADCOMP_VERSION_MINOR, GRADCOMP_VERSION_PATCH,
              m.label);
  std::printf("  %zu layers, vocab %zu, n_ctx %zu, d_model %zu: %zu tensors, %zu parameters "
              "(%.1f MB fp32, made in %.1f s)\n",
              m.layers, m.vocab, m.n_ctx, m.d_model, layout.size(), n, 4e-6 * static_cast<double>(n), fill_s);
  if (show_layout) {
    for (const tensor& t : layout)
      std::printf("    %-36s %-14s offset %10zu  scale %.0e\n", t.name.c_str(), t.shape().c_str(), t.offset,
                  static_cast<double>(tensor_scale(t, layer_of(t), m.layers)));
  }
  std::printf("  partition: chunks of %zu MiB (%zu frames); running every composition...\n", chunk_bytes >> 20,
              (n * 4 + chunk_bytes - 1) / chunk_bytes);
  std::fflush(stdout);

  std::vector<row> rows;
  const auto t_run = clock_type::now();
  using gc::feedback::residual;
  run_quantizers<gc::sparsify::dense, gc::feedback::none>(b, 1.0, "dense", rows);
  {
    using namespace gc::quantize;
    const auto add = [&]<class Q>(Q, const char* label, const typename Q::config& c = {}) {
      rows.push_back(run<gc::sparsify::dense, Q, residual>(b, 1.0, "dense+EF", label, c));
    };
    add(bf16{}, "bf16");
    add(int_block<4>{}, "int4");
    rows.push_back(run<gc::sparsify::dense, int_block<4>, residual, gc::transform::hadamard>(b, 1.0, "dense+EF", "int4 rot"));
    add(int_block<2>{}, "int2 sr", {.round = rounding::stochastic});
    add(sign{}, "sign");
    rows.push_back(run<gc::sparsify::topk, bf16, residual>(b, 0.10, "top-k 10%", "bf16"));
    rows.push_back(run<gc::sparsify::topk, int_block<8>, residual>(b, 0.10, "top-k 10%", "int8"));
  }
  run_quantizers<gc::sparsify::topk, residual>(b, 0.01, "top-k 1%", rows);
  {
    using namespace gc::quantize;
    using gc::sparsify::threshold;
    const auto both = [&]<class S, class F>(S, F, const char* name, double density, const typename S::config& sc = {}) {
      rows.push_back(run<S, bf16, F>(b, density, name, "bf16", {}, sc));
      rows.push_back(run<S, int_block<8>, F>(b, density, name, "int8", {}, sc));
    };
    both(threshold{}, residual{}, "DGC thr 1%", 0.01);
    both(threshold{}, residual{}, "TAGC thr 1%", 0.01, {.estimate = threshold::rule::tagc});
    both(threshold{}, gc::feedback::momentum{}, "DGC thr 1%", 0.01);
    both(gc::sparsify::randomk{}, residual{}, "random-k 1%", 0.01);
    both(gc::sparsify::row_topk{}, residual{}, "row top-k 1%", 0.01, {.cols = d_model});
    both(gc::sparsify::topk{}, residual{}, "top-k 0.1%", 0.001);
  }
  const double run_s = seconds_since(t_run);
  std::vector<double> copies;
  for (const row& r : rows) copies.push_back(r.memcpy_gbs);
  std::sort(copies.begin(), copies.end());
  const double memcpy_gbs = copies[copies.size() / 2];
  std::printf("  memcpy of the buffer: %.1f GB/s effective (read + write), median of %zu measurements "
              "(%.1f..%.1f)\n\n",
              memcpy_gbs, copies.size(), copies.front(), copies.back());

  std::printf("%-12s %-10s %-9s %8s %-7s %8s %12s %12s %10s %8s %11s %8s %10s %8s\n", "sparsify", "values", "feedback",
              "ratio", "indices", "u32 idx", "error 1 step", "error 10 st.", "comp GB/s", "x memcpy", "decomp GB/s", "x memcpy",
              "accum GB/s", "x memcpy");
  std::printf("%s\n", std::string(144, '-').c_str());
  std::string previous;
  for (const row& r : rows) {
    if (!previous.empty() && r.sparsify != previous) std::printf("\n");
    previous = r.sparsify;
    char err10[32] = "-";
    if (r.err10 >= 0) std::snprintf(err10, sizeof err10, "%.3e", r.err10);
    char u32[32] = "-";
    if (r.ratio_u32 > 0) std::snprintf(u32, sizeof u32, "%.2f", r.ratio_u32);
    std::printf("%-12s %-10s %-9s %8.2f %-7s %8s %12.3e %12s %10.2f %8.2f %11.2f %8.2f %10.2f %8.2f\n",
                r.sparsify.c_str(), r.values.c_str(), r.feedback.c_str(), r.ratio, r.indices.c_str(), u32, r.err1, err10,
                r.compress_gbs, r.compress_gbs / memcpy_gbs, r.decompress_gbs, r.decompress_gbs / memcpy_gbs,
                r.accumulate_gbs, r.accumulate_gbs / memcpy_gbs);
  }
  std::printf(
      "\nratio: fp32 bytes / payload bytes (frame headers included); indices: the encoding of the first frame, each\n"
      "  frame taking the smallest of u32 list, delta-coded gaps and bitmap (random-k: none, seeded); u32 idx: the\n"
      "  ratio the same step would have with u32 index lists. DGC/TAGC thr: sampled threshold (DGC's or TAGC's rule).\n"
      "int4 rot: int4 on each chunk rotated by the fifth policy, transform::hadamard (a seeded randomized Hadamard\n"
      "  transform of every block of 256 values, inverted after decoding; docs/transforms.md).\n"
      "error: ||k g - sum of k decoded steps|| / ||k g||; k = 1, and k = %d steps of the same gradient with residual\n"
      "  feedback (the residual carries what was not sent to the next step). With DGC momentum the sent sum also\n"
      "  carries the velocity (m = 0.9, amplifying a repeated gradient up to 10x), so its 10-step error stays large.\n"
      "GB/s: bytes read + written by the call per second, best of %d steps (%d with feedback). compress: gradient,\n"
      "  payload, residual; decompress: payload, and every fp32 value (zeros where none was sent); accumulate:\n"
      "  payload, and the fp32 sum where a value was sent (a scatter for top-k).\n"
      "x memcpy: over the memcpy figure above (best of 3 copies before each row; median over the rows).\n"
      "%zu compositions in %.1f s.\n",
      feedback_steps, plain_steps, feedback_steps, rows.size(), run_s);
  print_rotation(rows);
  print_transformer_report();
  demo_tagc::tagc_report(g);
  demo_localsteps::report();
  return 0;
}
