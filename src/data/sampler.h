// Deterministic, resumable, rank-sharded ordering of dataset items.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ft::data {

// A permutation of [0, n) for (seed, epoch), identical on every platform (splitmix64 + Fisher-Yates).
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

// A source's weight w over its n items: round(w * n) items per epoch, and at least one (a source with a positive
// weight is never dropped without a word), floor(w) full copies of the n items, then an evenly strided subset for
// the fraction (w = 0.5 keeps every other item, w = 2 repeats each twice).
struct WeightedItems {
  static constexpr double kMaxPerEpoch = 1e9;  // more items per epoch than any run takes; beyond: ConfigError

  int64_t n = 0;         // items in the source
  int64_t weighted = 0;  // items per epoch
  // `source` names the source in the error for weights above kMaxPerEpoch items.
  static WeightedItems of(double weight, int64_t n, const std::string& source);
  int64_t item(int64_t j) const;  // weighted index j (0 <= j < weighted) -> item of the source
};

// Shards n items over `world` ranks for each epoch. The epoch's order is a permutation for (seed, epoch) (or the
// identity without shuffle), padded by wrapping around to a multiple of world so every rank gets the same count
// (ceil(n / world)); rank r takes positions r, r + world, ... Every item is thus seen once per epoch overall, plus
// at most world - 1 repeats that keep the ranks in step (as torch's DistributedSampler with drop_last=False).
// The position {epoch, index} is all the state: indices(epoch) recomputes the order, nothing is replayed.
class DistributedSampler {
 public:
  DistributedSampler(int64_t n, uint64_t seed, int64_t rank, int64_t world, bool shuffle = true);

  int64_t size() const { return n_; }
  int64_t per_rank() const { return per_rank_; }  // items each rank sees per epoch
  // This rank's items of `epoch`, in order.
  std::vector<int64_t> indices(int64_t epoch) const;

 private:
  int64_t n_, per_rank_;
  uint64_t seed_;
  int64_t rank_, world_;
  bool shuffle_;
};

}  // namespace ft::data
