// Bytes one rank sends per training step, for a gradient shaped like GPT-2 small, on each
// aggregation path (docs/sharded.md, "Bytes per rank against the world size"). Every figure
// comes from the library's own sizes, with no transport and no timing:
//
//   gather path              ring all-gather of the payload: (W - 1) P(n),
//                            P = compressor::max_payload_bytes<float>
//   sharded reduce-scatter   all-to-all of W slots: (W - 1) S0,
//                            S0 = sharded::codec::describe(0).slot_bytes
//   sharded all-reduce       the all-to-all and an all-gather of one slot: (W - 1) (S0 + S1),
//                            S1 = describe(1).slot_bytes
//   summable all-reduce      a ring all-reduce of every phase buffer (describe(k) of
//                            summable::cast<Q> and tagc::codec): 2 (W - 1) ceil(count / W) e
//   summable reduce-scatter  the same with a ring reduce-scatter of the shardable phases:
//                            (W - 1) ceil(count / W) e (TAGC's bitmap is all-reduced either way)
//
// The reference is the bf16 ring all-reduce of the flat buffer (summable::cast<bf16>).
// P and S are capacities: top-k and threshold frames are sized for their u32 index lists and
// for threshold's most kept values (ceil(max_ratio k)); a fixed-size slot or an equal-size
// all-gather moves that many bytes whatever the step keeps.
//
// Two layouts of the same 124,439,808 fp32 gradients (model::gpt2_layout(gpt2_small)):
//   flat        one buffer of every parameter (FSDP's flat parameter, one DDP bucket)
//   per_tensor  each of the 148 tensors compressed (and sharded) on its own, bytes summed
// The codecs are the Python package's registered ones (python/src/registry_*.cpp), with their
// compositions and default options; TAGC is the TAGC-2 preset (flat layout only).
//
//   gradcomp_sharded_bytes --csv out.csv --json out.json
//
// The CSV has a row per layout, codec, path and W; the JSON holds the same rows and the setup.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <gradcomp/gradcomp.hpp>
#include <gradcomp/model/published.hpp>

namespace {

namespace gc = gradcomp;
namespace q = gradcomp::quantize;
namespace sp = gradcomp::sparsify;

constexpr std::uint32_t worlds[] = {2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};

[[noreturn]] void fail(const std::string& what, const gc::status& s) {
  std::fprintf(stderr, "gradcomp_sharded_bytes: %s: %s: %s\n", what.c_str(), gc::to_string(s.code()), s.detail());
  std::exit(1);
}

// --- What a rank sends in each collective (ring algorithms; a rank's own piece stays local).

// Ring all-gather: every rank's block passes W - 1 links.
std::uint64_t ring_all_gather(std::uint64_t block, std::uint32_t w) { return std::uint64_t{w - 1} * block; }
// All-to-all of W slots: W - 1 leave the rank.
std::uint64_t all_to_all(std::uint64_t slot, std::uint32_t w) { return std::uint64_t{w - 1} * slot; }
// Ring reduce-scatter of `count` elements of `elem` bytes: W - 1 pieces of ceil(count / W).
std::uint64_t ring_reduce_scatter(std::uint64_t count, std::uint64_t elem, std::uint32_t w) {
  return std::uint64_t{w - 1} * ((count + w - 1) / w) * elem;
}
// Ring all-reduce: a reduce-scatter, then an all-gather of the reduced pieces.
std::uint64_t ring_all_reduce(std::uint64_t count, std::uint64_t elem, std::uint32_t w) {
  return 2 * ring_reduce_scatter(count, elem, w);
}

struct row {
  std::string layout, codec, path;
  std::uint32_t world = 0;
  std::uint64_t bytes = 0;
  std::uint64_t payload = 0;  // gather: P; summable: the phase buffers' bytes per rank
  std::uint64_t slot0 = 0, slot1 = 0;  // sharded: S0, S1 (summed over tensors for per_tensor)
};

struct codec_info {
  std::string name, composition;
  bool feedback = false;
  std::string path_kind;  // "gather+sharded" or "summable"
};

struct sizes {
  std::uint64_t payload = 0, slot0 = 0, slot1 = 0, slot0_rs = 0;
};

// P(n), and S0, S1 from a sharded codec's describe() on rank 0 of W (every rank's slots have
// the size of the largest shard). The reduce-scatter codec's phase 0 is read as well.
template <class C>
sizes sizes_of(const C& comp, std::size_t n, std::uint32_t w) {
  sizes s;
  s.payload = comp.template max_payload_bytes<float>(n);
  {
    const gc::sharded::codec<C> ar(comp, gc::sharded::mode::all_reduce);
    typename gc::sharded::codec<C>::state st;
    if (auto r = ar.make_state(n, w, 0, st); !r) fail("sharded make_state", r);
    const auto p0 = ar.describe(0, st);
    const auto p1 = ar.describe(1, st);
    if (!p0) fail("sharded describe(0)", p0.error());
    if (!p1) fail("sharded describe(1)", p1.error());
    s.slot0 = p0->slot_bytes;
    s.slot1 = p1->slot_bytes;
  }
  const gc::sharded::codec<C> rs(comp, gc::sharded::mode::reduce_scatter);
  typename gc::sharded::codec<C>::state st;
  if (auto r = rs.make_state(n, w, 0, st); !r) fail("sharded make_state", r);
  const auto p0 = rs.describe(0, st);
  if (!p0) fail("sharded describe(0)", p0.error());
  s.slot0_rs = p0->slot_bytes;
  return s;
}

class measurer {
 public:
  measurer(std::size_t flat, std::vector<std::size_t> tensors) : flat_(flat), tensors_(std::move(tensors)) {}

