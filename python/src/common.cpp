// Errors, option conversions and the codec registry.
#include <algorithm>

#include "codec.hpp"

namespace gradcomp_py {

const char* errc_name(gc::errc e) {
  switch (e) {
    case gc::errc::ok: return "ok";
    case gc::errc::invalid_argument: return "invalid_argument";
    case gc::errc::buffer_too_small: return "buffer_too_small";
    case gc::errc::size_mismatch: return "size_mismatch";
    case gc::errc::truncated: return "truncated";
    case gc::errc::bad_magic: return "bad_magic";
    case gc::errc::unsupported_version: return "unsupported_version";
    case gc::errc::bad_header: return "bad_header";
    case gc::errc::codec_mismatch: return "codec_mismatch";
    case gc::errc::checksum_mismatch: return "checksum_mismatch";
    case gc::errc::count_too_large: return "count_too_large";
    case gc::errc::index_out_of_range: return "index_out_of_range";
    case gc::errc::index_not_ascending: return "index_not_ascending";
    case gc::errc::non_finite_value: return "non_finite_value";
    case gc::errc::device_error: return "device_error";
    case gc::errc::bad_meta: return "bad_meta";
  }
  return "unknown";
}

void raise(const gc::status& s) {
  throw codec_error(s.code(), std::string(gc::to_string(s.code())) + ": " + s.detail());
}
void raise(gc::errc code, const std::string& detail) {
  throw codec_error(code, std::string(gc::to_string(code)) + ": " + detail);
}

void bad_option(const std::string& key, const char* why) {
  throw codec_error(gc::errc::invalid_argument, "option '" + key + "' " + why);
}

double as_double(const std::string& key, const option_value& v) {
  if (const auto* d = std::get_if<double>(&v)) return *d;
  if (const auto* i = std::get_if<long long>(&v)) return static_cast<double>(*i);
  bad_option(key, "must be a number");
}
long long as_int(const std::string& key, const option_value& v) {
  if (const auto* i = std::get_if<long long>(&v)) {
    if (*i < 0) bad_option(key, "must not be negative");
    return *i;
  }
  bad_option(key, "must be an integer");
}
bool as_bool(const std::string& key, const option_value& v) {
  if (const auto* b = std::get_if<bool>(&v)) return *b;
  bad_option(key, "must be True or False");
}
std::string as_string(const std::string& key, const option_value& v) {
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  bad_option(key, "must be a string");
}
gc::quantize::rounding as_rounding(const std::string& key, const option_value& v) {
  const std::string s = as_string(key, v);
  if (s == "nearest") return gc::quantize::rounding::nearest;
  if (s == "stochastic") return gc::quantize::rounding::stochastic;
  bad_option(key, "must be 'nearest' or 'stochastic'");
}
gc::sparsify::threshold::rule as_rule(const std::string& key, const option_value& v) {
  const std::string s = as_string(key, v);
  if (s == "dgc") return gc::sparsify::threshold::rule::dgc;
  if (s == "tagc") return gc::sparsify::threshold::rule::tagc;
  bad_option(key, "must be 'dgc' or 'tagc'");
}

options acctfm_options(const options& opts) {
  if (const auto it = opts.find("error_feedback"); it != opts.end() && as_bool("error_feedback", it->second))
    bad_option("error_feedback", "is not available: activations are not re-sent");
  const auto cols = opts.find("cols");
  if (cols == opts.end()) bad_option("cols", "is required (the row length: hidden size)");
  options with = opts;
  if (!with.contains("chunk_bytes")) with["chunk_bytes"] = 256 * as_int("cols", cols->second) * 4;
  return with;
}

gather_block gather_layout(const codec& c, std::span<const std::size_t> sizes, std::span<const gc::dtype> types,
                           std::span<const std::size_t> slot_bytes, std::size_t small_count, bool cuda) {
  if (types.size() != sizes.size()) raise(gc::errc::invalid_argument, "gather_layout: one element type per frame");
  const auto align8 = [](std::size_t b) { return (b + 7) / 8 * 8; };
  gather_block g;
  std::size_t at = align8(4 * sizes.size());
  for (std::size_t j = 0; j < sizes.size(); ++j) {
    g.offsets.push_back(at);
    g.caps.push_back(c.max_payload_bytes(sizes[j], types[j]));
    at = align8(at + g.caps.back());
  }
  for (const std::size_t b : slot_bytes) {
    g.slot_offsets.push_back(at);
    at = align8(at + b);
  }
  g.small_offset = at;
  g.bytes = at + 4 * small_count;
  if (cuda || !slot_bytes.empty()) g.bytes = align8(g.bytes);
  return g;
}

const std::vector<entry>& registry() {
  static const std::vector<entry> all = [] {
    std::vector<entry> r;
    add_codecs<codec_slice::dense>(r);
    add_codecs<codec_slice::grouped>(r);
    add_codecs<codec_slice::sparse>(r);
    return r;
  }();
  return all;
}

std::unique_ptr<codec> make_codec(const std::string& name, const options& opts) {
  const auto& r = registry();
  const auto it = std::find_if(r.begin(), r.end(), [&](const entry& e) { return e.name == name; });
  if (it == r.end()) {
    std::string known;
    for (const entry& e : r) known += (known.empty() ? "" : ", ") + e.name;
    throw codec_error(gc::errc::invalid_argument, "unknown codec '" + name + "'; known: " + known);
  }
  return it->make(opts);
}

}  // namespace gradcomp_py
