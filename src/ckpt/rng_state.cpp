#include "ckpt/rng_state.h"

#include <ATen/Context.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include <mutex>

#include "util/error.h"
#include "util/fmt.h"

namespace ft::ckpt {
namespace {

int cuda_devices() {
#ifdef FT_WITH_CUDA
  return at::hasCUDA() ? static_cast<int>(at::detail::getCUDAHooks().deviceCount()) : 0;
#else
  return 0;
#endif
}

at::Tensor get_state(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state().clone();
}

void set_state(at::Generator gen, const at::Tensor& state, const std::string& key) {
  if (state.scalar_type() != at::kByte || state.dim() != 1)
    throw Error("RNG state '" + key + "' is not a 1-D uint8 tensor", "the checkpoint's rng state file is damaged");
  std::lock_guard<std::mutex> lock(gen.mutex());
  try {
    gen.set_state(state.contiguous());
  } catch (const c10::Error& e) {
    throw Error("cannot restore RNG state '" + key + "': " + e.what_without_backtrace(),
                "the checkpoint was written by an incompatible LibTorch build");
  }
}

}  // namespace

std::map<std::string, at::Tensor> capture_rng_states() {
  std::map<std::string, at::Tensor> out;
  out["cpu"] = get_state(at::detail::getDefaultCPUGenerator());
  for (int i = 0; i < cuda_devices(); ++i) {
    const auto dev = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(i));
    out["cuda:" + std::to_string(i)] = get_state(at::globalContext().defaultGenerator(dev));
  }
  return out;
}

void restore_rng_states(const std::map<std::string, at::Tensor>& states) {
  auto cpu = states.find("cpu");
  if (cpu == states.end()) throw Error("RNG states lack 'cpu'", "the checkpoint's rng state file is damaged");
  set_state(at::detail::getDefaultCPUGenerator(), cpu->second, "cpu");
  const int n = cuda_devices();
  for (const auto& [key, state] : states) {
    if (key == "cpu") continue;
    const std::string digits = key.rfind("cuda:", 0) == 0 ? key.substr(5) : "";
    if (digits.empty() || digits.size() > 4 || digits.find_first_not_of("0123456789") != std::string::npos)
      throw Error("unknown RNG state '" + key + "'", "expected cpu or cuda:N");
    const int index = std::stoi(digits);
    if (index >= n) {
      FT_LOG_WARN("RNG state '{}' not restored: only {} CUDA device(s) visible", key, n);
      continue;
    }
    set_state(at::globalContext().defaultGenerator(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index))),
              state, key);
  }
  for (int i = 0; i < n; ++i)
    if (!states.count("cuda:" + std::to_string(i)))
      FT_LOG_WARN("no saved RNG state for cuda:{}; its generator keeps its current state", i);
}

}  // namespace ft::ckpt
