#pragma once
// Frame checks for callers that decode frames of several compressors or regions in one call
// (router, gathered payloads): each frame is checked in full against the compressor and
// buffer it belongs to, for every frame of the call, before any decoder writes, so that a
// bad frame anywhere leaves every output untouched. The checks are the compressor's own
// (docs/wire-format.md, "Decoding"), made through its public pieces: parse with CRC, header
// against the codec and the chunk plan, index section, group metadata, and non-finite
// values where the config forbids them. The compressor checks again when it decodes.

#include <cstddef>
#include <cstdint>
#include <span>

#include "../core/byteio.hpp"
#include "../core/frame.hpp"
#include "../core/index_codec.hpp"
#include "../core/numeric.hpp"
#include "../core/status.hpp"

namespace gradcomp::transformer {

// Checks the frame at the start of `bytes` (more may follow) as comp would decode it into a
// buffer of n elements; returns its header.
template <class C>
result<frame::header> check_frame(const C& comp, std::span<const std::byte> bytes, std::size_t n) {
  using S = typename C::sparsifier;
  using Q = typename C::quantizer;
  const auto h = frame::parse(bytes);
  if (!h) return h;
  const auto& cfg = comp.get_config();
  if (auto s = C::check_frame_header(cfg, comp.codec_id(), *h, n); !s) return s;
  const std::byte* f = bytes.data();
  if constexpr (!S::is_dense) {
    if constexpr (S::kind == selection::random) {
      if (load_le<std::uint32_t>(f + h->index_offset()) != cfg.seed || load_le<std::uint32_t>(f + h->index_offset() + 4) != 0)
        return status{errc::codec_mismatch, "random-k frame made with another seed"};
    } else if (auto s = indices::check(h->indices, f + h->index_offset(), h->index_bytes, h->kept_count, h->dense_count);
               !s) {
      return s;
    }
  }
  const auto& qc = cfg.quantize;
  const std::size_t groups = C::group_count(qc, h->kept_count), gs = Q::group_size(qc);
  for (std::size_t q = 0; q < groups; ++q)
    if (auto s = Q::check_meta(qc, Q::load_meta(f + h->meta_offset() + q * Q::meta_bytes)); !s) return s;
  if (!cfg.allow_non_finite) {
    const std::byte* values = f + h->value_offset();
    for (std::size_t m = 0; m < h->kept_count; ++m) {
      const typename Q::meta mt = gs ? Q::load_meta(f + h->meta_offset() + m / gs * Q::meta_bytes) : typename Q::meta{};
      const auto code = load_code<typename Q::code_type, Q::bits>(values, m);
      if (!is_finite_bits(float_bits(Q::decode(qc, mt, code)))) return status{errc::non_finite_value, "frame carries NaN or inf"};
    }
  }
  return h;
}

// Checks every frame of a payload (frames back to back) for comp and a buffer of n elements.
template <class C>
status check_frames(const C& comp, std::span<const std::byte> payload, std::size_t n) {
  if (payload.empty()) return {errc::truncated, "empty payload"};
  for (std::size_t at = 0; at < payload.size();) {
    const auto h = check_frame(comp, payload.subspan(at), n);
    if (!h) return h.error();
    at += h->frame_bytes();
  }
  return {};
}

}  // namespace gradcomp::transformer
