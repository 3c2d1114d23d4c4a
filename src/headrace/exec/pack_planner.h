// PackPlanner: batch.pack decided before the samples run, from the sizes their size pass
// tells (exec/README.md, "Packing": planned), so that a packed batch's samples are
// computed in row order and its patches written where the packed batch holds them.
//
//   planner.Plan(epoch, position, global, last, indices)   the engine's driver, in order:
//       input batch `position` of the epoch -> the samples of packed batch `position`,
//       in row order (EngineOptions::compose)
//   planner.Take(global)                                    the consumer: its rows
//
// The rows are the Packer's rule (TakePackRows, PackWindowAt) over the told token counts:
// the window holds sample indices only (nothing computed waits), input batch p's samples
// join it, and the rows built then are packed batch p. A sample longer than seq_len is
// planned as seq_len tokens (overflow: truncate; the Packer cuts it), or left out and
// never computed: skip, or a cut that would drop vision tokens (the Packer's error). A sample whose size the pass cannot tell (bytes that do not
// parse: it will most likely fail) is planned as a full row. Sizes are a pure function of
// the sample's bytes, so the rows are as deterministic as the Packer's; what differs is a
// sample that fails once computed: its row keeps the room as padding, where the Packer,
// which packs after the samples ran, never saw it.
//
// Thread-safe: Plan on the driver thread, Take on the consumer's, Restore before either.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <vector>

#include "headrace/core/sample.h"
#include "headrace/core/status.h"
#include "headrace/exec/packer.h"
#include "headrace/exec/thread_annotations.h"

namespace headrace {

// What the plan of one packed batch is, for its consumer.
struct PlannedPack {
  std::vector<std::vector<int64_t>> rows;  // dataset indices, each row's in row order
  // Samples left out as longer than seq_len (overflow: skip), never computed: each a
  // pack_skipped error naming it.
  std::vector<SampleError> skipped;
  // Samples left out because cutting them to seq_len would drop vision tokens (the
  // Packer's error for it, named by their record's id), never computed.
  std::vector<SampleError> failed;
  PackState before;  // where the planner stood before this input batch
  PackState after;   // where it stands once this packed batch is delivered
};

class PackPlanner {
 public:
  // What the size pass told of a sample: its tokens, and the vision tokens among them,
  // those past seq_len too (a cut to seq_len would drop them).
  struct Told {
    int64_t tokens = 0;
    int64_t vision = 0;
    int64_t vision_past_seq_len = 0;
    std::string id;  // the record's, for an error
    std::vector<int64_t> patches;  // each image's and video's (t x h x w of its grid)
    uint32_t modalities = 0;       // 1 << FieldKind of each kind of media it holds
  };
  // What was told of samples `indices` of epoch `epoch`, in order (nullopt: not told).
  // `stop`: give up waiting (the run is stopping), telling nothing.
  using Sizer = std::function<std::vector<std::optional<Told>>(
      int64_t epoch, std::span<const int64_t> indices, std::stop_token stop)>;
  // An input batch's samples: position (rank-local batch in the epoch) -> indices.
  using InputBatch = std::function<std::vector<int64_t>(int64_t epoch, int64_t position)>;

  // batch.balance with a packing window (balanced_former.cc): the planner of rank `rank`
  // of `world` plans each data-parallel step's rows over every rank's samples of the
  // step (Plan's input batch is the whole step, rank 0's share first; its window every
  // rank's: options.window is per rank, so world x that), in whole multiples of `world`
  // rows (TakePackRows), and keeps the rows `deal` gives this rank: every rank plans the
  // same rows (a pure function of the step's samples and sizes) and the deal gives each
  // row to one rank, so that every sample is delivered once. A sample left out (skipped,
  // failed) is named by the rank `index mod world`. Why rows and not samples are dealt:
  // a rank packing its own dealt samples carries what its rows cannot hold into its
  // later steps, which undoes a deal of samples (docs/balanced_steps.md).
  struct RowDeal {
    int world = 1;
    int rank = 0;
    // The step's epoch, its rows (dataset indices) and what was told of each row's
    // samples, row by row -> the rows this rank keeps, ascending (about rows / world of
    // them).
    std::function<std::vector<size_t>(int64_t epoch, std::span<const std::vector<int64_t>> rows,
                                      std::span<const std::vector<std::optional<Told>>> told)>
        deal;
  };

