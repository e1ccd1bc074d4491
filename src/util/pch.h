// Precompiled for every LibTorch target (src/CMakeLists.txt): the heavy headers most translation units use.
// Sources still include what they use; this file only makes that cheaper.
#pragma once

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <vector>
