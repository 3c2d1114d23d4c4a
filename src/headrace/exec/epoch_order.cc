#include "headrace/exec/epoch_order.h"

#include <numeric>

#include "headrace/core/rng.h"

namespace headrace {
namespace {
// Keeps the order stream apart from the per-sample augmentation streams, which hash
// (seed, epoch, index) with the same seed.
constexpr uint64_t kOrderStream = 0x6f72646572ULL;  // "order"
constexpr uint64_t kShardStream = 0x7368617264ULL;  // "shard": the shard order
constexpr uint64_t kWindowStream = 0x77696e646fULL;  // "windo": one window's shuffle

// The rank share's rule (RankShareOf): every rank the same floor(batches / ranks).
int64_t PerRank(int64_t batches_per_epoch, int world_size) {
  return batches_per_epoch / world_size;
}

// A rank's whole run: `per_rank` × epochs, saturating (a run longer than int64 batches is,
// for every purpose, unbounded).
int64_t TotalBatches(int64_t per_rank, std::optional<int64_t> epochs) {
  if (!epochs || per_rank == 0) return EpochOrder::kUnboundedBatches;
  if (*epochs > EpochOrder::kUnboundedBatches / per_rank) return EpochOrder::kUnboundedBatches;
  return per_rank * *epochs;
}

template <typename T>
void Shuffle(std::vector<T>& v, size_t begin, Rng& rng) {
  for (size_t i = v.size() - 1; i > begin; --i) {
    const size_t j = begin + static_cast<size_t>(rng.Below(i - begin + 1));
    std::swap(v[i], v[j]);
  }
}
}  // namespace

Result<RankShare> RankShareOf(int64_t batches_per_epoch, int64_t batch_size, int world_size,
                              std::optional<int64_t> epochs) {
  if (world_size < 1) {
    return Status::InvalidArgument("world_size must be >= 1, got " + std::to_string(world_size));
  }
  const int64_t per_rank = PerRank(batches_per_epoch, world_size);
  if (per_rank == 0) {
    return Status::InvalidArgument("an epoch has " + std::to_string(batches_per_epoch) +
                                   " batches of " + std::to_string(batch_size) +
                                   ", fewer than world_size " + std::to_string(world_size) +
                                   ": lower batch.size or use fewer ranks");
  }
  return RankShare{per_rank, TotalBatches(per_rank, epochs)};
}

EpochOrder::EpochOrder(const EpochOrderOptions& options, int64_t epoch_samples)
    : options_(options), epoch_samples_(epoch_samples) {
  const int64_t n = epoch_samples;
  const int64_t b = options.batch_size;
  batches_per_epoch_ = options.drop_last ? n / b : (n + b - 1) / b;
  batches_per_rank_epoch_ = PerRank(batches_per_epoch_, options.world_size);
}

EpochOrder::EpochOrder(const EpochOrder& other)
    : options_(other.options_),
      epoch_samples_(other.epoch_samples_),
      batches_per_epoch_(other.batches_per_epoch_),
      batches_per_rank_epoch_(other.batches_per_rank_epoch_) {}

Result<EpochOrder> EpochOrder::Make(const EpochOrderOptions& options) {
  if (options.num_samples <= 0) return Status::InvalidArgument("the dataset has no samples");
  if (options.batch_size <= 0) return Status::InvalidArgument("batch.size must be >= 1");
  if (options.world_size <= 0 || options.rank < 0 || options.rank >= options.world_size) {
    return Status::InvalidArgument("rank must be in [0, world_size), got rank " +
                                   std::to_string(options.rank) + " of " +
                                   std::to_string(options.world_size));
  }
  int64_t epoch_samples = options.num_samples;
  if (options.blend.has_value()) {
    int64_t covered = 0;
    for (const BlendPart& part : options.blend->parts) {
      if (part.first != covered) {
        return Status::InvalidArgument("a blend's parts must cover the dataset in order");
      }
      covered += part.size;
    }
    if (covered != options.num_samples) {
      return Status::InvalidArgument("a blend's parts hold " + std::to_string(covered) +
                                     " samples, the dataset " +
                                     std::to_string(options.num_samples));
    }
    HR_ASSIGN_OR_RETURN(epoch_samples, BlendEpochLength(*options.blend));
  } else if (!options.shard_samples.empty()) {
    int64_t sum = 0;
    for (int64_t n : options.shard_samples) {
      if (n < 0) return Status::InvalidArgument("a shard's sample count is negative");
      sum += n;
    }
    if (sum != options.num_samples) {
      return Status::InvalidArgument("the shards hold " + std::to_string(sum) +
                                     " samples, the dataset " +
                                     std::to_string(options.num_samples));
    }
    if (options.shuffle_window < 1) {
      return Status::InvalidArgument("source.shuffle_window must be >= 1, got " +
                                     std::to_string(options.shuffle_window));
    }
  }
  EpochOrderOptions adjusted = options;
  if (options.remainder.has_value()) {
    const EpochRemainder& r = *options.remainder;
    const std::string where = "state dict: the rest of epoch " + std::to_string(r.epoch);
    if (r.epoch < 0 || r.consumed < 0 || r.consumed > epoch_samples) {
      return Status::InvalidArgument(where + ": consumed " + std::to_string(r.consumed) +
                                     " is outside the epoch's " + std::to_string(epoch_samples) +
                                     " positions");
    }
    for (int64_t i : r.pending) {
      if (i < 0 || i >= options.num_samples) {
        return Status::InvalidArgument(where + ": pending index " + std::to_string(i) +
                                       " is outside the dataset's " +
                                       std::to_string(options.num_samples) + " samples");
      }
    }
    if (options.epochs && *options.epochs <= r.epoch) {
      return Status::InvalidArgument(where + " is past the run's epochs (" +
                                     std::to_string(*options.epochs) + ")");
    }
    epoch_samples = epoch_samples - r.consumed + static_cast<int64_t>(r.pending.size());
    adjusted.epochs = r.epoch + 1;
    EpochOrder rest(adjusted, epoch_samples);
    if (rest.batches_per_rank_epoch_ == 0) {
      return Status::InvalidArgument(
          where + " holds " + std::to_string(epoch_samples) + " samples, " +
          std::to_string(rest.batches_per_epoch_) + " batches of " +
          std::to_string(options.batch_size) + ": fewer than world_size " +
          std::to_string(options.world_size) +
          " (more ranks than batches left): resume with fewer ranks, or from the next epoch");
    }
  }
  if (options.epochs && *options.epochs < 1) {
    return Status::InvalidArgument("epochs must be >= 1 or unbounded, got " +
                                   std::to_string(*options.epochs));
  }
  EpochOrder order(adjusted, epoch_samples);
  HR_RETURN_IF_ERROR(RankShareOf(order.batches_per_epoch_, options.batch_size,
                                 options.world_size, adjusted.epochs)
                         .status());
  return order;
}

int64_t EpochOrder::total_batches() const {
  return TotalBatches(batches_per_rank_epoch_, options_.epochs);
}

BatchPosition PositionOf(int64_t local_index, int64_t batches_per_epoch, int world_size,
                         int rank) {
  const int64_t per_rank = PerRank(batches_per_epoch, world_size);
  BatchPosition p;
  p.local_index = local_index;
  p.epoch = local_index / per_rank;
  p.index_in_epoch = (local_index % per_rank) * world_size + rank;
  return p;
}

BatchPosition EpochOrder::Position(int64_t local_index) const {
  return PositionOf(local_index, batches_per_epoch_, options_.world_size, options_.rank);
}

namespace {

// An epoch's order as indices of type T (wide enough for num_samples - 1): the same
// swaps whatever T is, so every T gives the same order.
template <typename T>
std::vector<T> FullPermutationOf(const EpochOrderOptions& options, int64_t epoch_samples,
                                 int64_t epoch);

// A remainder's epoch: its pending samples, then the epoch's order from `consumed` on.
template <typename T>
std::vector<T> PermutationOf(const EpochOrderOptions& options, int64_t epoch_samples,
                             int64_t epoch) {
  if (!options.remainder.has_value() || options.remainder->epoch != epoch) {
    return FullPermutationOf<T>(options, epoch_samples, epoch);
  }
  const EpochRemainder& r = *options.remainder;
  const auto pending = static_cast<int64_t>(r.pending.size());
  std::vector<T> full = FullPermutationOf<T>(options, epoch_samples - pending + r.consumed, epoch);
  std::vector<T> out;
  out.reserve(static_cast<size_t>(epoch_samples));
  for (int64_t i : r.pending) out.push_back(static_cast<T>(i));
  out.insert(out.end(), full.begin() + r.consumed, full.end());
  return out;
}

template <typename T>
std::vector<T> FullPermutationOf(const EpochOrderOptions& options, int64_t epoch_samples,
                                 int64_t epoch) {
  if (options.blend.has_value()) {
    return BlendSequence<T>(*options.blend, epoch_samples, options.shuffle, options.seed, epoch);
  }
  std::vector<T> order(static_cast<size_t>(options.num_samples));
  std::iota(order.begin(), order.end(), T{0});
  if (options.shuffle && !options.shard_samples.empty()) {
    const std::vector<int64_t>& counts = options.shard_samples;
    std::vector<int64_t> first(counts.size());  // each shard's first dataset index
    for (size_t s = 1; s < counts.size(); ++s) first[s] = first[s - 1] + counts[s - 1];
    std::vector<int64_t> shards(counts.size());
    std::iota(shards.begin(), shards.end(), int64_t{0});
    Rng shard_rng(HashKeys(options.seed, static_cast<uint64_t>(epoch), kShardStream));
    if (!shards.empty()) Shuffle(shards, 0, shard_rng);
    order.clear();
    const auto window = static_cast<size_t>(options.shuffle_window);
    for (size_t w = 0; w * window < shards.size(); ++w) {
      const size_t begin = order.size();
      for (size_t k = w * window; k < std::min(shards.size(), (w + 1) * window); ++k) {
        for (int64_t i = 0; i < counts[shards[k]]; ++i) {
          order.push_back(static_cast<T>(first[shards[k]] + i));
        }
      }
      if (order.size() > begin + 1) {
        Rng rng(HashKeys(options.seed, static_cast<uint64_t>(epoch), kWindowStream, w));
        Shuffle(order, begin, rng);
      }
    }
  } else if (options.shuffle) {
    Rng rng(HashKeys(options.seed, static_cast<uint64_t>(epoch), kOrderStream));
    for (int64_t i = options.num_samples - 1; i > 0; --i) {
      const auto j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
      std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
    }
  }
  return order;
}

// Whether every dataset index fits 32 bits: the kept permutation then takes 4 bytes a
// sample, not 8 (400 MB less per process at 100 M samples).
bool Narrow(const EpochOrderOptions& options) {
  return options.num_samples <= int64_t{1} << 32;
}

}  // namespace

std::vector<int64_t> EpochOrder::Permutation(int64_t epoch) const {
  return PermutationOf<int64_t>(options_, epoch_samples_, epoch);
}

int64_t EpochOrder::permutation_bytes() const {
  return epoch_samples_ * static_cast<int64_t>(Narrow(options_) ? sizeof(uint32_t)
                                                                        : sizeof(int64_t));
}

std::vector<int64_t> EpochOrder::BlendPicks(int64_t epoch, int64_t positions) const {
  if (!options_.blend.has_value()) return {};
  const BlendOptions& blend = *options_.blend;
  if (!options_.remainder.has_value() || options_.remainder->epoch != epoch) {
    return BlendCounts(blend, epoch_samples_, options_.shuffle, options_.seed, epoch, positions);
  }
  // The remainder's picks: those before it (its base's first `consumed`, after the
  // continuation's start) and those of the positions past its pending samples.
  const EpochRemainder& r = *options_.remainder;
  const auto pending = static_cast<int64_t>(r.pending.size());
  const int64_t base = epoch_samples_ - pending + r.consumed;
  std::vector<int64_t> picks = BlendCounts(blend, base, options_.shuffle, options_.seed, epoch,
                                           r.consumed + std::max<int64_t>(0, positions - pending));
  for (size_t s = 0; s < picks.size() && s < blend.start.size(); ++s) picks[s] += blend.start[s];
  return picks;
}

std::vector<int64_t> EpochOrder::SampleIndices(const BatchPosition& position) const {
  MutexLock lock(mu_);
  const bool narrow = Narrow(options_);
  if (cached_epoch_ != position.epoch) {
    if (narrow) {
      cached32_ = PermutationOf<uint32_t>(options_, epoch_samples_, position.epoch);
    } else {
      cached_ = PermutationOf<int64_t>(options_, epoch_samples_, position.epoch);
    }
    cached_epoch_ = position.epoch;
  }
  const int64_t begin = position.index_in_epoch * options_.batch_size;
  const int64_t end = std::min(begin + options_.batch_size, epoch_samples_);
  if (narrow) return std::vector<int64_t>(cached32_.begin() + begin, cached32_.begin() + end);
  return std::vector<int64_t>(cached_.begin() + begin, cached_.begin() + end);
}

}  // namespace headrace