  // A registered gather-path codec: the gather path and both sharded modes, on both layouts.
  template <class C>
  void gather_codec(const std::string& name, const std::string& composition, const C& comp) {
    codecs.push_back({name, composition, C::feedback::has_state, "gather+sharded"});
    std::fprintf(stderr, "%s\n", name.c_str());
    for (const std::uint32_t w : worlds) {
      add(name, "flat", w, sizes_of(comp, flat_, w));
      std::map<std::size_t, sizes> seen;  // tensors of one size have the same sizes
      sizes sum;
      for (const std::size_t n : tensors_) {
        auto it = seen.find(n);
        if (it == seen.end()) it = seen.emplace(n, sizes_of(comp, n, w)).first;
        sum.payload += it->second.payload;
        sum.slot0 += it->second.slot0;
        sum.slot1 += it->second.slot1;
        sum.slot0_rs += it->second.slot0_rs;
      }
      add(name, "per_tensor", w, sum);
    }
  }

  // A summable cast (one phase of n codes): ring all-reduce and reduce-scatter of its buffer.
  template <class Q>
  void summable_cast(const std::string& name, const std::string& composition) {
    codecs.push_back({name, composition, false, "summable"});
    // Feedback only adds a residual to the state; the phase is the same.
    const gc::summable::cast<Q> c({.feedback = false});
    for (const std::uint32_t w : worlds) {
      const auto one = [&](std::size_t n, row& ar, row& rs) {
        const gc::summable::rank_state st = c.make_state(n, w, 0);
        const auto p = c.describe(0, st);
        if (!p) fail("summable describe", p.error());
        ar.payload += p->bytes();
        rs.payload += p->bytes();
        ar.bytes += ring_all_reduce(p->count, p->element_bytes(), w);
        rs.bytes += ring_reduce_scatter(p->count, p->element_bytes(), w);
      };
      row ar{"flat", name, "summable_all_reduce", w}, rs{"flat", name, "summable_reduce_scatter", w};
      one(flat_, ar, rs);
      rows.push_back(ar);
      rows.push_back(rs);
      row tar{"per_tensor", name, "summable_all_reduce", w}, trs{"per_tensor", name, "summable_reduce_scatter", w};
      std::map<std::size_t, std::pair<row, row>> seen;
      for (const std::size_t n : tensors_) {
        auto it = seen.find(n);
        if (it == seen.end()) {
          row a, r;
          one(n, a, r);
          it = seen.emplace(n, std::make_pair(a, r)).first;
        }
        tar.bytes += it->second.first.bytes;
        tar.payload += it->second.first.payload;
        trs.bytes += it->second.second.bytes;
        trs.payload += it->second.second.payload;
      }
      rows.push_back(tar);
      rows.push_back(trs);
    }
  }

