// The Loader from Python: the C++ Loader with the GIL released during all engine work
// and while waiting for a batch (`_Loader`), the pipeline prepared once that starts its
// runs (`_Prepared`), and the metrics endpoint that serves whichever run is attached
// (`_MetricsServer`). The rules the Ray rank and the PyTorch adapter call are in
// run_rules.cc, the doctor in doctor.cc.
//
// Threads: Next() is called by one Python thread at a time (the Python Loader is an
// iterator). On an on-demand loader (a Ray worker), Submit()/Take() are called from any
// number of Python threads at once (one per pending call), each waiting without the GIL.
// Engine threads take the GIL only inside Python operators. The destructor
// releases the GIL before cancelling the engine, because joining its threads may wait
// for an operator that is waiting for the GIL.
#include "headrace/pipeline/loader.h"

#include <nanobind/ndarray.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>

#include "common.h"
#include "run_state.h"
#include "headrace/observe/metrics_server.h"
#include "headrace/observe/prometheus.h"
#include "headrace/observe/report.h"

namespace headrace::python {

// A packer's state as a state dict holds it, and back (LoaderOptions::pack_state).
nb::dict PackStateToDict(const PackState& s) {
  nb::dict d;
  d["epoch"] = s.epoch;
  d["from_batch"] = s.from_batch;
  d["next_batch"] = s.next_batch;
  d["delivered"] = s.delivered;
  nb::list waiting;
  for (int64_t i : s.waiting) waiting.append(i);
  d["waiting"] = waiting;
  if (s.shared) d["shared"] = true;  // absent: a rank's own window (states of older runs)
  return d;
}

// Which blend entry a dataset index of `prepared`'s source is in; null unless a blend.
EntryOf EntryOfSource(std::shared_ptr<const PreparedPipeline> prepared) {
  if (prepared->source().info().entries.empty()) return nullptr;
  return [prepared = std::move(prepared)](int64_t index) {
    return prepared->source().EntryOf(index);
  };
}

nb::dict PackStatsToDict(const PackStats& p) {
  nb::dict d;
  d["pack_rows"] = p.rows;
  d["pack_samples"] = p.samples;
  d["pack_tokens"] = p.tokens;
  d["pack_padding_tokens"] = p.padding_tokens;
  d["pack_fill"] = p.fill();
  d["pack_vision_tokens"] = p.vision_tokens;
  d["pack_truncated"] = p.truncated;
  d["pack_skipped"] = p.skipped;
  d["pack_failed"] = p.failed;
  d["pack_window_samples"] = p.window_samples;
  d["pack_window_bytes"] = p.window_bytes;
  d["pack_max_window_bytes"] = p.max_window_bytes;
  d["pack_bytes_copied"] = p.bytes_copied;
  d["pack_planned_batches"] = p.planned_batches;
  return d;
}

namespace {

class PyLoader {
 public:
  // Prepares `spec` and runs it (a one-off; a Python Loader keeps a _Prepared instead).
  static std::unique_ptr<PyLoader> Make(const PipelineSpec& spec, int rank, int world_size,
                                        int64_t start_epoch, int64_t start_batch, bool pinned,
                                        bool on_demand) {
    return Run(Prepare(spec), rank, world_size, start_epoch, start_batch, pinned, on_demand,
               nb::none());
  }

  static std::shared_ptr<const PreparedPipeline> Prepare(const PipelineSpec& spec) {
    std::optional<Result<std::shared_ptr<const PreparedPipeline>>> prepared;
    {
      nb::gil_scoped_release nogil;
      prepared.emplace(PreparedPipeline::Make(spec));
    }
    return ValueOrThrow(std::move(*prepared));
  }

