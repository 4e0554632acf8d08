#pragma once
// The bindings' backend-neutral interfaces: the bound functions call these, whichever backend
// holds a state. Three families, each implemented once for the CPU and once for a CUDA device:
//
//   codec_state + codec_backend     a Compressor's State and the calls that run it
//                                   (CPU: codec.hpp; device: device_impl.cuh)
//   sharded_state (+ sharded_codec)  one rank's state of the sharded path
//                                   (CPU: sharded.hpp; device: device_impl.cuh)
//   summable_state (+ summable_codec) one rank's state of a summable codec with phases
//                                   (CPU: summable_codecs.cpp; device: device_phases.cu)
//
// The device implementations live in the .cu files, the only ones that see CUDA headers (a
// build without CUDA links device_none.cpp instead). A device state's calls are queued on the
// caller's stream (device_stream) and do not wait for the device unless said so; what the device
// finds in the data goes to the state's error word (take_error). A CPU state ignores the stream
// and raises at once. A device state keeps a CPU state of its family as its host copy, so that
// its checkpoints are the CPU's bytes.
//
// Sharded and summable calls take the codec of the call: a CPU state runs that codec (the
// bindings have checked that it made the state); a device state runs the kernels it was made with.

#include <gradcomp/core/status.hpp>
#include <gradcomp/sharded.hpp>
#include <gradcomp/summable/phases.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace gradcomp_py {

namespace gc = gradcomp;

// A failed gradcomp call; the bindings raise it as gradcomp.Error with `.code`.
struct codec_error : std::runtime_error {
  gc::errc code;
  codec_error(gc::errc c, const std::string& what) : std::runtime_error(what), code(c) {}
};
const char* errc_name(gc::errc e);
[[noreturn]] void raise(const gc::status& s);
[[noreturn]] void raise(gc::errc code, const std::string& detail);
inline void check(const gc::status& s) {
  if (!s) raise(s);
}

// Where a call runs: a CUDA device and its stream (a cudaStream_t), or the CPU (device -1).
struct device_stream {
  int device = -1;
  void* stream = nullptr;
};

inline std::string device_name(int device) { return device < 0 ? "cpu" : "cuda:" + std::to_string(device); }

// A state's float32 array, no copy: `size` values in host memory (device -1) or on a CUDA device.
struct float_block {
  float* data = nullptr;
  std::size_t size = 0;
  int device = -1;
};

// What every state tells: where it lives, the device memory it holds, its error word. The
// defaults are a CPU state's answers.
class backend_state {
 public:
  virtual ~backend_state() = default;
  virtual int device() const { return -1; }
  virtual std::size_t device_bytes() const { return 0; }  // state, workspace and error word
  // The first error the device latched since the last call, then cleared (waits for s).
  virtual std::uint32_t take_error(device_stream) { return 0; }
};

// A CPU state's library struct H, which a device state's host copy downloads into and uploads from.
template <class H>
class host_image {
 public:
  virtual H& host() = 0;

 protected:
  ~host_image() = default;
};
template <class H>
H& image_of(backend_state& s) {
  auto* p = dynamic_cast<host_image<H>*>(&s);
  if (p == nullptr) raise(gc::errc::invalid_argument, "a device state's host copy must be a CPU state");
  return p->host();
}

// --- A Compressor's State, and the Compressor's calls on one backend.

class codec_state : public backend_state {
 public:
  codec_state(std::uint32_t id, std::string name) : codec_id(id), codec(std::move(name)) {}
  const std::uint32_t codec_id;  // the maker's: checkpoints carry it
  const std::string codec;       // the maker's name, for messages and repr

  virtual std::size_t size() const = 0;
  // Synchronous on a device.
  virtual std::uint64_t step(device_stream s) = 0;
  virtual void set_step(std::uint64_t v, device_stream s) = 0;
  virtual float_block residual() = 0;    // `size` values, none without error feedback
  virtual float_block thresholds() = 0;  // host memory: each chunk's last threshold (threshold codecs)
  // The checkpoint; a restore leaves the state unchanged unless the bytes load (synchronous).
  virtual std::vector<std::byte> checkpoint(device_stream s) = 0;
  virtual void load_checkpoint(std::span<const std::byte> in, device_stream s) = 0;
};

class cpu_codec_state;  // codec.hpp

// A Compressor on the CPU (codec_impl<C>) or on a CUDA device (device_codec_impl<C>: calls
// queued on s, errors found in the data kept in the Compressor's device_context).
class codec_backend {
 public:
  virtual ~codec_backend() = default;
  // The state on this backend of a CPU state made by the codec (a device state keeps it as its
  // host copy).
  virtual std::unique_ptr<codec_state> make_state(std::unique_ptr<cpu_codec_state> host, device_stream s) const = 0;
  // Raises unless this backend runs `st` for n elements (a device state's memory is laid out
  // for one composition and size).
  virtual void check_state(codec_state& st, std::size_t n) const = 0;
  // Returns the payload bytes written.
  virtual std::size_t compress(const void* grad, std::size_t n, gc::dtype t, codec_state& st, std::span<std::byte> out,
                               device_stream s) const = 0;
  virtual void decode(std::span<const std::byte> payload, void* out, std::size_t n, gc::dtype t, bool add,
                      device_stream s) const = 0;
  // decode's checks of a payload for n elements, nothing written: the CPU checks every payload of
  // a sum before adding any; a device checks each as it adds it, in stream order (nothing here).
  virtual void check_payload(std::span<const std::byte> payload, std::size_t n) const = 0;
  // Summable casts only: codes = encode(src * scale), and dst (+)= decode(codes).
  virtual void encode_cast(const float* src, void* codes, std::size_t n, float scale, device_stream s) const = 0;
  virtual void decode_cast(const void* codes, float* dst, std::size_t n, bool add, device_stream s) const = 0;
};

