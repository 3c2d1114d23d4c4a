// Batch forming from Python: a run's BatchFormer (exec/batch_former.h) over input batches
// that Python hands it. A Ray rank (python/headrace/ray/loader.py) receives its input
// batches from the workers as numpy arrays and forms its batches (batch.pack,
// batch.max_tokens) with the former a local Loader with the same options holds, so that
// the consumer's loop (pop, push, count the losses, hold the errors of empty batches) is
// the C++ one, not restated in Python.
//
//   rank's Python thread                                   (this file)
//   former.next(input) ── GIL released ──▶ BatchFormer::Next(input)
//                                            input.Next() ── GIL taken ──▶ pull()
//                                            ◀── the stream's next item, copied in
//                                            input.CountLost() ── GIL taken ──▶ RunBudget
//                      ◀── BatchToPython(packed batch)
//
// Design decision: the input pulls. PulledInput::Next calls a Python callable (the rank's
// stream) on the thread that called former.next(), taking the GIL only for that call and
// the copy of its arrays. The former's loop needs a variable number of input batches per
// output (none while a formed batch waits; several in a replay or before a deliver-from
// position), which only it knows while it runs: pushing from Python would need the loop
// to stop and resume around every missing input, a contract BatchFormer::Next does not
// have. Pulling keeps the BatchInput contract as the engine implements it (Next returns
// the next batch), nothing waits on another thread, and the packing itself runs without
// the GIL (the rank's heartbeat and metrics threads go on).
//
// Threads: one Python thread calls next(); state() and stats() from any.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "headrace/exec/batch_former.h"
#include "headrace/pipeline/loader.h"
#include "run_state.h"

namespace headrace::python {
namespace {

// The batch's errors from a worker's tally (loader.cc TallyToPython: (kind, entry, epoch,
// index, uri, message) per error), as the worker's engine had them: their text is the
// worker's, byte for byte.
std::vector<SampleError> SampleErrorsFromTally(const nb::handle& tally) {
  std::vector<SampleError> errors;
  for (nb::handle item : nb::cast<nb::tuple>(tally)[2]) {
    const nb::tuple e = nb::cast<nb::tuple>(item);
    errors.push_back(SampleError{nb::cast<int64_t>(e[2]), nb::cast<int64_t>(e[3]),
                                 nb::cast<std::string>(e[4]),
                                 Status(StatusCodeNamed(nb::cast<std::string>(e[0])).value_or(StatusCode::kInternal),
                                        nb::cast<std::string>(e[5]))});
  }
  return errors;
}

// The input batches of a former, pulled from a Python callable: `pull()` returns the next
// one as (item, tally, others) or None after the last, where item is BatchToPython's tuple
// of an input batch of numpy arrays (its errors taken from `tally`, which has them whole),
// and others the (delivered, failed) of the other ranks that the run's budget adds. Its
// losses are counted in the rank's RunBudget (`_RunBudget`), and the budgets applied as
// the local loader's engine applies them (Engine::CountLost).
class PulledInput final : public BatchInput {
 public:
  PulledInput(nb::object pull, nb::object budget, int rank, int64_t batches_per_epoch,
              const PyPrepared& prepared)
      : pull_(std::move(pull)),
        budget_owner_(std::move(budget)),
        budget_(nb::cast<RunBudget*>(budget_owner_)),
        rank_(rank),
        batches_per_epoch_(batches_per_epoch),
        layout_(prepared.prepared->fields()),
        entry_of_(EntryOfSource(prepared.prepared)) {
    layout_.push_back(FieldSpec{"index", DType::kI64, {}});
  }

