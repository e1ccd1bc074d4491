// run.device resolution: auto | cpu | cuda | cuda:N.
#pragma once

#include <c10/core/Device.h>

#include <string>

namespace ft {

// `auto` picks cuda:<local_rank> when a GPU is visible, else the CPU; `cuda` means cuda:<local_rank>.
// Throws ft::ConfigError for an unknown spec or a GPU index that is not visible.
c10::Device resolve_device(const std::string& spec, int local_rank);

}  // namespace ft