// --- The sharded path (gradcomp/sharded.hpp).

class sharded_state;

// One compressor's sharded codec (sharded_impl<C>, sharded.hpp): the codec of a call.
class sharded_codec {
 public:
  virtual ~sharded_codec() = default;
  virtual gc::sharded::mode get_mode() const = 0;
  virtual std::size_t phase_count() const = 0;
  // A CPU state.
  virtual std::unique_ptr<sharded_state> make_state(std::size_t n, std::uint32_t world, std::uint32_t rank) const = 0;
  // The state on s's CUDA device of a CPU state of this codec, kept as its host copy; null where
  // the composition has no GPU kernels or the build no CUDA.
  virtual std::unique_ptr<sharded_state> to_device(std::unique_ptr<sharded_state> host, device_stream s) const = 0;
  // Phase k for gradients of n elements at `world` ranks, without a state.
  virtual gc::sharded::phase describe(std::size_t k, std::size_t n, std::uint32_t world) const = 0;
};

// A device state's receive() latches its error word: a bad slot makes the rest of that call do
// nothing (output untouched), but the step advances, as the host cannot know.
class sharded_state : public backend_state {
 public:
  gc::dtype grad_type = gc::dtype::f32;  // the gradients' element type
  std::string identity;                  // the codec (name, id, mode) that made it

  virtual std::size_t size() const = 0;
  virtual std::uint32_t world() const = 0;
  virtual std::uint32_t rank() const = 0;
  virtual std::uint64_t step(device_stream s) const = 0;  // synchronous on a device
  virtual gc::sharded::stage at() const = 0;
  virtual gc::sharded::phase describe(const sharded_codec& c, std::size_t k) const = 0;
  // What this rank still owes destination shard j (sender error feedback; none without).
  virtual float_block sender_residual(std::uint32_t j) = 0;
  // The owner's residual of its reduced shard (all-reduce mode with feedback; else none).
  virtual float_block owner_residual() = 0;
  // k == 0: grad holds n values of grad_type. k == 1: grad unused.
  virtual void encode(const sharded_codec& c, std::size_t k, const void* grad, std::size_t n, std::span<std::byte> out,
                      device_stream s) = 0;
  // out: n values of type t (n == 0: none, receive(0) in all-reduce mode).
  virtual void receive(const sharded_codec& c, std::size_t k, std::span<const std::byte> in, void* out, std::size_t n,
                       gc::dtype t, device_stream s) = 0;
  virtual std::vector<std::byte> checkpoint(const sharded_codec& c, device_stream s) = 0;
  virtual void load_checkpoint(const sharded_codec& c, std::span<const std::byte> in, device_stream s) = 0;
  virtual void restore_elastic(const sharded_codec& c, std::span<const std::span<const std::byte>> saved,
                               device_stream s) = 0;
};

// --- Summable codecs with phases (gradcomp/summable/phases.hpp): TAGC-2 and the summable casts.

class summable_state;

// A PhaseCodec's codec (summable_codecs.cpp): the codec of a call.
class summable_codec {
 public:
  virtual ~summable_codec() = default;
  virtual std::size_t phase_count() const = 0;
  // A fresh state on s's backend.
  virtual std::unique_ptr<summable_state> make_state(std::size_t n, std::uint32_t world, std::uint32_t rank,
                                                     device_stream s) const = 0;
};

// A device state's step finds bad reduced buffers on the device: that step's later calls then do
// nothing, and the error waits in the state's error word.
class summable_state : public backend_state {
 public:
  // The step, and TAGC's sketch rows of this step and the last peel (zeros for casts).
  struct report {
    std::uint64_t step = 0;
    std::uint32_t rows = 0, items = 0, peeled = 0, rounds = 0;
  };

  virtual std::size_t size() const = 0;
  virtual std::uint32_t world() const = 0;
  virtual std::uint32_t rank() const = 0;
  // The report as the host knows it without waiting (none for a TAGC state on a device).
  virtual std::optional<report> known() const = 0;
  // The report; synchronous on a device.
  virtual report read(device_stream) const { return *known(); }
  virtual gc::summable::phase describe(const summable_codec& c, std::size_t k) const = 0;
  virtual std::size_t max_phase_bytes(const summable_codec& c) const = 0;
  virtual float_block residual() = 0;    // `size` values, none without feedback
  virtual float_block thresholds() = 0;  // TAGC: each shard's last threshold; none for casts
  virtual void encode(const summable_codec& c, std::size_t k, std::span<const float> grad, std::span<std::byte> out,
                      device_stream s) = 0;
  virtual void receive(const summable_codec& c, std::size_t k, std::span<const std::byte> in, std::span<float> out,
                       device_stream s) = 0;
  virtual void finish_step(const summable_codec& c, device_stream s) = 0;
  // TAGC only (casts keep no state across steps).
  virtual std::vector<std::byte> checkpoint(const summable_codec& c, device_stream s) = 0;
  virtual void load_checkpoint(const summable_codec& c, std::span<const std::byte> in, device_stream s) = 0;
  virtual void restore_elastic(const summable_codec& c, std::span<const std::span<const std::byte>> saved,
                               device_stream s) = 0;
};

}  // namespace gradcomp_py
