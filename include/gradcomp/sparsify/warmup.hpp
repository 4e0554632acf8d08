#pragma once
// DGC's density warm-up: sparsify lightly at first and more each epoch, until the final
// density (Lin et al. 2018 use 25%, 6.25%, 1.5625%, 0.4%, 0.1% over the first 4 epochs).
// The trainer advances it: cfg.sparsify.density = schedule.at(epoch); comp.set_config(cfg);

#include <array>
#include <cstddef>
#include <cstdint>

namespace gradcomp::sparsify {

struct density_schedule {
  static constexpr std::size_t max_stages = 8;
  std::array<double, max_stages> densities{0.25, 0.0625, 0.015625, 0.004, 0.001};
  std::size_t stages = 5;               // entries of `densities` in use, 1..max_stages
  std::uint64_t epochs_per_stage = 1;   // > 0

  // Stage epoch / epochs_per_stage, and the last stage from then on.
  double at(std::uint64_t epoch) const {
    const std::size_t used = stages == 0 ? 1 : (stages < max_stages ? stages : max_stages);
    const std::uint64_t stage = epoch / (epochs_per_stage ? epochs_per_stage : 1);
    return densities[stage < used ? static_cast<std::size_t>(stage) : used - 1];
  }
};

}  // namespace gradcomp::sparsify