  // A run of `prepared` from (start_epoch, start_batch) for `rank` of `world_size`.
  static std::unique_ptr<PyLoader> Run(const std::shared_ptr<const PreparedPipeline>& prepared,
                                       int rank, int world_size, int64_t start_epoch,
                                       int64_t start_batch, bool pinned, bool on_demand,
                                       const nb::object& pack_state,
                                       const nb::object& remainder = nb::none(),
                                       const nb::object& blend_start = nb::none(),
                                       int balance_ranks = 0) {
    LoaderOptions options = LocalRunOptions(rank, world_size, start_epoch, start_batch,
                                            pack_state, remainder, blend_start);
    if (on_demand) options.schedule = Schedule::kOnDemand;
    options.balance_ranks = balance_ranks;
    if (pinned) options.allocator = PinnedAllocator();
    if (world_size < 1 || rank < 0 || rank >= world_size) {
      throw StatusError(Status::InvalidArgument(
          "rank must be in [0, world_size) and world_size >= 1 (got rank " + std::to_string(rank) +
          ", world_size " + std::to_string(world_size) + ")"));
    }
    std::optional<Result<std::unique_ptr<Loader>>> made;
    {
      nb::gil_scoped_release nogil;
      made.emplace(prepared->Run(options));
    }
    auto loader = std::unique_ptr<PyLoader>(new PyLoader());
    loader->loader_ = ValueOrThrow(std::move(*made));
    return loader;
  }

  ~PyLoader() { Close(); }

  // The next batch as BatchToPython's tuple, or None at the end of the run. Waits in
  // slices of kSignalPoll without the GIL, checking for signals between them, so that
  // Ctrl-C in a loop waiting on a stalled source raises KeyboardInterrupt at once
  // instead of when the engine returns.
  nb::object Next() {
    if (!loader_) throw StatusError(Status::Cancelled("the loader is closed"));
    while (true) {
      bool ready = false;
      {
        nb::gil_scoped_release nogil;
        ready = loader_->WaitReady(kSignalPoll);
      }
      if (ready) break;
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
    }
    std::optional<Result<std::optional<Batch>>> next;
    {
      nb::gil_scoped_release nogil;
      next.emplace(loader_->Next());
    }
    std::optional<Batch> batch = ValueOrThrow(std::move(*next));
    if (!batch) return nb::none();
    return BatchToPython(*batch);
  }

  // Schedule::kOnDemand: queues run-wide batch `batch` for computing.
  void Submit(int64_t batch) {
    Status submitted;
    {
      nb::gil_scoped_release nogil;
      submitted = loader().Submit(batch);
    }
    if (!submitted.ok()) throw StatusError(submitted);
  }

  // Schedule::kOnDemand: waits for submitted batch `batch` (without the GIL, noticing
  // signals between slices as Next() does) and returns BatchToPython's tuple; with
  // `tally`, (that tuple, the batch's tally: TallyToPython of RunBudget::Tally): what the
  // batch adds to the error budgets of the Ray rank that consumes it, each row and error
  // given its blend entry here, where the batch is whole.
  nb::object Take(int64_t batch, bool tally) {
    // A handle of its own: Close() from another thread must not free the loader under a
    // waiting Take (it cancels it instead).
    std::shared_ptr<Loader> held = loader_;
    if (!held) throw StatusError(Status::Cancelled("the loader is closed"));
    Loader& l = *held;
    while (true) {
      bool ready = false;
      {
        nb::gil_scoped_release nogil;
        ready = l.WaitTakeable(batch, kSignalPoll);
      }
      if (ready) break;
      if (PyErr_CheckSignals() != 0) throw nb::python_error();
    }
    std::optional<Result<Batch>> taken;
    {
      nb::gil_scoped_release nogil;
      taken.emplace(l.Take(batch));
    }
    Batch out = ValueOrThrow(std::move(*taken));
    if (!tally) return BatchToPython(out);
    const std::shared_ptr<const PreparedPipeline> prepared = l.prepared().shared_from_this();
    return nb::make_tuple(
        BatchToPython(out),
        TallyToPython(RunBudget::Tally(out, EntryOfSource(prepared),
                                       prepared->source().info().entries.size()),
                      out));
  }

