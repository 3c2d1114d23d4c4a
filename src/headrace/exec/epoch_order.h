// EpochOrder: which samples make up batch k of epoch e.
//
// An epoch's order is a permutation of the dataset seeded by (seed, epoch) (identity
// when shuffle is off); batch k of the epoch is the fixed slice [k*B, (k+1)*B) of it.
// With data-parallel ranks, the epoch's batches are dealt round-robin: rank r of W gets
// batches r, r+W, r+2W, ... and every rank the same count (floor(batches / W)), so a
// rank's share never depends on thread counts or on the other ranks' speed.
//
// Sharded datasets (EpochOrderOptions::shard_samples): the dataset is shards in order,
// each a run of consecutive dataset indices. A shuffled epoch is then a seeded order of
// the shards, cut into windows of `shuffle_window` consecutive shards (in that order), and
// a seeded shuffle of the samples within each window; windows follow each other. Still a
// pure function of (seed, epoch). The window trades memory for randomness: a reader
// holds the window's shards (a block cache of ~window × shard bytes) and a sample can
// only land next to samples of the same window; window = all shards is a full shuffle,
// window = 1 shuffles within one shard at a time.
//
// Blends (EpochOrderOptions::blend, exec/blend_order.h): an epoch is the blend's sequence
// of dataset indices, whose length follows its `until` rule rather than the dataset's
// size; batches, ranks and runs cut it as they cut a permutation.
//
// A run is the sequence of a rank's batches over all epochs, numbered from 0: "local"
// batch j is epoch j / per_rank, its (j % per_rank)-th batch for this rank. A run has a
// number of epochs, or none (unbounded: a training loop decides when to stop).
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "headrace/core/status.h"
#include "headrace/exec/blend_order.h"
#include "headrace/exec/thread_annotations.h"

namespace headrace {

// The rest of one epoch, for a run resumed with another world size (or batch size, or
// a blend's weights): `pending` first (samples an earlier run had taken into its
// packers' windows but not delivered), then the epoch's order from position `consumed`
// on. The run is then that epoch alone, cut into batches and dealt to the ranks as any
// epoch; the next epochs are a new run's (pipeline/run_position.h, MergeLoaderStates).
struct EpochRemainder {
  int64_t epoch = 0;
  int64_t consumed = 0;
  std::vector<int64_t> pending;
};

struct EpochOrderOptions {
  int64_t num_samples = 0;
  int64_t batch_size = 1;
  bool drop_last = false;
  bool shuffle = true;
  uint64_t seed = 0;
  std::optional<int64_t> epochs = 1;  // nullopt: unbounded
  int rank = 0;
  int world_size = 1;
  // Samples per shard, in dataset order (they sum to num_samples); empty: no shards, a
  // shuffle is one permutation of the whole dataset.
  std::vector<int64_t> shard_samples;
  int64_t shuffle_window = 1;  // shards shuffled together (>= 1); with shard_samples only
  // A weighted blend of datasets (source.mix): its parts cover [0, num_samples) and an
  // epoch is BlendSequence's (shard_samples and shuffle_window are then each part's).
  std::optional<BlendOptions> blend;
  // The run is only the rest of remainder->epoch (epochs must be unbounded or more than
  // that epoch; the order then has epochs = remainder->epoch + 1).
  std::optional<EpochRemainder> remainder;
};

// Where one batch of a run sits.
struct BatchPosition {
  int64_t local_index = 0;  // position in this rank's run
  int64_t epoch = 0;
  int64_t index_in_epoch = 0;  // position among all ranks' batches of the epoch
};

// Where rank `rank` of `world_size`'s local batch `local_index` sits, for a run whose
// epochs have `batches_per_epoch` batches over all ranks (each rank floor(that / W)):
// epoch local / per_rank, and, among the epoch's batches, (local % per_rank) × W + rank.
BatchPosition PositionOf(int64_t local_index, int64_t batches_per_epoch, int world_size,
                         int rank);
// The run-wide index over all ranks of `position` (epoch × batches_per_epoch + its index
// in the epoch): what a Ray worker computes as batch k (python/headrace/ray).
inline int64_t RunWideIndex(const BatchPosition& position, int64_t batches_per_epoch) {
  return position.epoch * batches_per_epoch + position.index_in_epoch;
}

// A rank's share of a run whose epochs have `batches_per_epoch` batches over all ranks:
// floor(that / world_size) batches an epoch for every rank (an epoch's last batches, fewer
// than the ranks, are left out, so that every rank steps as often), and that many times
// the run's epochs for the whole run. What EpochOrder deals, and what a Ray rank, which
// knows only the run-wide count its workers compute, deals itself (python/headrace/ray).
struct RankShare {
  int64_t batches_per_epoch = 0;  // this rank's, an epoch
  int64_t total_batches = 0;      // this rank's whole run; EpochOrder::kUnboundedBatches
                                  // when the run has no end (or a longer one than int64)
};
// kInvalidArgument when the share of an epoch is no batch: "an epoch has N batches of
// `batch_size`, fewer than world_size W: lower batch.size or use fewer ranks".
Result<RankShare> RankShareOf(int64_t batches_per_epoch, int64_t batch_size, int world_size,
                              std::optional<int64_t> epochs);

class EpochOrder {
 public:
  static Result<EpochOrder> Make(const EpochOrderOptions& options);

  // Positions of one epoch: the dataset's size, or a blend's epoch length.
  int64_t epoch_samples() const { return epoch_samples_; }
  // Batches of one epoch, over all ranks.
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // Batches of one epoch for this rank.
  int64_t batches_per_rank_epoch() const { return batches_per_rank_epoch_; }
  // Batches of the whole run for this rank; kUnboundedBatches when the run has no end.
  static constexpr int64_t kUnboundedBatches = std::numeric_limits<int64_t>::max();
  int64_t total_batches() const;
  // The run's epochs; nullopt when unbounded.
  std::optional<int64_t> epochs() const { return options_.epochs; }
  const EpochOrderOptions& options() const { return options_; }

  BatchPosition Position(int64_t local_index) const;
  // The dataset indices of a batch, in order. Thread-safe.
  std::vector<int64_t> SampleIndices(const BatchPosition& position) const;
  // The full order of an epoch (for tests and tools); a remainder's epoch: its rest.
  std::vector<int64_t> Permutation(int64_t epoch) const;
  // A blend: the picks each part has made in the first `positions` positions of `epoch`
  // (a remainder's epoch: its picks before the remainder plus those in it). For a state
  // dict, whose resume with other weights continues each part there.
  std::vector<int64_t> BlendPicks(int64_t epoch, int64_t positions) const;
  // What the kept permutation of an epoch takes: 4 bytes a sample (8 beyond 2^32 samples).
  int64_t permutation_bytes() const;

  EpochOrder(const EpochOrder& other);

 private:
  EpochOrder(const EpochOrderOptions& options, int64_t epoch_samples);
  EpochOrderOptions options_;
  int64_t epoch_samples_ = 0;
  int64_t batches_per_epoch_ = 0;
  int64_t batches_per_rank_epoch_ = 0;
  // The last epoch's permutation, kept because consecutive batches share it.
  mutable Mutex mu_;
  mutable int64_t cached_epoch_ HR_GUARDED_BY(mu_) = -1;
  // As 32-bit indices when every index fits (the same order, half the memory).
  mutable std::vector<int64_t> cached_ HR_GUARDED_BY(mu_);
  mutable std::vector<uint32_t> cached32_ HR_GUARDED_BY(mu_);
};

}  // namespace headrace