  // Called without the GIL (by the former, inside former.next()).
  Result<std::optional<Batch>> Next() override {
    nb::gil_scoped_acquire gil;
    try {
      nb::object next = pull_();
      if (next.is_none()) return std::optional<Batch>();
      const nb::tuple got = nb::cast<nb::tuple>(next);
      const nb::tuple item = nb::cast<nb::tuple>(got[0]);
      Batch in = Input(nb::cast<nb::dict>(item[0]));
      in.epoch = nb::cast<int64_t>(item[1]);
      in.index_in_epoch = nb::cast<int64_t>(item[2]);
      in.global_index = nb::cast<int64_t>(item[3]);
      in.errors = SampleErrorsFromTally(got[1]);
      const nb::tuple others = nb::cast<nb::tuple>(got[2]);
      others_ = ErrorCounts{nb::cast<int64_t>(others[0]), nb::cast<int64_t>(others[1])};
      return std::optional<Batch>(std::move(in));
    } catch (nb::python_error& e) {
      // Raised again as it was once the former returns (RethrowRaised): a worker lost for
      // good, the run's error budget, Ctrl-C.
      raised_.emplace(std::move(e));
      return Status::Cancelled("the rank's stream raised");
    } catch (const StatusError& e) {
      return e.status();
    } catch (const std::exception& e) {
      return Status::InvalidArgument(std::string("packing: an input batch: ") + e.what());
    }
  }
  // The former pulls only when it has nothing to return: the pull is the wait.
  bool WaitReady(std::chrono::nanoseconds) override { return true; }
  int64_t batches_per_epoch() const override { return batches_per_epoch_; }
  // A rank's batch memory is no engine's budget: the window's bytes are in the stats
  // (pack_window_bytes).
  void ChargeHeld(int64_t) override {}
  Status CountLost(std::span<const LostSample> lost, bool at_end) override {
    nb::gil_scoped_acquire gil;  // the budget is read from Python (stats) with it held
    budget_->CountLost(lost, entry_of_);
    if (lost.empty()) return Status::Ok();  // the pull applied the budgets to this batch
    return budget_->Check(at_end, others_, rank_);
  }

  // With the GIL: raises the exception the pull raised during the last former.next().
  void RethrowRaised() {
    if (!raised_.has_value()) return;
    nb::python_error e = std::move(*raised_);
    raised_.reset();
    throw e;
  }

 private:
  // The numpy batch as the former's input: its fields copied (each must have the
  // pipeline's dtype), its strings.
  Batch Input(const nb::dict& fields) const {
    Batch in;
    const nb::object ascontiguous = Numpy().attr("ascontiguousarray");
    for (const FieldSpec& field : layout_) {
      if (!fields.contains(field.name.c_str())) {
        throw StatusError(Status::InvalidArgument("packing: the batch has no field '" +
                                                  field.name + "'"));
      }
      auto array = nb::cast<nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>>(
          ascontiguous(fields[field.name.c_str()]));
      std::vector<int64_t> shape;
      for (size_t d = 0; d < array.ndim(); ++d) shape.push_back(static_cast<int64_t>(array.shape(d)));
      Tensor t = ValueOrThrow(Tensor::Allocate(field.dtype, shape));
      if (array.nbytes() != t.nbytes()) {
        throw StatusError(Status::InvalidArgument("packing: field '" + field.name +
                                                  "' has another dtype than the pipeline's"));
      }
      if (t.nbytes() > 0) std::memcpy(t.mutable_data<uint8_t>(), array.data(), t.nbytes());
      in.fields.emplace_back(field.name, std::move(t));
    }
    // A balanced worker's samples' kinds (batch.balance.every_rank), for the former.
    if (const nb::str kinds(kSampleKindsField.data(), kSampleKindsField.size());
        fields.contains(kinds)) {
      auto array = nb::cast<nb::ndarray<nb::ro, int32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>>(
          ascontiguous(fields[kinds]));
      Tensor t = ValueOrThrow(Tensor::Allocate(DType::kI32, {static_cast<int64_t>(array.shape(0))}));
      if (t.nbytes() > 0) std::memcpy(t.mutable_data<uint8_t>(), array.data(), t.nbytes());
      in.fields.emplace_back(std::string(kSampleKindsField), std::move(t));
    }
    for (auto [key, value] : fields) {
      if (!nb::isinstance<nb::list>(value)) continue;
      Batch::Strings column{nb::cast<std::string>(key), false, {}};
      for (nb::handle row : value) {
        if (row.is_none()) {
          column.rows.emplace_back();
        } else if (nb::isinstance<nb::list>(row)) {
          column.list = true;
          std::vector<std::string> items;
          for (nb::handle s : row) items.push_back(nb::cast<std::string>(s));
          column.rows.push_back(std::move(items));
        } else {
          column.rows.push_back({nb::cast<std::string>(row)});
        }
      }
      in.strings.push_back(std::move(column));
    }
    return in;
  }

