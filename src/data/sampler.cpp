#include "data/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "util/error.h"
#include "util/fmt.h"
#include "util/hash.h"

namespace ft::data {

WeightedItems WeightedItems::of(double weight, int64_t n, const std::string& source) {
  if (n <= 0) return {n, 0};
  const double per_epoch = weight * static_cast<double>(n);
  if (!(per_epoch <= kMaxPerEpoch)) {
    throw ConfigError(
        fmt::format("{}: weight {:g} times its {} samples makes {:.3g} samples per epoch, more than {:.0e}", source,
                    weight, n, per_epoch, kMaxPerEpoch),
        "a weight is relative to the other sources' (2 repeats each sample twice an epoch): lower it");
  }
  return {n, weight > 0 ? std::max<int64_t>(1, std::llround(per_epoch)) : 0};
}

int64_t WeightedItems::item(int64_t j) const {
  const int64_t full = (weighted / n) * n;
  if (j < full) return j % n;
  const int64_t rest = weighted - full;
  return (j - full) * n / rest;
}

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  SplitMix64 rng(seed * 0x9e3779b97f4a7c15ULL ^ (static_cast<uint64_t>(epoch) + 0x632be59bd9b4e019ULL));
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap(p[static_cast<size_t>(i)], p[static_cast<size_t>(j)]);
  }
  return p;
}

DistributedSampler::DistributedSampler(int64_t n, uint64_t seed, int64_t rank, int64_t world, bool shuffle)
    : n_(n), per_rank_(0), seed_(seed), rank_(rank), world_(world), shuffle_(shuffle) {
  FT_CHECK(world >= 1 && rank >= 0 && rank < world,
           "invalid rank " + std::to_string(rank) + " of world size " + std::to_string(world));
  FT_CHECK(n >= 0, "negative sampler size");
  per_rank_ = (n + world - 1) / world;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> order;
  if (shuffle_) {
    order = epoch_permutation(n_, seed_, epoch);
  } else {
    order.resize(static_cast<size_t>(n_));
    std::iota(order.begin(), order.end(), 0);
  }
  std::vector<int64_t> mine;
  if (n_ == 0) return mine;
  mine.reserve(static_cast<size_t>(per_rank_));
  for (int64_t k = 0; k < per_rank_; ++k) {
    const int64_t pos = (rank_ + k * world_) % n_;  // positions past the end wrap around (padding)
    mine.push_back(order[static_cast<size_t>(pos)]);
  }
  return mine;
}

}  // namespace ft::data