  // TAGC (flat layout): the bitmap phase all-reduced (OR), the sketch phase all-reduced or
  // reduce-scattered. The sketch's size is known once the reduced bitmap is received, so each
  // W runs phase 0 of rank 0 on a synthetic gradient and hands back its own bitmap as the
  // reduced one (with sizing::ratio the sketch does not depend on which positions are kept).
  void tagc(const std::string& name, const std::string& composition, const gc::tagc::config& cfg) {
    codecs.push_back({name, composition, true, "summable"});
    std::fprintf(stderr, "%s\n", name.c_str());
    const gc::tagc::codec c(cfg);
    std::vector<float> grad(flat_);
    std::uint64_t x = 0x9e3779b97f4a7c15ull;
    for (float& g : grad) {  // xorshift64*, the sum of two uniforms: a triangular spread of scale 1e-3
      const auto next = [&] {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        return static_cast<float>((x * 0x2545f4914f6cdd1dull) >> 40) * 0x1p-24f;
      };
      g = (next() + next() - 1.0f) * 1e-3f;
    }
    for (const std::uint32_t w : worlds) {
      gc::tagc::state st;
      if (auto s = c.make_state(flat_, w, 0, st); !s) fail("tagc make_state", s);
      const auto p0 = c.describe(0, st);
      if (!p0) fail("tagc describe(0)", p0.error());
      std::vector<std::uint64_t> buf((p0->bytes() + 7) / 8);
      const std::span<std::byte> bytes(reinterpret_cast<std::byte*>(buf.data()), p0->bytes());
      if (auto s = c.encode(0, grad, st, bytes); !s) fail("tagc encode(0)", s);
      if (auto s = c.receive(0, st, bytes, {}); !s) fail("tagc receive(0)", s);
      const auto p1 = c.describe(1, st);
      if (!p1) fail("tagc describe(1)", p1.error());
      const std::uint64_t bitmap = ring_all_reduce(p0->count, p0->element_bytes(), w);
      row ar{"flat", name, "summable_all_reduce", w}, rs{"flat", name, "summable_reduce_scatter", w};
      ar.payload = rs.payload = p0->bytes() + p1->bytes();
      ar.bytes = bitmap + ring_all_reduce(p1->count, p1->element_bytes(), w);
      rs.bytes = bitmap + ring_reduce_scatter(p1->count, p1->element_bytes(), w);
      rows.push_back(ar);
      rows.push_back(rs);
    }
  }

  std::vector<row> rows;
  std::vector<codec_info> codecs;

 private:
  void add(const std::string& name, const char* layout, std::uint32_t w, const sizes& s) {
    row g{layout, name, "gather_all_gather", w, ring_all_gather(s.payload, w), s.payload, 0, 0};
    row rs{layout, name, "sharded_reduce_scatter", w, all_to_all(s.slot0_rs, w), 0, s.slot0_rs, 0};
    row ar{layout, name, "sharded_all_reduce", w, all_to_all(s.slot0, w) + ring_all_gather(s.slot1, w), 0, s.slot0, s.slot1};
    rows.push_back(g);
    rows.push_back(rs);
    rows.push_back(ar);
  }

  std::size_t flat_;
  std::vector<std::size_t> tensors_;
};

template <class S, class Q, bool Feedback>
using registered = gc::compressor<gc::partition::chunks, S, Q, std::conditional_t<Feedback, gc::feedback::residual, gc::feedback::none>>;

template <class S, class Q, bool Feedback>
void add(measurer& m, const char* name, const char* sparsifier, const char* quantizer) {
  using C = registered<S, Q, Feedback>;
  const std::string comp = std::string("compressor<chunks, ") + sparsifier + ", " + quantizer + ", " +
                           (Feedback ? "residual" : "none") + ">";
  m.gather_codec<C>(name, comp, C{});
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (const char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  std::string csv_path, json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if ((a == "--csv" || a == "--json") && i + 1 < argc) {
      (a == "--csv" ? csv_path : json_path) = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--csv FILE] [--json FILE]\n", argv[0]);
      return a == "--help" || a == "-h" ? 0 : 2;
    }
  }

  const gc::layout model = gc::model::gpt2_layout(gc::model::gpt2_small);
  std::vector<std::size_t> tensors;
  for (const auto& t : model.tensors()) tensors.push_back(t.elements());
  const std::size_t n = model.extent();
  measurer m(n, tensors);

