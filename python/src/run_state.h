// A run's options, state and stats between Python and the engine, defined in loader.cc
// (the state dict's readers in run_position.cc, the rules' figures in run_rules.cc) and
// shared with former.cc: the bindings that start runs and those that form batches.
//
// Threading: every function here is called with the GIL held.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "headrace/exec/consumer_clock.h"
#include "headrace/exec/epoch_order.h"
#include "headrace/exec/packer.h"
#include "headrace/exec/run_budget.h"
#include "headrace/pipeline/prepared.h"

namespace headrace::python {

// A pipeline prepared once (pipeline/prepared.h): Python's `_Prepared`.
struct PyPrepared {
  std::shared_ptr<const PreparedPipeline> prepared;
};

// A former's state as a state dict holds it ({epoch, from_batch, next_batch, delivered,
// waiting}), and back (LoaderOptions::pack_state); a malformed one raises ConfigError.
nb::dict PackStateToDict(const PackState& s);
PackState PackStateFromDict(const nb::handle& state_object);
// A former's stats under stats()'s keys ("pack_rows", ...).
nb::dict PackStatsToDict(const PackStats& p);

// The rest of an epoch ({epoch, consumed, pending}), or nullopt for None.
std::optional<EpochRemainder> OptionalRemainder(const nb::object& object);
// A blend's picks before the rest of an epoch (a list of ints; None: none).
std::vector<int64_t> BlendStartFromObject(const nb::object& object);

// A local run's options for `rank` of `world_size` from (start_epoch, start_batch),
// continuing `pack_state` over the rest of an epoch (`remainder`, `blend_start`; each
// None for none), each read as above: what the bindings that start runs (loader.cc) and
// those that form batches (former.cc) share. Batches with no sample are delivered (the
// Python loader ends epochs by position).
LoaderOptions LocalRunOptions(int rank, int world_size, int64_t start_epoch,
                              int64_t start_batch, const nb::object& pack_state,
                              const nb::object& remainder, const nb::object& blend_start);

// The conversions of the run's rules' figures (run_rules.cc): a blend entry's samples and
// errors under stats()'s keys ("source.<name>.samples"); a batch's tally as a Ray worker
// sends it to the rank that consumes the batch (RunBudget::Tally: (delivered, [rows per
// entry], [(kind, entry, epoch, index, uri, message) per error])); a run's batch count
// (None for a run without an end); the consumer's wait accounting.
void SetEntryStats(nb::dict& d, const std::string& name, int64_t samples, int64_t errors);
nb::tuple TallyToPython(const BatchTally& tally, const Batch& batch);
std::optional<int64_t> OptionalBatches(int64_t total);
nb::dict StatsToDict(const ConsumerStats& s);

// Which blend entry a dataset index of `prepared`'s source is in; null unless a blend.
EntryOf EntryOfSource(std::shared_ptr<const PreparedPipeline> prepared);

}  // namespace headrace::python
