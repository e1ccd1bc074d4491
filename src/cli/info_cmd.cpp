// `finetune info [--json]`: versions of finetune and its libraries, the visible GPUs, build type and flags.
#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/version.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "model/args.h"
#include "util/build_info.h"

#ifdef FT_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/cuda/nccl.h>
#endif

namespace ft::cli {
namespace {

#ifdef FT_WITH_CUDA
constexpr bool kCudaPaths = true;
#else
constexpr bool kCudaPaths = false;
#endif

std::string version_string(int v, int major_div, int minor_div, int minor_mod) {
  return std::to_string(v / major_div) + "." + std::to_string((v / minor_div) % minor_mod);
}

nlohmann::json collect_info() {
  nlohmann::json info;
  info["finetune"] = {{"version", build::kVersion}, {"git", build::kGitDescribe}};
  info["libtorch"] = TORCH_VERSION;
  info["build"] = {{"type", build::kBuildType},
                   {"compiler", build::kCompiler},
                   {"flags", build::kCxxFlags},
                   {"cuda_paths", kCudaPaths}};
  info["cuda_runtime"] = nullptr;
  info["cudnn"] = nullptr;
  info["nccl"] = nullptr;
  info["gpus"] = nlohmann::json::array();
  info["model_families"] = nlohmann::json::array();
  for (const auto& f : model::families()) {
    info["model_families"].push_back(
        {{"model_type", f.model_type}, {"architecture", f.architecture}, {"releases", f.releases}});
  }
#ifdef FT_WITH_CUDA
  int runtime = 0;
  if (cudaRuntimeGetVersion(&runtime) == cudaSuccess) info["cuda_runtime"] = version_string(runtime, 1000, 10, 100);
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0)
    info["cuda_driver"] = version_string(driver, 1000, 10, 100);
  const auto& hooks = at::detail::getCUDAHooks();
  if (hooks.hasCuDNN()) {
    const long cudnn = hooks.versionCuDNN();
    info["cudnn"] =
        std::to_string(cudnn / 10000) + "." + std::to_string((cudnn / 100) % 100) + "." + std::to_string(cudnn % 100);
  }
  const std::uint64_t nccl = torch::cuda::nccl::version();  // major << 32 | minor << 16 | patch
  info["nccl"] =
      std::to_string(nccl >> 32) + "." + std::to_string((nccl >> 16) & 0xffff) + "." + std::to_string(nccl & 0xffff);
  if (at::hasCUDA()) {
    for (int i = 0; i < static_cast<int>(at::cuda::device_count()); ++i) {
      const cudaDeviceProp* prop = at::cuda::getDeviceProperties(i);
      info["gpus"].push_back({{"index", i},
                              {"name", prop->name},
                              {"memory_gib", static_cast<double>(prop->totalGlobalMem) / (1 << 30)},
                              {"compute_capability", std::to_string(prop->major) + "." + std::to_string(prop->minor)}});
    }
  }
#endif
  return info;
}

void print_text(const nlohmann::json& info) {
  auto show = [](const nlohmann::json& v) { return v.is_null() ? std::string("not available") : v.get<std::string>(); };
  std::cout << "finetune      " << info["finetune"]["version"].get<std::string>() << " ("
            << info["finetune"]["git"].get<std::string>() << ")\n"
            << "LibTorch      " << info["libtorch"].get<std::string>() << "\n"
            << "CUDA runtime  " << show(info["cuda_runtime"]) << "\n";
  if (info.contains("cuda_driver")) std::cout << "CUDA driver   " << show(info["cuda_driver"]) << "\n";
  std::cout << "cuDNN         " << show(info["cudnn"]) << "\n"
            << "NCCL          " << show(info["nccl"]) << "\n"
            << "build         " << info["build"]["type"].get<std::string>() << ", "
            << info["build"]["compiler"].get<std::string>() << ", flags: " << info["build"]["flags"].get<std::string>()
            << "\n";
  std::cout << "models        " << model::families_text() << "\n";
  if (info["gpus"].empty()) {
    std::cout << "GPUs          none visible (training runs on the CPU)\n";
  }
  for (const auto& gpu : info["gpus"]) {
    std::cout << "GPU " << gpu["index"].get<int>() << "         " << gpu["name"].get<std::string>() << ", "
              << static_cast<int>(gpu["memory_gib"].get<double>()) << " GiB, compute capability "
              << gpu["compute_capability"].get<std::string>() << "\n";
  }
}

}  // namespace

void add_info(CLI::App& app, const Globals& /*globals*/, int& exit_code) {
  auto* sub = app.add_subcommand("info", "Show versions of finetune, LibTorch, CUDA, cuDNN, NCCL and the GPUs");
  sub->footer("Example:\n  finetune info --json");
  auto json = std::make_shared<bool>(false);
  sub->add_flag("--json", *json, "Print one JSON object");
  sub->callback([json, &exit_code] {
    const auto info = collect_info();
    if (*json) {
      std::cout << info.dump(2) << "\n";
    } else {
      print_text(info);
    }
    exit_code = 0;
  });
}

}  // namespace ft::cli
