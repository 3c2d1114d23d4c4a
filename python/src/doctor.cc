// headrace.doctor from Python (`_doctor`): a bounded run of a pipeline against the
// simulated trainer, then what observe/doctor.h makes of its report.
#include <nanobind/stl/string.h>

#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "common.h"
#include "headrace/observe/doctor.h"
#include "headrace/observe/report.h"

namespace headrace::python {
namespace {

// headrace.doctor: a bounded run of `spec` against the simulated trainer, then its
// diagnosis, as (diagnosis JSON, run report JSON). The run goes without the GIL (a Python
// op's threads take it), in slices of kSignalPoll with signal checks between them; the
// run is cancelled and joined without the GIL when a signal raises.
nb::tuple Doctor(const PipelineSpec& spec, double seconds, double storage_mb_s) {
  if (!(seconds > 0) || !std::isfinite(seconds)) {
    throw StatusError(Status::InvalidArgument("seconds must be a positive number, got " +
                                              std::to_string(seconds)));
  }
  std::unique_ptr<DoctorRun> run;
  const auto stop = [&run] {
    nb::gil_scoped_release nogil;
    if (run) run->Cancel();
    run.reset();  // joins the engine's threads, which may wait for the GIL
  };
  {
    std::optional<Result<std::unique_ptr<DoctorRun>>> made;
    {
      nb::gil_scoped_release nogil;
      made.emplace(DoctorRun::Start(spec, CurrentRssBytes()));
    }
    run = ValueOrThrow(std::move(*made));
  }
  const auto deadline = DoctorDeadline(seconds);
  while (true) {
    std::optional<Result<bool>> ran;
    {
      nb::gil_scoped_release nogil;
      ran.emplace(run->RunUntil(std::min(deadline, Clock::now() + kSignalPoll)));
    }
    if (!ran->ok()) {
      const Status failed = ran->status();
      stop();
      throw StatusError(failed);
    }
    if (**ran || Clock::now() >= deadline) break;
    if (PyErr_CheckSignals() != 0) {
      stop();
      throw nb::python_error();
    }
  }
  std::string diagnosis, report;
  {
    nb::gil_scoped_release nogil;
    const RunReport r = run->Report();
    DoctorOptions options;
    options.storage_mb_s = storage_mb_s;
    diagnosis = DiagnosisToJson(DiagnoseRun(r, options));
    report = RunReportToJson(r);
    run.reset();
  }
  return nb::make_tuple(diagnosis, report);
}

}  // namespace

void RegisterDoctor(nb::module_& m) {
  m.def("_doctor", &Doctor, nb::arg("spec"), nb::arg("seconds"), nb::arg("storage_mb_s") = 0.0);
}

}  // namespace headrace::python
