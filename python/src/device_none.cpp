// The device side of a CPU-only build of the extension: every entry point says so.

#include "device.hpp"

namespace gradcomp_py {

namespace {
[[noreturn]] void no_cuda() { raise(gc::errc::device_error, "this build of gradcomp has no CUDA support"); }
}  // namespace

std::shared_ptr<std::byte> device_alloc(int, std::size_t) { no_cuda(); }

struct device_context::impl {};
device_context::device_context() = default;
device_context::~device_context() = default;
device_context::slot device_context::get(device_stream, std::size_t) { no_cuda(); }
void device_context::latch(device_stream) { no_cuda(); }
void device_context::check() {}

std::unique_ptr<summable_state> make_device_tagc(const gc::tagc::config&, std::size_t, std::uint32_t, std::uint32_t,
                                                 device_stream) {
  no_cuda();
}

std::unique_ptr<summable_state> make_device_cast(gc::summable::wire_type, bool, std::unique_ptr<summable_state>,
                                                 device_stream) {
  no_cuda();
}

cuda_build cuda_build_info() { return {}; }
void cuda_check_device(int) { no_cuda(); }

}  // namespace gradcomp_py
