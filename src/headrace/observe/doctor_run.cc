// DoctorRun: the bounded run behind `headrace doctor` and `headrace.doctor` (doctor.h).
#include "headrace/observe/doctor.h"

#include <algorithm>
#include <chrono>

namespace headrace {

Result<std::unique_ptr<DoctorRun>> DoctorRun::Start(const PipelineSpec& spec,
                                                    int64_t baseline_rss_bytes) {
  HR_ASSIGN_OR_RETURN(std::unique_ptr<Loader> loader, Loader::Make(spec));
  auto run = std::unique_ptr<DoctorRun>(new DoctorRun());
  run->loader_ = std::move(loader);
  run->step_ = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double, std::milli>(spec.trainer.step_ms));
  run->baseline_rss_bytes_ = baseline_rss_bytes;
  return run;
}

namespace {

// The time from now to `t`, 0 when it passed, at most a year (no overflow for
// time_point::max(), and waits the standard library converts safely).
Clock::duration TimeUntil(Clock::time_point t) {
  constexpr Clock::duration kYear = std::chrono::hours(24 * 365);
  const Clock::time_point now = Clock::now();
  if (t <= now) return Clock::duration::zero();
  return t - now >= kYear ? kYear : t - now;
}

}  // namespace

Clock::time_point DoctorDeadline(double seconds) {
  constexpr double kYearSeconds = 365.0 * 24 * 3600;
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(std::clamp(seconds, 0.0, kYearSeconds)));
}

Result<bool> DoctorRun::RunUntil(Clock::time_point until) {
  while (true) {
    {
      // The trainer's step on the batch it took last.
      std::unique_lock lock(mu_);
      cancelled_cv_.wait_for(lock, TimeUntil(std::min(step_end_, until)),
                             [&] { return cancelled_; });
      if (cancelled_) return Status::Cancelled("the doctor's run was cancelled");
    }
    if (Clock::now() >= until) return false;
    // Waits for the next batch only until `until`: a stalled source ends a bounded run
    // too (its report shows the reads that did not come).
    if (!loader_->WaitReady(TimeUntil(until))) return false;
    HR_ASSIGN_OR_RETURN(std::optional<Batch> batch, loader_->Next());
    if (!batch) return true;
    step_end_ = Clock::now() + step_;
  }
}

void DoctorRun::Cancel() {
  {
    std::lock_guard lock(mu_);
    cancelled_ = true;
  }
  cancelled_cv_.notify_all();
  loader_->Cancel();
}

RunReport DoctorRun::Report() const { return BuildRunReport(*loader_, baseline_rss_bytes_); }

}  // namespace headrace
