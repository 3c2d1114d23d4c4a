// BatchFormer: how a run forms the batches its consumer gets. The engine computes batches
// of samples in batch order (exec/engine.h); a former decides which samples each of them
// computes and turns the computed batches into the consumer's: as they are (plain),
// packed into rows of seq_len tokens or cut at max_tokens after the samples ran (pack),
// or packed by a plan made before they run (pack planned). The run holds one; the
// policies and the rule that picks one are in exec/batch_formers.h.
//
//   engine driver thread                       consumer thread (Loader::Next)
//   Compose(position, samples) -> samples      Next(input) -> input.Next() ... -> batch
//   HandOver(epoch, index)     -> media, tokens  ready(), state(), stats()
//                                              or, on demand (Loader::Take), any thread:
//                                              FinishTaken(batch)
//
// A former's state (what a state dict saves to resume it: PackState) and its stats are
// read from any thread; everything else is called by the thread named above.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <stop_token>
#include <string_view>
#include <vector>

#include "headrace/core/batch.h"
#include "headrace/core/buffer.h"
#include "headrace/core/sample.h"
#include "headrace/core/status.h"
#include "headrace/exec/epoch_order.h"
#include "headrace/exec/error_budget.h"
#include "headrace/exec/packer.h"

namespace headrace {

// The batches a former forms from: the engine's, in batch order (Engine implements it).
class BatchInput {
 public:
  virtual ~BatchInput() = default;
  // The next computed batch; nullopt after the last one.
  virtual Result<std::optional<Batch>> Next() = 0;
  // Waits up to `timeout` until Next() would not block; true if so.
  virtual bool WaitReady(std::chrono::nanoseconds timeout) = 0;
  // Input batches in each epoch of this rank's run.
  virtual int64_t batches_per_epoch() const = 0;
  // Bytes of delivered batches the former holds changed by `delta`: charged to the
  // batch budget, so that fewer batches are computed ahead while it holds more.
  virtual void ChargeHeld(int64_t delta) = 0;
  // Samples lost after delivery (left out, cut), counted in the run's error budget in
  // delivery order; `at_end`: the epoch's last input batch, whose verdict this is.
  virtual Status CountLost(std::span<const LostSample> lost, bool at_end) = 0;
};

// What a balancing former (batch.balance) saw of the steps it dealt: sums over them of
// the costliest rank's cost as the order dealt each step and as balanced, and of the
// ranks' mean; 1 - mean / max is the share of the step the ranks wait at its barrier.
struct BalanceSeen {
  int64_t steps = 0;
  int64_t untold = 0;  // samples whose size the size pass could not tell (costed the mean)
  double max_before = 0;
  double max_after = 0;
  double mean = 0;
  // Ranks' steps left without a sample of a kind batch.balance.every_rank requires.
  int64_t short_ranks = 0;
};

class BatchFormer {
 public:
  virtual ~BatchFormer() = default;
  // The policy's name (exec/batch_formers.h): "plain", "pack", "pack planned".
  virtual std::string_view name() const = 0;

  // ---- The engine's side: how it computes each batch for this former.
  // The samples batch `position` computes, in order, given those EpochOrder puts in it
  // (nullopt: those). Called in batch order before the batch is admitted; `stop` is the
  // run's (a former that reads gives up once it is requested).
  virtual std::optional<std::vector<int64_t>> Compose(const BatchPosition& position,
                                                      std::span<const int64_t> samples,
                                                      std::stop_token stop) {
    return std::nullopt;
  }
  // What Compose had of a sample (its media read, the tokens its size pass tokenized),
  // taken as the sample starts instead of reading or tokenizing it again; its media only
  // when `media` (the engine reads them whole before the chain runs: not a text-only
  // sample, nor one read in ranges).
  struct HandedOver {
    std::optional<std::vector<Buffer>> media;
    std::optional<ToldSequence> told;
  };
  virtual HandedOver HandOver(int64_t epoch, int64_t index, bool media) { return {}; }
  // Whether the engine leaves each batch's concatenated fields unjoined, as its samples'
  // rows (Batch::sample_rows), for a former that lays the samples out itself; and whether
  // the former counts losses (CountLost), so that an epoch's end is its verdict point.
  virtual bool keeps_sample_rows() const { return false; }
  virtual bool counts_losses() const { return false; }

  // ---- The consumer's side.
  // The next batch for the consumer, formed from `input`'s; nullopt at the end of the run.
  virtual Result<std::optional<Batch>> Next(BatchInput& input) = 0;
  // Whether Next() returns without pulling from the input (a formed batch waits).
  virtual bool ready() const { return false; }
  // Input batches pulled and not yet wholly delivered (a max_tokens batch's rest): the
  // consumer's position is that many input batches behind the input's.
  virtual int64_t inputs_held() const { return 0; }
  // Where the former stands after the last batch Next() returned, and what it did so
  // far; nullopt for a former with no state of its own. Safe from any thread.
  virtual std::optional<PackState> state() const { return std::nullopt; }
  virtual std::optional<PackStats> stats() const { return std::nullopt; }
  // A balancing former's view of the steps it dealt; nullopt for the others.
  virtual std::optional<BalanceSeen> balance() const { return std::nullopt; }

  // ---- An on-demand run's side (a Ray worker: Engine::Take), whose batches no Next()
  // forms: what the former adds to batch `batch` before it leaves. Any thread.
  virtual Status FinishTaken(Batch& batch) { return Status::Ok(); }
};

// The field of an on-demand batch that its consumer forms further (a Ray rank packs its
// workers' batches): each sample's kinds of media (int32 [B], ModalityBit bits), which a
// balancing former with batch.balance.every_rank adds as the batch leaves the worker and
// takes out of its input at the rank, where no Compose dealt the samples
// (exec/balanced_former.cc). Never in a batch a user receives.
inline constexpr std::string_view kSampleKindsField = "sample_kinds";

}  // namespace headrace
