#pragma once
// Per-chunk telemetry: what compression did to each chunk (kept count, bytes, ratio, residual
// norm, relative error, time), for a trainer to log. Opt-in: the calls below take a
// `telemetry*`, and with nullptr they are the plain compressor calls (one pointer test per
// chunk). With it, each chunk is compressed with compress_chunk and timed alone, and, when
// `errors` is set, its frame is decoded again to measure the error (one decode per chunk,
// into a scratch buffer the size of the tensor, kept in the telemetry object).

#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "../core/frame.hpp"
#include "layout.hpp"
#include "../core/numeric.hpp"
#include "../core/status.hpp"
#include "../state.hpp"

namespace gradcomp::model {

struct chunk_stats {
  std::size_t tensor = 0;       // layout index (0 for a lone buffer)
  role tensor_role = role::other;
  std::size_t slot = 0;         // router slot (0 for a lone compressor)
  std::uint32_t chunk = 0;      // chunk id within the tensor
  std::uint32_t codec_id = 0;
  std::size_t elements = 0;     // dense elements of the chunk
  std::size_t kept = 0;         // values sent
  std::size_t bytes = 0;        // frame bytes, header included
  double ratio = 0;             // dense input bytes (elements x sizeof(T)) / frame bytes
  double gradient_norm = 0;     // ||g|| over the chunk
  double residual_norm = 0;     // ||e|| over the chunk after this step (0 without a residual)
  double rel_error = 0;         // ||decoded - g|| / ||g|| (0 when both are 0); 0 unless errors
  double seconds = 0;           // compress_chunk's wall time
};

struct telemetry {
  bool errors = true;              // decode each frame to measure rel_error
  std::vector<chunk_stats> chunks;  // one entry per compressed chunk, appended
  std::vector<float> scratch;       // decode buffer, grown to the largest tensor seen
  void clear() { chunks.clear(); }
};

// Chunk i of grad: compress_chunk, recorded in *tel when tel is not null.
template <class C, gradient_element T>
result<std::size_t> observed_compress_chunk(const C& comp, std::size_t i, std::span<const T> grad, state& st,
                                            std::span<std::byte> frame, telemetry* tel, std::size_t tensor = 0,
                                            role r = role::other, std::size_t slot = 0) {
  if (!tel) return comp.template compress_chunk<T>(i, grad, st, frame);
  const auto t0 = std::chrono::steady_clock::now();
  const auto written = comp.template compress_chunk<T>(i, grad, st, frame);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!written) return written;
  const auto h = frame::parse_header(frame.data(), *written);
  chunk_stats s;
  s.tensor = tensor;
  s.tensor_role = r;
  s.slot = slot;
  s.chunk = h->chunk_id;
  s.codec_id = h->codec_id;
  s.elements = h->dense_count;
  s.kept = h->kept_count;
  s.bytes = *written;
  s.ratio = static_cast<double>(h->dense_count * sizeof(T)) / static_cast<double>(*written);
  s.seconds = seconds;
  const std::size_t at = h->element_offset;
  double g2 = 0, e2 = 0, d2 = 0;
  for (std::size_t j = at; j < at + h->dense_count; ++j) g2 += std::pow(static_cast<double>(to_float(grad[j])), 2);
  if (!st.residual.empty())
    for (std::size_t j = at; j < at + h->dense_count; ++j) e2 += std::pow(static_cast<double>(st.residual[j]), 2);
  if (tel->errors) {
    if (tel->scratch.size() < grad.size()) tel->scratch.resize(grad.size());
    const std::span<float> out(tel->scratch.data(), grad.size());
    if (auto d = comp.template decompress<float>(std::span<const std::byte>(frame.data(), *written), out); !d) return d;
    for (std::size_t j = at; j < at + h->dense_count; ++j)
      d2 += std::pow(static_cast<double>(out[j]) - static_cast<double>(to_float(grad[j])), 2);
    s.rel_error = g2 > 0 ? std::sqrt(d2 / g2) : (d2 > 0 ? INFINITY : 0.0);
  }
  s.gradient_norm = std::sqrt(g2);
  s.residual_norm = std::sqrt(e2);
  tel->chunks.push_back(s);
  return written;
}

// A whole buffer, as compress() does (frames back to back, then finish_step), chunk by chunk
// when observed. With tel null it is compress() itself.
template <class C, gradient_element T>
result<std::size_t> observed_compress(const C& comp, std::span<const T> grad, state& st, std::span<std::byte> payload,
                                      telemetry* tel, std::size_t tensor = 0, role r = role::other,
                                      std::size_t slot = 0) {
  if (!tel) return comp.template compress<T>(grad, st, payload);
  if (payload.size() < comp.template max_payload_bytes<T>(grad.size()))
    return status{errc::buffer_too_small, "payload smaller than max_payload_bytes()"};
  // compress() checks every chunk before it writes; so must this, for the per-chunk check
  // that could fail after earlier chunks have advanced the state.
  if (!comp.get_config().allow_non_finite)
    for (const T& x : grad)
      if (!is_finite_bits(float_bits(to_float(x)))) return status{errc::non_finite_value, "gradient holds NaN or inf"};
  std::size_t written = 0;
  for (std::size_t i = 0, c = comp.template chunk_count<T>(grad.size()); i < c; ++i) {
    const auto w = observed_compress_chunk<C, T>(comp, i, grad, st, payload.subspan(written), tel, tensor, r, slot);
    if (!w) return w;
    written += *w;
  }
  comp.finish_step(st);
  return written;
}

}  // namespace gradcomp::model
