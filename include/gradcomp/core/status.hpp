#pragma once
// Error reporting: one code per failure kind, a static message, no exceptions on the hot path.

#include <cstdint>

#include "config.hpp"

namespace gradcomp {

enum class errc : std::uint8_t {
  ok = 0,
  invalid_argument,     // a config value or call argument is out of its domain
  buffer_too_small,     // an output, workspace or payload buffer is smaller than required
  size_mismatch,        // buffer sizes disagree (gradient vs state, frame vs receiver's plan)
  truncated,            // a frame ends before its header or its declared sections do
  bad_magic,            // the bytes do not start with a gradcomp frame
  unsupported_version,  // a frame format version this build cannot read
  bad_header,           // a reserved field, padding byte or header size is not as specified
  codec_mismatch,       // the frame was made by another policy composition or format config
  checksum_mismatch,    // CRC32C of the frame does not match
  count_too_large,      // kept count or section size larger than the dense count allows
  index_out_of_range,   // a sparse index is >= the chunk's element count
  index_not_ascending,  // sparse indices are not strictly ascending
  non_finite_value,     // NaN or infinity where the config forbids it, or as a group scale
  device_error,         // the accelerator runtime reported a failure (detail: its message)
  bad_meta,             // group metadata (a scale, a breakpoint) outside its valid range
};

GRADCOMP_HD constexpr const char* to_string(errc e) {
  switch (e) {
    case errc::ok: return "ok";
    case errc::invalid_argument: return "invalid argument";
    case errc::buffer_too_small: return "buffer too small";
    case errc::size_mismatch: return "size mismatch";
    case errc::truncated: return "truncated frame";
    case errc::bad_magic: return "bad magic: not a gradcomp frame";
    case errc::unsupported_version: return "unsupported frame format version";
    case errc::bad_header: return "malformed frame header";
    case errc::codec_mismatch: return "codec mismatch: frame made by a different compressor";
    case errc::checksum_mismatch: return "CRC32C checksum mismatch";
    case errc::count_too_large: return "count too large";
    case errc::index_out_of_range: return "sparse index out of range";
    case errc::index_not_ascending: return "sparse indices not strictly ascending";
    case errc::non_finite_value: return "non-finite value";
    case errc::bad_meta: return "bad group metadata";
    case errc::device_error: return "device runtime error";
  }
  return "unknown error";
}

// The outcome of a call: a code and a static string saying which check failed.
class [[nodiscard]] status {
 public:
  constexpr status() = default;  // defaulted: host and device implicitly (nvcc warns on an annotation here)
  GRADCOMP_HD constexpr status(errc code, const char* detail) : code_(code), detail_(detail) {}
  GRADCOMP_HD constexpr bool ok() const { return code_ == errc::ok; }
  GRADCOMP_HD constexpr explicit operator bool() const { return ok(); }
  GRADCOMP_HD constexpr errc code() const { return code_; }
  // What failed, e.g. "kept count exceeds dense count"; the category is to_string(code()).
  GRADCOMP_HD constexpr const char* detail() const { return detail_; }
  GRADCOMP_HD friend constexpr bool operator==(const status& s, errc e) { return s.code_ == e; }

 private:
  errc code_ = errc::ok;
  const char* detail_ = "";
};

// A value or the status explaining why there is none.
template <class T>
class [[nodiscard]] result {
 public:
  GRADCOMP_HD constexpr result(T value) : value_(value) {}
  GRADCOMP_HD constexpr result(status s) : status_(s) {}
  GRADCOMP_HD constexpr bool ok() const { return status_.ok(); }
  GRADCOMP_HD constexpr explicit operator bool() const { return ok(); }
  GRADCOMP_HD constexpr const status& error() const { return status_; }
  GRADCOMP_HD constexpr errc code() const { return status_.code(); }
  // Precondition: ok().
  GRADCOMP_HD constexpr const T& value() const { return value_; }
  GRADCOMP_HD constexpr const T& operator*() const { return value_; }
  GRADCOMP_HD constexpr const T* operator->() const { return &value_; }

 private:
  T value_{};
  status status_{};
};

}  // namespace gradcomp
