// The one-time costs of a GPU's first training step, paid on a thread of their own while the main thread loads.
//
// A first step runs slower than the rest for what CUDA and cuBLAS do lazily: loading the module of each kernel the
// first time it launches (CUDA_MODULE_LOADING=LAZY, CUDA's default) and creating cuBLAS handles and their first GEMM
// plans. On an H100 that was about 0.4 s of an 8B LoRA run's 0.9 s first step (283 ms of launches, 223 ms in the
// first GEMMs; docs/benchmarks.md). Module loading is process-wide, and PyTorch's handle pools give a finished
// thread's handles to the next thread that asks, so one forward, backward and update of a one-layer model of the
// run's shape, settings, batch layout and optimizer, run while the main thread reads the weights and builds the data,
// takes those costs off the first step's path.
#pragma once

#include <c10/core/Device.h>

#include <string>
#include <thread>

#include "config/config.h"
#include "model/args.h"
#include "model/kernel_policy.h"
#include "train/precision.h"

namespace ft::train {

// The batch layout the warm-up copies: rows of `seq_len` tokens, packed (varlen attention) or not.
struct WarmUpBatch {
  int64_t rows = 1;
  int64_t seq_len = 1;
  bool packing = false;
};

// One forward, backward and update (clipping and the optimizer's step, as TrainStep does) of `args` cut to one layer,
// with the run's adapters, FP8 and quantization settings (configure_model) and optimizer settings, on
// `kernels.device` (a stream of its own on a GPU); returns once the device is done. Weights
// come from a generator of its own, tokens are 0, 1, 2, ..., and the model runs in eval mode (no dropout or router
// jitter), so nothing is drawn from the run's generators. Throws what the forward, backward or update throws.
void warm_up_kernels(const Config& cfg, model::ModelArgs args, const PrecisionPolicy& precision,
                     const model::KernelPolicy& kernels, const WarmUpBatch& batch);

// warm_up_kernels on a thread of its own, on a GPU.
class KernelWarmUp {
 public:
  // Starts the warm-up when `kernels.device` is a GPU; elsewhere nothing runs. `args` is the run's model shape
  // (build_model_args).
  KernelWarmUp(const Config& cfg, model::ModelArgs args, const PrecisionPolicy& precision,
               const model::KernelPolicy& kernels, WarmUpBatch batch);
  KernelWarmUp(const KernelWarmUp&) = delete;
  KernelWarmUp& operator=(const KernelWarmUp&) = delete;
  ~KernelWarmUp();

  // Waits for the warm-up, empties the CUDA caching allocator (the warm-up's freed blocks could serve only its side
  // stream; the load's freed ones go too), and logs its time and how long this call waited (the emptying included). A
  // warm-up that failed (out of memory beside the load, say) costs the run nothing but the first step's time: the
  // failure is logged as a warning.
  void finish();

 private:
  std::thread thread_;
  double seconds_ = 0;
  std::string failure_;  // what stopped the warm-up, for finish() to log
};

}  // namespace ft::train
