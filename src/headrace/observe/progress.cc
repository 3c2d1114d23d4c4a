#include "headrace/observe/progress.h"

#include <algorithm>
#include <cmath>

namespace headrace {
namespace {

// 1234567 -> "1,234,567"
std::string Grouped(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string Duration(double seconds) {
  const auto s = static_cast<int64_t>(std::llround(std::max(0.0, seconds)));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60),
                  static_cast<long long>(s % 60));
  }
  return buf;
}

}  // namespace

std::string ProgressLine(const RunReport& r, double rate, int64_t limit_batches) {
  char buf[160];
  std::string line;
  std::snprintf(buf, sizeof buf, "%.1f s  %s samples  %.0f samples/s  wait %.1f%%", r.elapsed_s,
                Grouped(r.samples).c_str(), std::max(0.0, rate), 100 * r.wait_time_ratio);
  line = buf;
  if (r.batches == 0) return line + "  waiting for the first batch";
  if (!r.bottleneck.empty()) line += "  bottleneck " + r.bottleneck;
  int64_t total = r.total_batches;
  if (limit_batches >= 0 && (total < 0 || limit_batches < total)) total = limit_batches;
  if (total >= 0) {
    line += "  batch " + Grouped(r.batches) + "/" + Grouped(total);
    const double batches_per_s = r.batch_size > 0 ? rate / static_cast<double>(r.batch_size) : 0;
    if (batches_per_s > 0) {
      line += "  ETA " + Duration(static_cast<double>(std::max<int64_t>(0, total - r.batches)) /
                                  batches_per_s);
    }
  }
  if (r.errors_total > 0) line += "  skipped " + Grouped(r.errors_total);
  return line;
}

ProgressPrinter::ProgressPrinter(std::FILE* out, bool live, double period_s,
                                 int64_t limit_batches)
    : out_(out), live_(live), period_s_(period_s), limit_batches_(limit_batches) {}

void ProgressPrinter::Update(const RunReport& report, const TimelinePoint& point) {
  if (point.dt_s > 0) {
    // Smoothing of a few seconds' span whatever the sampling interval.
    const double alpha = std::min(1.0, point.dt_s / 3.0);
    rate_ = rate_ < 0 ? point.samples_per_s : rate_ + alpha * (point.samples_per_s - rate_);
  }
  const std::string line = ProgressLine(report, std::max(0.0, rate_), limit_batches_);
  if (live_) {
    // \r back to the start, \x1b[K clears what a longer line left.
    std::fprintf(out_, "\r%s\x1b[K", line.c_str());
    shown_ = true;
  } else {
    // 10% slack: samples land near, not on, the period (the consumer's clock moves at Next()).
    if (report.elapsed_s - printed_at_ < 0.9 * period_s_) return;
    printed_at_ = report.elapsed_s;
    std::fprintf(out_, "headrace: %s\n", line.c_str());
  }
  std::fflush(out_);
}

void ProgressPrinter::Finish() {
  if (!live_ || !shown_) return;
  std::fputs("\r\x1b[K", out_);
  std::fflush(out_);
  shown_ = false;
}

}  // namespace headrace