  // options: seq_len, window, overflow, epoch_batches (the rank's input batches an epoch).
  PackPlanner(PackOptions options, Sizer sizer, std::optional<RowDeal> row_deal = std::nullopt)
      : options_(Widened(std::move(options), row_deal)),
        sizer_(std::move(sizer)),
        row_deal_(std::move(row_deal)) {}

  // Input batch `position` of `epoch` (rank-local; `global`: its rank-local run index),
  // in order: the samples packed batch `position` holds, in row order. Its plan waits for
  // Take(global).
  std::vector<int64_t> Plan(int64_t epoch, int64_t position, int64_t global, bool last_in_epoch,
                            std::span<const int64_t> indices, std::stop_token stop = {});
  // The plan of packed batch `global` (removed), nullopt if none was made.
  std::optional<PlannedPack> Take(int64_t global);

  // Continues from `state` (saved after a packed batch was delivered): the window of
  // state.waiting, rebuilt by sizing those samples of input batches [from_batch,
  // next_batch), so that the next Plan is of input batch state.next_batch. Fails when the
  // batches no longer hold the waiting samples (the dataset or the pipeline changed).
  Status Restore(const PackState& state, const InputBatch& batch_of);
  // Plans input batches [0, to) of `epoch` and drops them (a start at batch `to` without
  // a saved state: the window as an unbroken run has it there). A RowDeal's deal is not
  // asked for them: no rank delivers their rows from here, so they are not dealt steps.
  void Skip(int64_t epoch, int64_t to, const InputBatch& batch_of);

  int64_t samples_sized() const;

 private:
  struct Entry {
    int64_t index = 0;
    int64_t from_batch = 0;
    int64_t tokens = 0;
    std::optional<Told> told;  // with a RowDeal: what its deal costs the sample by
  };
  // Adds sized samples to the window; those left out go to `plan` (skipped, failed).
  // (The sizes are had before the lock is taken: a consumer's Take does not wait on reads.)
  void Admit(int64_t epoch, int64_t position, std::span<const int64_t> indices,
             const std::vector<std::optional<Told>>& told, PlannedPack& plan) HR_REQUIRES(mu_);
  PackState StateAfter(int64_t epoch, int64_t next_batch) const HR_REQUIRES(mu_);
  // Input batch `position` of `epoch`, its samples told `told`: the window's next rows
  // (with a RowDeal and `deal`, those the deal gives this rank; without `deal`, every
  // rank's: Skip, which drops them, does not ask the deal).
  PlannedPack PlanLocked(int64_t epoch, int64_t position, bool last_in_epoch,
                         std::span<const int64_t> indices,
                         const std::vector<std::optional<Told>>& told, bool deal)
      HR_REQUIRES(mu_);

  // `options` with a RowDeal's window: every rank's.
  static PackOptions Widened(PackOptions options, const std::optional<RowDeal>& row_deal) {
    if (row_deal.has_value()) options.window *= row_deal->world;
    return options;
  }
  // With a RowDeal: the rows of `rows` (of epoch `epoch`) this rank keeps, and the left-out
  // samples it names.
  void KeepDealt(int64_t epoch, std::vector<std::vector<Entry>>& rows, PlannedPack& plan) const;

  const PackOptions options_;
  const Sizer sizer_;
  const std::optional<RowDeal> row_deal_;
  mutable Mutex mu_;
  std::map<int64_t, Entry> window_ HR_GUARDED_BY(mu_);
  std::multimap<int64_t, int64_t> by_tokens_ HR_GUARDED_BY(mu_);
  int64_t arrivals_ HR_GUARDED_BY(mu_) = 0;
  std::map<int64_t, PlannedPack> plans_ HR_GUARDED_BY(mu_);
  int64_t samples_sized_ HR_GUARDED_BY(mu_) = 0;
};

}  // namespace headrace