  // python/src/codecs.hpp (the codec table): names,
  // compositions, default error feedback.
  add<sp::dense, q::none, false>(m, "fp32", "dense", "none");
  add<sp::dense, q::bf16, false>(m, "bf16", "dense", "bf16");
  add<sp::dense, q::fp16, false>(m, "fp16", "dense", "fp16");
  add<sp::dense, q::fp8<q::fp8_format::e4m3>, false>(m, "fp8_e4m3", "dense", "fp8<e4m3>");
  add<sp::dense, q::fp8<q::fp8_format::e5m2>, false>(m, "fp8_e5m2", "dense", "fp8<e5m2>");
  add<sp::dense, q::int_block<8>, false>(m, "int8", "dense", "int_block<8>");
  add<sp::dense, q::int_block<4>, false>(m, "int4", "dense", "int_block<4>");
  add<sp::dense, q::int_block<2>, true>(m, "int2", "dense", "int_block<2>");
  add<sp::dense, q::qsgd<4>, false>(m, "qsgd", "dense", "qsgd<4>");
  add<sp::dense, q::terngrad, false>(m, "terngrad", "dense", "terngrad");
  add<sp::dense, q::sign, true>(m, "sign", "dense", "sign");
  add<sp::dense, q::natural, false>(m, "natural", "dense", "natural");
  add<sp::dense, q::piecewise<4>, false>(m, "piecewise4", "dense", "piecewise<4>");
  add<sp::topk, q::bf16, true>(m, "topk", "topk", "bf16");
  add<sp::topk, q::none, true>(m, "topk_fp32", "topk", "none");
  add<sp::topk, q::int_block<8>, true>(m, "topk_int8", "topk", "int_block<8>");
  add<sp::threshold, q::bf16, true>(m, "threshold", "threshold", "bf16");
  add<sp::randomk, q::bf16, true>(m, "randomk", "randomk", "bf16");
  m.summable_cast<q::none>("fp32", "summable::cast<none>");
  m.summable_cast<q::bf16>("bf16", "summable::cast<bf16>");
  m.summable_cast<q::fp16>("fp16", "summable::cast<fp16>");
  m.tagc("tagc2", "tagc::codec(preset_tagc2())", gc::tagc::preset_tagc2());

  // The reference: the bf16 ring all-reduce of the flat buffer, per W.
  std::map<std::uint32_t, std::uint64_t> reference;
  for (const row& r : m.rows)
    if (r.layout == "flat" && r.codec == "bf16" && r.path == "summable_all_reduce") reference[r.world] = r.bytes;

  std::ostringstream csv;
  csv << "layout,codec,path,world,bytes,ratio_bf16_all_reduce,payload_bytes,slot_bytes_scatter,slot_bytes_gather\n";
  for (const row& r : m.rows) {
    char ratio[32];
    std::snprintf(ratio, sizeof ratio, "%.6g", static_cast<double>(r.bytes) / static_cast<double>(reference.at(r.world)));
    csv << r.layout << ',' << r.codec << ',' << r.path << ',' << r.world << ',' << r.bytes << ',' << ratio << ',' << r.payload
        << ',' << r.slot0 << ',' << r.slot1 << '\n';
  }

  std::ostringstream js;
  js << "{\n  \"model\": \"GPT-2 small: model::gpt2_layout(gpt2_small), fp32 gradients\",\n";
  js << "  \"elements\": " << n << ",\n  \"tensors\": " << tensors.size() << ",\n";
  js << "  \"gradient_type\": \"f32\",\n  \"frame_header_bytes\": " << gc::frame::header_bytes
     << ",\n  \"slot_head_bytes\": " << gc::sharded::slot_head_bytes << ",\n";
  js << "  \"reference\": {\"layout\": \"flat\", \"codec\": \"bf16\", \"path\": \"summable_all_reduce\"},\n";
  js << "  \"worlds\": [";
  for (std::size_t i = 0; i < std::size(worlds); ++i) js << (i ? ", " : "") << worlds[i];
  js << "],\n  \"codecs\": [\n";
  for (std::size_t i = 0; i < m.codecs.size(); ++i) {
    const codec_info& c = m.codecs[i];
    js << "    {\"name\": \"" << c.name << "\", \"paths\": \"" << c.path_kind << "\", \"composition\": \"" << json_escape(c.composition)
       << "\", \"error_feedback\": " << (c.feedback ? "true" : "false") << "}" << (i + 1 < m.codecs.size() ? "," : "") << "\n";
  }
  js << "  ],\n  \"rows\": [\n";
  for (std::size_t i = 0; i < m.rows.size(); ++i) {
    const row& r = m.rows[i];
    js << "    {\"layout\": \"" << r.layout << "\", \"codec\": \"" << r.codec << "\", \"path\": \"" << r.path
       << "\", \"world\": " << r.world << ", \"bytes\": " << r.bytes << ", \"payload_bytes\": " << r.payload
       << ", \"slot_bytes_scatter\": " << r.slot0 << ", \"slot_bytes_gather\": " << r.slot1 << "}"
       << (i + 1 < m.rows.size() ? "," : "") << "\n";
  }
  js << "  ]\n}\n";

  const auto write = [](const std::string& path, const std::string& text) {
    if (path.empty() || path == "-") {
      std::fwrite(text.data(), 1, text.size(), stdout);
      return;
    }
    std::ofstream f(path, std::ios::binary);
    f << text;
    if (!f) {
      std::fprintf(stderr, "gradcomp_sharded_bytes: cannot write %s\n", path.c_str());
      std::exit(1);
    }
  };
  if (!json_path.empty()) write(json_path, js.str());
  if (!csv_path.empty() || json_path.empty()) write(csv_path, csv.str());
  return 0;
}
