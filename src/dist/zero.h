// ZeRO-1 (optimizer state sharded across ranks) by parameter ownership, the scheme of PyTorch's
// torch.distributed.optim.ZeroRedundancyOptimizer: every trainable parameter has one owner rank, which alone keeps
// its AdamW moments and applies its update; after the step each owner broadcasts its parameters to the others.
//
// With DDP's gradient all-reduce, a step costs one all-reduce of the gradients plus one broadcast of the parameters
// (1.5x the bytes of plain DDP), and each rank keeps optimizer state for about 1/world_size of the parameters.
// Unlike flat-buffer sharding it needs no full-size temporary copy of the parameters or gradients.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

#include "dist/comm.h"

namespace ft::dist {

// The owner rank of each parameter, given their sizes: largest first, each to the rank with the fewest elements
// so far (ties to the lowest rank). Deterministic, so every rank computes the same assignment.
std::vector<int> assign_owners(const std::vector<int64_t>& numels, int world_size);

// Overwrites every parameter on every rank with its owner's values: one broadcast per owner rank, of that rank's
// parameters flattened into one buffer per dtype. `owners` is parallel to `params`.
void broadcast_from_owners(Communicator& comm, const std::vector<at::Tensor>& params, const std::vector<int>& owners);

}  // namespace ft::dist
