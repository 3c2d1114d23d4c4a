#include "headrace/exec/consumer_clock.h"

namespace headrace {

void ConsumerClock::Returned(double call_s, double now_s, bool got, int64_t samples) {
  if (started_) {
    stats_.busy_s += call_s - last_return_s_;
    stats_.wait_s += now_s - call_s;
    stats_.steady_s = now_s - first_batch_s_;
  } else if (got) {
    started_ = true;
    first_batch_s_ = now_s;
    stats_.time_to_first_batch_s = now_s - created_s_;
  }
  last_return_s_ = now_s;
  stats_.elapsed_s = now_s - created_s_;
  if (got && samples > 0) {
    ++stats_.batches;
    stats_.samples += samples;
  }
}

}  // namespace headrace