  // Stops the run from any thread: pending Take() calls return kCancelled.
  void Cancel() {
    if (!loader_) return;
    nb::gil_scoped_release nogil;
    loader_->Cancel();
  }

  void Close() {
    std::shared_ptr<Loader> loader = std::move(loader_);  // with the GIL: Take() copies it
    if (!loader) return;
    nb::gil_scoped_release nogil;
    loader->Cancel();
    loader.reset();  // the last Take() still waiting, if any, frees it when it returns
  }

  const Loader& loader() const {
    if (!loader_) throw StatusError(Status::Cancelled("the loader is closed"));
    return *loader_;
  }
  Loader& loader() {
    if (!loader_) throw StatusError(Status::Cancelled("the loader is closed"));
    return *loader_;
  }
  std::shared_ptr<Loader> shared() const { return loader_; }

 private:
  PyLoader() = default;
  std::shared_ptr<Loader> loader_;
};

// The metrics endpoint of a Python loader (`Loader(metrics_port=...)`): it outlives the
// engines a loader goes through (a resume, set_epoch, epochs' ends start new ones) and
// serves the one attached now; after detach it keeps serving the last engine's final
// metrics. It holds the engine weakly: closing a loader never waits for a scrape, and a
// scrape in progress keeps the engine alive until it returns.
class PyMetricsServer {
 public:
  PyMetricsServer(const std::string& host, int port, MetricLabels labels)
      : labels_(std::move(labels)) {
    std::optional<Result<std::unique_ptr<MetricsServer>>> started;
    {
      nb::gil_scoped_release nogil;
      started.emplace(MetricsServer::Start(host, port, [this] { return Render(); }));
    }
    server_ = ValueOrThrow(std::move(*started));
  }

  void Attach(const PyLoader* loader) {
    std::shared_ptr<Loader> next = loader != nullptr ? loader->shared() : nullptr;
    nb::gil_scoped_release nogil;
    std::lock_guard lock(mu_);
    if (auto current = attached_.lock(); current != nullptr && current != next) {
      frozen_ = PrometheusText(BuildRunReport(*current, 0), labels_);
    }
    attached_ = next;
  }

  int port() const { return server_->port(); }
  std::string url() const { return server_->url(); }
  void Close() {
    nb::gil_scoped_release nogil;
    server_.reset();
  }

 private:
  std::string Render() {
    std::lock_guard lock(mu_);
    if (auto loader = attached_.lock(); loader != nullptr) {
      return PrometheusText(BuildRunReport(*loader, 0), labels_);
    }
    return frozen_;
  }

