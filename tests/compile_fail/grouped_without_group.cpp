// A quantizer deriving from grouped_quantizer needs a config with the group size; without it
// the message says so, rather than an error inside the base's members.
#include <gradcomp/gradcomp.hpp>

struct no_group_config {
  unsigned levels = 3;
};

struct grouped_but_no_group : gradcomp::quantize::grouped_quantizer<no_group_config> {
  struct meta {};
  static constexpr unsigned bits = 2;
  static constexpr std::uint8_t id = 201;
  static constexpr std::size_t meta_bytes = 0;
  static meta fit(const config&, const float*, std::size_t) { return {}; }
  static code_type encode(const config&, const meta&, float, std::uint32_t) { return 0; }
  static float decode(const config&, const meta&, code_type) { return 0.0f; }
  static void store_meta(const meta&, std::byte*) {}
  static meta load_meta(const std::byte*) { return {}; }
  static gradcomp::status check_meta(const config&, const meta&) { return {}; }
};

gradcomp::compressor<gradcomp::partition::whole, gradcomp::sparsify::dense, grouped_but_no_group, gradcomp::feedback::none> c;
