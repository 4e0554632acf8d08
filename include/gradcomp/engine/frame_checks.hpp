#pragma once
// The checks of a received frame, in the order both backends report them: header parse
// (frame::parse_header), CRC, header against the receiver (composition::check_frame_header),
// then the sections: indices (ascending, in range) or the random-k seed, each group's
// metadata (Quantizer::check_meta), and, when non-finite values are forbidden, every decoded
// value. The first failing frame of a payload decides; within a frame the first failing
// check. The CPU executor runs check_frame_body as it is; the CUDA backend runs the same
// per-item checks in parallel and resolves them in this order.

#include <cstddef>
#include <cstdint>

#include "../core/bits.hpp"
#include "../core/byteio.hpp"
#include "../core/concepts.hpp"
#include "../core/frame.hpp"
#include "../core/index_codec.hpp"
#include "../core/status.hpp"

namespace gradcomp::engine::detail {

// The sections of frame f (header h already parsed, CRC and header checked) for composition C.
template <class C>
status check_frame_body(const C& comp, const frame::header& h, const std::byte* f) {
  using Q = typename C::quantizer;
  const auto& cfg = comp.get_config();
  if constexpr (C::listed) {
    if (auto s = indices::check(h.indices, f + h.index_offset(), h.index_bytes, h.kept_count, h.dense_count); !s) return s;
  } else if constexpr (C::kind == selection::random) {
    if (load_le<std::uint32_t>(f + h.index_offset()) != cfg.seed || load_le<std::uint32_t>(f + h.index_offset() + 4) != 0)
      return {errc::codec_mismatch, "random-k frame made with another seed"};
  }
  const auto& qc = cfg.quantize;
  for (std::size_t q = 0, groups = C::group_count(qc, h.kept_count); q < groups; ++q)
    if (auto s = Q::check_meta(qc, C::group_meta(h, f, q)); !s) return s;
  if (!cfg.allow_non_finite) {
    const std::byte* values = f + h.value_offset();
    const std::size_t gs = Q::group_size(qc);
    for (std::size_t m = 0; m < h.kept_count; ++m) {
      const auto mt = gs ? C::group_meta(h, f, m / gs) : typename C::meta_type{};
      const auto code = load_code<typename C::code_type, C::code_bits>(values, m);
      if (!is_finite_bits(float_bits(Q::decode(qc, mt, code)))) return {errc::non_finite_value, "frame carries NaN or inf"};
    }
  }
  return {};
}

// A whole frame at the start of `bytes` for a receiver of n elements: parsed, checksummed,
// checked against the composition and its sections checked.
template <class C>
result<frame::header> check_frame(const C& comp, std::span<const std::byte> bytes, std::size_t n) {
  const auto h = frame::parse(bytes);
  if (!h) return h;
  if (auto s = C::check_frame_header(comp.get_config(), comp.codec_id(), *h, n); !s) return s;
  if (auto s = check_frame_body(comp, *h, bytes.data()); !s) return s;
  return h;
}

}  // namespace gradcomp::engine::detail