  const MetricLabels labels_;
  std::mutex mu_;
  std::weak_ptr<Loader> attached_;  // guarded by mu_
  std::string frozen_;              // guarded by mu_: the last engine's, once detached
  std::unique_ptr<MetricsServer> server_;
};

}  // namespace

void RegisterLoader(nb::module_& m) {
  nb::class_<PyMetricsServer>(m, "_MetricsServer")
      .def(nb::init<const std::string&, int, MetricLabels>(), nb::arg("host"), nb::arg("port"),
           nb::arg("labels"))
      .def("attach", &PyMetricsServer::Attach, nb::arg("loader").none())
      .def_prop_ro("port", &PyMetricsServer::port)
      .def_prop_ro("url", &PyMetricsServer::url)
      .def("close", &PyMetricsServer::Close);
  m.def("_parse_listen_address", [](const std::string& text, const std::string& default_host) {
    std::string host;
    int port = 0;
    if (Status parsed = ParseListenAddress(text, default_host, &host, &port); !parsed.ok()) {
      throw StatusError(parsed);
    }
    return std::make_pair(host, port);
  }, nb::arg("text"), nb::arg("default_host"));
  // A pipeline prepared once (pipeline/prepared.h): its source opened, its chain planned.
  // Each run() is a new engine over them, so a reposition reloads nothing.
  nb::class_<PyPrepared>(m, "_Prepared")
      .def_static("make",
                  [](const PipelineSpec& spec) { return PyPrepared{PyLoader::Prepare(spec)}; },
                  nb::arg("spec"))
      .def("run",
           [](const PyPrepared& p, int rank, int world_size, int64_t start_epoch,
              int64_t start_batch, bool pinned, bool on_demand, const nb::object& pack_state,
              const nb::object& remainder, const nb::object& blend_start, int balance_ranks) {
             return PyLoader::Run(p.prepared, rank, world_size, start_epoch, start_batch,
                                  pinned, on_demand, pack_state, remainder, blend_start,
                                  balance_ranks);
           },
           nb::arg("rank") = 0, nb::arg("world_size") = 1, nb::arg("start_epoch") = 0,
           nb::arg("start_batch") = 0, nb::arg("pinned") = false, nb::arg("on_demand") = false,
           nb::arg("pack_state").none() = nb::none(), nb::arg("remainder").none() = nb::none(),
           nb::arg("blend_start").none() = nb::none(), nb::arg("balance_ranks") = 0,
           "A run; on demand (a Ray worker), batch.balance deals each step over "
           "`balance_ranks` trainer ranks")
      .def("check_on_demand",
           [](const PyPrepared& p, int balance_ranks) {
             LoaderOptions options;
             options.schedule = Schedule::kOnDemand;
             options.balance_ranks = balance_ranks;
             std::optional<Result<PreparedPipeline::Forming>> formed;
             {
               nb::gil_scoped_release nogil;
               formed.emplace(p.prepared->Form(options));
             }
             ThrowIfError(formed->status());
           },
           nb::arg("balance_ranks"),
           "Raises what a Ray worker's on-demand run of this pipeline would refuse, for "
           "trainers of `balance_ranks` ranks")
      .def_prop_ro("source", [](const PyPrepared& p) { return p.prepared->source().info().description; })
      .def("check_state",
           [](const PyPrepared& p, const nb::handle& state) { CheckStateFor(*p.prepared, state); },
           nb::arg("state").none(),
           "Checks what a Loader state dict claims against this pipeline (run_position.cc)")
      .def("blend_picks",
           [](const PyPrepared& p, int64_t epoch, int64_t positions, const nb::object& remainder,
              const nb::object& blend_start) {
             const std::optional<EpochRemainder> rest = OptionalRemainder(remainder);
             const std::vector<int64_t> start = BlendStartFromObject(blend_start);
             nb::gil_scoped_release nogil;
             return ValueOrThrow(p.prepared->BlendPicks(epoch, positions, rest, start));
           },
           nb::arg("epoch"), nb::arg("positions"), nb::arg("remainder").none() = nb::none(),
           nb::arg("blend_start").none() = nb::none(),
           "A blend: each entry's picks in the first `positions` positions of the epoch's "
           "order (of its rest, with `remainder`); [] for another source")
      .def("rank_share",
           [](const PyPrepared& p, int world_size, const nb::object& remainder,
              const nb::object& blend_start) {
             const std::optional<EpochRemainder> rest = OptionalRemainder(remainder);
             const std::vector<int64_t> start = BlendStartFromObject(blend_start);
             std::optional<Result<EpochOrder>> order;
             {
               nb::gil_scoped_release nogil;
               order.emplace(p.prepared->RankOrder(world_size, rest, start));
             }
             const EpochOrder o = ValueOrThrow(std::move(*order));
             return nb::make_tuple(o.batches_per_epoch(), o.batches_per_rank_epoch(),
                                   OptionalBatches(o.total_batches()));
           },
           nb::arg("world_size"), nb::arg("remainder").none() = nb::none(),
           nb::arg("blend_start").none() = nb::none(),
           "(batches of an epoch over all ranks, each rank's share of an epoch, of the run "
           "or None without an end) for `world_size` ranks (of the rest of an epoch, with "
           "`remainder`), checked as a local run's is (PreparedPipeline::RankOrder)");
  nb::class_<PyLoader>(m, "_Loader")
      .def_static("make", &PyLoader::Make, nb::arg("spec"), nb::arg("rank") = 0,
                  nb::arg("world_size") = 1, nb::arg("start_epoch") = 0,
                  nb::arg("start_batch") = 0, nb::arg("pinned") = false,
                  nb::arg("on_demand") = false)
      .def("next", &PyLoader::Next)
      .def("submit", &PyLoader::Submit, nb::arg("batch"))
      .def("take", &PyLoader::Take, nb::arg("batch"), nb::arg("tally") = false)
      .def("cancel", &PyLoader::Cancel)
      .def_prop_ro("manifest_bytes",
                   [](const PyLoader& l) { return l.loader().manifest_bytes(); })
      .def_prop_ro("manifest_mapped_bytes",
                   [](const PyLoader& l) { return l.loader().manifest_mapped_bytes(); })
      .def_prop_ro("permutation_bytes",
                   [](const PyLoader& l) { return l.loader().order().permutation_bytes(); })
      .def("close", &PyLoader::Close)
      .def_prop_ro("next_batch", [](const PyLoader& l) { return l.loader().next_batch(); })
      .def_prop_ro("total_batches",
                   [](const PyLoader& l) { return OptionalBatches(l.loader().total_batches()); })
      .def_prop_ro("batches_per_epoch",
                   [](const PyLoader& l) { return l.loader().batches_per_epoch(); })
      .def_prop_ro("num_samples",
                   [](const PyLoader& l) { return l.loader().num_samples(); })
      .def("consumer_stats",
           [](const PyLoader& l) {
             nb::dict d = StatsToDict(l.loader().consumer_stats());
             if (const auto pack = l.loader().pack_stats(); pack.has_value()) {
               d.update(PackStatsToDict(*pack));
             }
             // batch.balance: the steps dealt and the ranks' costs ("balance.<key>").
             if (const auto b = l.loader().balance_stats(); b.has_value()) {
               d["balance.steps"] = b->steps;
               d["balance.untold"] = b->untold;
               d["balance.slowest_rank_cost_order"] = b->max_before;
               d["balance.slowest_rank_cost"] = b->max_after;
               d["balance.mean_rank_cost"] = b->mean;
               d["balance.short_ranks"] = b->short_ranks;
             }
             // The samples failed, by kind ("errors.<kind>"): data lost to packing
             // among them (pack_skipped, pack_truncated), as the report counts them.
             const EngineMetrics m = l.loader().engine_metrics();
             d["samples_failed"] = m.samples_failed;
             // A size index: samples whose tokens differed from their entries.
             if (m.stale_entries.checked) d["size_index.stale"] = m.stale_entries.count;
             for (const auto& [kind, n] : m.errors_by_kind) d[("errors." + kind).c_str()] = n;
             // A blend: each entry's samples, errors and bytes ("source.<name>.samples").
             for (const EngineMetrics::Entry& e : m.entries) {
               SetEntryStats(d, e.name, e.samples_delivered, e.samples_failed);
               d[("source." + e.name + ".bytes_read").c_str()] = e.bytes_read;
             }
             return d;
           })
      .def("pack_state",
           [](const PyLoader& l) -> nb::object {
             const auto state = l.loader().pack_state();
             if (!state.has_value()) return nb::none();
             return PackStateToDict(*state);
           },
           "With batch.pack: where the packer stands after the last batch next() returned "
           "(None before the first, or without packing)")
      .def("report_json", [](const PyLoader& l) {
        const Loader& loader = l.loader();
        std::string json;
        {
          nb::gil_scoped_release nogil;
          json = RunReportToJson(BuildRunReport(loader, 0));
        }
        return json;
      });
}

}  // namespace headrace::python