  const nb::object pull_;
  const nb::object budget_owner_;  // keeps budget_ alive
  RunBudget* const budget_;
  const int rank_;
  const int64_t batches_per_epoch_;
  std::vector<FieldSpec> layout_;  // the pipeline's fields and "index"
  const EntryOf entry_of_;
  ErrorCounts others_;                      // with the last batch pulled
  std::optional<nb::python_error> raised_;  // by the last pull, until RethrowRaised
};

// A run's former (PreparedPipeline::Form) and where its input starts.
class PyFormer {
 public:
  // The former a local run of `prepared` for `rank` of `world_size` from (start_epoch,
  // start_batch) holds (continuing `pack_state`; over the rest of an epoch with
  // `remainder`), made for batches that arrive computed: packs are not planned.
  static std::unique_ptr<PyFormer> Make(const PyPrepared& prepared, int rank, int world_size,
                                        int64_t start_epoch, int64_t start_batch,
                                        const nb::object& pack_state, const nb::object& remainder,
                                        const nb::object& blend_start) {
    LoaderOptions options = LocalRunOptions(rank, world_size, start_epoch, start_batch,
                                            pack_state, remainder, blend_start);
    options.plan_packing = false;  // the workers ran the samples
    std::optional<Result<PreparedPipeline::Forming>> formed;
    {
      nb::gil_scoped_release nogil;
      formed.emplace(prepared.prepared->Form(options));
    }
    PreparedPipeline::Forming forming = ValueOrThrow(std::move(*formed));
    auto out = std::unique_ptr<PyFormer>(new PyFormer());
    out->former_ = std::move(forming.former);
    out->start_ = {forming.engine.start_epoch, forming.engine.start_batch};
    return out;
  }

  // The next formed batch as BatchToPython's tuple, or None at the end of the input.
  nb::object Next(PulledInput& input) {
    std::optional<Result<std::optional<Batch>>> next;
    {
      nb::gil_scoped_release nogil;
      next.emplace(former_->Next(input));
    }
    input.RethrowRaised();
    std::optional<Batch> batch = ValueOrThrow(std::move(*next));
    if (!batch.has_value()) return nb::none();
    return BatchToPython(*batch);
  }

  const BatchFormer& former() const { return *former_; }
  std::pair<int64_t, int64_t> start() const { return start_; }

 private:
  PyFormer() = default;
  std::shared_ptr<BatchFormer> former_;
  std::pair<int64_t, int64_t> start_;
};

}  // namespace

void RegisterFormers(nb::module_& m) {
  nb::class_<PulledInput>(m, "_PulledInput")
      .def(nb::init<nb::object, nb::object, int, int64_t, const PyPrepared&>(), nb::arg("pull"),
           nb::arg("budget"), nb::arg("rank"), nb::arg("batches_per_epoch"),
           nb::arg("prepared"),
           "A former's input batches from `pull()`: (item, tally, others) or None after the "
           "last (see python/src/former.cc); the losses counted in `budget` (a _RunBudget)");
  nb::class_<PyFormer>(m, "_Former")
      .def_static("make", &PyFormer::Make, nb::arg("prepared"), nb::arg("rank"),
                  nb::arg("world_size"), nb::arg("start_epoch"), nb::arg("start_batch"),
                  nb::arg("pack_state").none() = nb::none(),
                  nb::arg("remainder").none() = nb::none(),
                  nb::arg("blend_start").none() = nb::none(),
                  "The former a local run with these options holds (PreparedPipeline::Form), "
                  "for batches computed elsewhere (packs not planned)")
      .def_prop_ro("name", [](const PyFormer& f) { return std::string(f.former().name()); })
      .def_prop_ro("start", &PyFormer::start,
                   "(epoch, batch) of the first input batch: the former may move the run's "
                   "start (a saved window restarts where it began)")
      .def("next", &PyFormer::Next, nb::arg("input"))
      .def_prop_ro("inputs_held", [](const PyFormer& f) { return f.former().inputs_held(); },
                   "Input batches pulled and not yet wholly delivered")
      .def("state",
           [](const PyFormer& f) -> nb::object {
             const std::optional<PackState> state = f.former().state();
             if (!state.has_value()) return nb::none();
             return PackStateToDict(*state);
           },
           "Where the former stands after the last batch next() returned (None before the "
           "first, or for a former without state)")
      .def("stats", [](const PyFormer& f) -> nb::object {
        const std::optional<PackStats> stats = f.former().stats();
        if (!stats.has_value()) return nb::dict();
        return PackStatsToDict(*stats);
      });
}

}  // namespace headrace::python
