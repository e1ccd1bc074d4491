// run.device resolution: auto | cpu | cuda | cuda:N (config/open_settings.h's DeviceSetting), for the commands
// that pick a device (train, generate, config validate).
#pragma once

#include <c10/core/Device.h>

#include <string>

#include "config/open_settings.h"

namespace ft {

// `auto` picks cuda:<local_rank> when a GPU is visible, else the CPU; `cuda` means cuda:<local_rank>.
// Throws ft::ConfigError naming `key` when the GPU asked for is not visible.
c10::Device resolve_device(const DeviceSetting& device, int local_rank, const std::string& key = "run.device");

}  // namespace ft
