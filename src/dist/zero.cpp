#include "dist/zero.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "util/error.h"
#include "util/fmt.h"

namespace ft::dist {

std::vector<int> assign_owners(const std::vector<int64_t>& numels, int world_size) {
  FT_CHECK(world_size >= 1, "assign_owners: world_size must be >= 1");
  std::vector<size_t> order(numels.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return numels[a] > numels[b]; });
  std::vector<int64_t> load(static_cast<size_t>(world_size), 0);
  std::vector<int> owners(numels.size(), 0);
  for (const size_t i : order) {
    const auto lightest = std::min_element(load.begin(), load.end()) - load.begin();
    owners[i] = static_cast<int>(lightest);
    load[static_cast<size_t>(lightest)] += numels[i];
  }
  return owners;
}

namespace {

constexpr int64_t kBucketBytes = 256LL << 20;  // parameters are broadcast in flat buffers of at most this size

// Broadcasts `list` (one dtype, owned by `root`) as one flat buffer; a single tensor goes as it is.
void broadcast_bucket(Communicator& comm, const std::vector<at::Tensor>& list, int root) {
  if (list.size() == 1 && list[0].is_contiguous()) {
    std::vector<at::Tensor> one{list[0].view({-1})};
    comm.broadcast_(one, root);
    // Written in place by NCCL: the version counter moves as a copy_ would move it (quant::KnownAmax relies on it).
    if (comm.rank() != root) list[0].unsafeGetTensorImpl()->bump_version();
    return;
  }
  std::vector<at::Tensor> flat_parts;
  for (const auto& p : list) flat_parts.push_back(p.reshape({-1}));
  std::vector<at::Tensor> flat{at::cat(flat_parts)};
  comm.broadcast_(flat, root);
  if (comm.rank() == root) return;
  int64_t offset = 0;
  for (const auto& p : list) {
    p.copy_(flat[0].narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
}

}  // namespace

void broadcast_from_owners(Communicator& comm, const std::vector<at::Tensor>& params, const std::vector<int>& owners) {
  FT_CHECK(params.size() == owners.size(), "broadcast_from_owners: one owner per parameter");
  if (comm.world_size() == 1) return;
  at::NoGradGuard no_grad;
  for (int root = 0; root < comm.world_size(); ++root) {
    std::map<at::ScalarType, std::vector<at::Tensor>> pending;  // per dtype, below kBucketBytes
    std::map<at::ScalarType, int64_t> pending_bytes;
    for (size_t i = 0; i < params.size(); ++i) {
      if (owners[i] != root) continue;
      const at::Tensor& p = params[i];
      const auto dtype = p.scalar_type();
      const int64_t bytes = p.numel() * static_cast<int64_t>(p.element_size());
      if (!pending[dtype].empty() && pending_bytes[dtype] + bytes > kBucketBytes) {
        broadcast_bucket(comm, pending[dtype], root);
        pending[dtype].clear();
        pending_bytes[dtype] = 0;
      }
      pending[dtype].push_back(p);
      pending_bytes[dtype] += bytes;
    }
    for (const auto& [dtype, list] : pending) {
      if (!list.empty()) broadcast_bucket(comm, list, root);
    }
  }
}

}  // namespace ft::dist
