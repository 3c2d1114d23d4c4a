// The engine's rules, for the Ray rank and the PyTorch adapter, so that Python does not
// restate them: the run's and a blend's entries' error budgets (exec/run_budget.h), the
// consumer's wait accounting (exec/consumer_clock.h) and the rank share and run-wide
// batch index (exec/epoch_order.h); and the conversions of their figures that the
// loader's bindings (loader.cc) share.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "common.h"
#include "run_state.h"
#include "headrace/exec/consumer_clock.h"
#include "headrace/exec/epoch_order.h"
#include "headrace/exec/run_budget.h"

namespace headrace::python {

// A blend entry's counts under the keys stats() has for them (the local loader's and a Ray
// rank's alike).
void SetEntryStats(nb::dict& d, const std::string& name, int64_t samples, int64_t errors) {
  const std::string key = "source." + name + ".";
  d[(key + "samples").c_str()] = samples;
  d[(key + "errors").c_str()] = errors;
}

// A batch's tally (exec/run_budget.h) as a Ray worker sends it to the rank that consumes
// the batch: (delivered, [rows per entry], [(kind, entry, epoch, index, uri, message) per
// error]), and back. The budgets read an error's kind and entry; a rank that packs the
// batch rebuilds the error (SampleErrorsFromTally) from the rest of `batch`'s.
nb::tuple TallyToPython(const BatchTally& tally, const Batch& batch) {
  nb::list entries;
  for (int64_t n : tally.entry_delivered) entries.append(n);
  nb::list errors;
  for (size_t i = 0; i < tally.errors.size(); ++i) {
    const BatchTally::Error& t = tally.errors[i];
    const SampleError& e = batch.errors[i];
    errors.append(
        nb::make_tuple(t.kind, t.entry, e.epoch, e.index, e.uri, e.status.message()));
  }
  return nb::make_tuple(tally.delivered, entries, errors);
}

namespace {

BatchTally TallyFromPython(const nb::handle& object) {
  try {
    const nb::tuple t = nb::cast<nb::tuple>(object);
    BatchTally tally;
    tally.delivered = nb::cast<int64_t>(t[0]);
    for (nb::handle n : t[1]) tally.entry_delivered.push_back(nb::cast<int64_t>(n));
    for (nb::handle e : t[2]) {
      const nb::tuple error = nb::cast<nb::tuple>(e);
      tally.errors.push_back(
          BatchTally::Error{nb::cast<std::string>(error[0]), nb::cast<int>(error[1])});
    }
    return tally;
  } catch (const std::exception&) {
    throw StatusError(Status::InvalidArgument(
        "a batch's tally: expected (delivered, [rows per entry], [(kind, entry)]), got " +
        nb::cast<std::string>(nb::repr(object))));
  }
}

}  // namespace

// A run's batch count for Python: None for a run without an end.
std::optional<int64_t> OptionalBatches(int64_t total) {
  if (total == EpochOrder::kUnboundedBatches) return std::nullopt;
  return total;
}

nb::dict StatsToDict(const ConsumerStats& s) {
  nb::dict d;
  d["batches"] = s.batches;
  d["samples"] = s.samples;
  d["time_to_first_batch_s"] = s.time_to_first_batch_s;
  d["wait_s"] = s.wait_s;
  d["busy_s"] = s.busy_s;
  d["steady_s"] = s.steady_s;
  d["elapsed_s"] = s.elapsed_s;
  d["wait_time_ratio"] = s.wait_time_ratio();
  return d;
}

void RegisterRunRules(nb::module_& m) {
  // The engine's rules, for the Ray rank and the PyTorch adapter, so that Python does not
  // restate them: the run's and a blend's entries' error budgets (exec/run_budget.h), the
  // consumer's wait accounting (exec/consumer_clock.h) and the run-wide batch index
  // (exec/epoch_order.h).
  nb::class_<RunBudget>(m, "_RunBudget")
      .def("__init__",
           [](RunBudget* b, const PipelineSpec& spec) {
             new (b) RunBudget(RunBudgetOptionsOf(spec));
           },
           nb::arg("spec"), "The error budgets `spec` sets (errors.*, source.mix[i].max_error_rate)")
      .def("count",
           [](RunBudget& b, const nb::handle& tally, const std::vector<std::string>& errors) {
             if (Status counted = b.Count(TallyFromPython(tally), errors); !counted.ok()) {
               throw StatusError(counted);
             }
           },
           nb::arg("tally"), nb::arg("errors"),
           "A batch consumed here: its tally (a worker's take(k, tally=True)) and its errors")
      .def("check",
           [](const RunBudget& b, bool at_end, int64_t others_delivered, int64_t others_failed,
              int rank) {
             const Status status =
                 b.Check(at_end, ErrorCounts{others_delivered, others_failed}, rank);
             if (!status.ok()) throw StatusError(status);
           },
           nb::arg("at_end"), nb::arg("others_delivered") = 0, nb::arg("others_failed") = 0,
           nb::arg("rank") = -1)
      .def_prop_ro("delivered", [](const RunBudget& b) { return b.run().counts().delivered; })
      .def_prop_ro("failed", [](const RunBudget& b) { return b.run().counts().failed; })
      .def("entry_stats",
           [](const RunBudget& b) {
             nb::dict d;
             for (const EntryCounts& e : b.entry_counts()) {
               SetEntryStats(d, e.name, e.counts.delivered, e.counts.failed);
             }
             return d;
           },
           "A blend: each entry's samples and errors so far, under stats()'s keys");
  nb::class_<ConsumerClock>(m, "_ConsumerClock")
      .def(nb::init<double>(), nb::arg("created_s"))
      .def("returned", &ConsumerClock::Returned, nb::arg("call_s"), nb::arg("now_s"),
           nb::arg("got"), nb::arg("samples"))
      .def_prop_ro("started", &ConsumerClock::started)
      .def("stats", [](const ConsumerClock& c) { return StatsToDict(c.stats()); });
  m.def("_rank_share",
        [](int64_t batches_per_epoch, int64_t batch_size, int world_size,
           std::optional<int64_t> epochs) {
          const RankShare share =
              ValueOrThrow(RankShareOf(batches_per_epoch, batch_size, world_size, epochs));
          return nb::make_tuple(share.batches_per_epoch, OptionalBatches(share.total_batches));
        },
        nb::arg("batches_per_epoch"), nb::arg("batch_size"), nb::arg("world_size"),
        nb::arg("epochs").none(),
        "(each rank's batches of an epoch, of the run or None without an end) of a run whose "
        "epochs have `batches_per_epoch` batches over `world_size` ranks (RankShareOf)");
  m.def("_run_batch_index",
        [](int64_t local_index, int64_t batches_per_epoch, int world_size, int rank) {
          return RunWideIndex(PositionOf(local_index, batches_per_epoch, world_size, rank),
                              batches_per_epoch);
        },
        nb::arg("local_index"), nb::arg("batches_per_epoch"), nb::arg("world_size"),
        nb::arg("rank"));
}

}  // namespace headrace::python
