// The sizes a planned batch.pack packs by (exec/pack_planner.h): each sample's token
// count as the chain's size pass tells it (ops/op.h TellRows: image.decode from the
// header, smart_resize, patchify's grid, text.tokenize's tokens), from its record and
// its media read whole through the source's storage. Nothing is decoded. On the caller's
// thread (the engine's driver), a batch's reads issued in a window and waited for.
//
// Design decision: the sizer holds its reads as the read stage holds its own (at most
// io_inflight, at most the I/O budget's bytes, a read past it refused at its gate and
// issued again), in a window of its own rather than through the engine's ReadStage. It
// runs inside Compose, on the driver thread that also issues the samples' reads, and
// what it read stays kept for the samples' runs (ReadMedia) until they take it: charged
// to the read stage's budget, a window of kept media would leave the driver waiting for
// bytes that only the samples it has not yet composed could release. Its bytes are an
// allowance beside the budget (SECURITY.md).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "headrace/exec/engine.h"
#include "headrace/exec/pack_planner.h"

namespace headrace {

// Whether a planned pack can size the samples of `inputs`: one chain, whose ops up to the
// one that tells tokens (text.tokenize unpadded: Telling::kRowsAndTokens) all tell.
bool ChainTellsTokens(const EngineInputs& inputs);
// The index of batch field `name` when the chain tells its tokens before it runs
// (ChainTellsTokens); nullopt otherwise.
std::optional<int> TellingTokenField(const EngineInputs& inputs, std::string_view name);

// What the sizer had of each sample, kept for the engine to run the sample on instead of
// doing it again (BatchFormer::HandOver), keyed by (epoch, index), taken once: at most
// `max_bytes` and `max_samples`, the oldest dropped first (their samples do it again),
// and those of samples a plan leaves out too. Thread-safe.
template <typename T>
class SampleStore {
 public:
  explicit SampleStore(int64_t max_bytes, size_t max_samples = SIZE_MAX)
      : max_bytes_(max_bytes), max_samples_(max_samples) {}
  // Keeps `value` (of BytesOf(value) bytes) unless it alone is over the bytes, or one is
  // kept for the sample already.
  void Put(int64_t epoch, int64_t index, T value);
  std::optional<T> Take(int64_t epoch, int64_t index);
  int64_t bytes() const {
    std::lock_guard lock(mu_);
    return bytes_;
  }

 private:
  mutable std::mutex mu_;
  const int64_t max_bytes_;
  const size_t max_samples_;
  int64_t bytes_ = 0;
  std::map<std::pair<int64_t, int64_t>, T> kept_;
  std::deque<std::pair<int64_t, int64_t>> order_;  // oldest first
};

int64_t BytesOf(const std::vector<Buffer>& media);
int64_t BytesOf(const ToldSequence& told);

// The media the sizer read: at most the I/O budget's bytes (outside it: an allowance).
using ReadMedia = SampleStore<std::vector<Buffer>>;
// The token sequences the sizer's size pass tokenized, for the samples' own size passes
// (text.tokenize takes one whose grids are those its sample made): at most 4096 of 64 MiB.
using ToldSequences = SampleStore<ToldSequence>;
inline constexpr size_t kToldSamples = 4096;
inline constexpr int64_t kToldBytes = int64_t{64} << 20;

template <typename T>
void SampleStore<T>::Put(int64_t epoch, int64_t index, T value) {
  const int64_t n = BytesOf(value);
  if (n > max_bytes_) return;
  std::lock_guard lock(mu_);
  const auto key = std::make_pair(epoch, index);
  if (!kept_.try_emplace(key, std::move(value)).second) return;
  order_.push_back(key);
  bytes_ += n;
  while ((bytes_ > max_bytes_ || kept_.size() > max_samples_) && !order_.empty()) {
    const auto oldest = kept_.find(order_.front());
    order_.pop_front();
    if (oldest == kept_.end()) continue;  // taken already
    bytes_ -= BytesOf(oldest->second);
    kept_.erase(oldest);
  }
}

template <typename T>
std::optional<T> SampleStore<T>::Take(int64_t epoch, int64_t index) {
  std::lock_guard lock(mu_);
  const auto it = kept_.find(std::make_pair(epoch, index));
  if (it == kept_.end()) return std::nullopt;
  T value = std::move(it->second);
  kept_.erase(it);
  bytes_ -= BytesOf(value);
  // Keys taken leave the front of the order as they come to it (samples run about in order).
  while (!order_.empty() && kept_.count(order_.front()) == 0) order_.pop_front();
  return value;
}

// The sizer's reads in flight where the caller has no io_inflight of its own (the index
// build's cores, tests): the engine's automatic floor (kMinAutoIoInflight).
inline constexpr int kSizerInflight = 32;

// The sizer over `inputs` (kept alive by it): the rows of batch field `token_field` told
// for each sample, and where `pack`'s vision token ids lie among them (past
// pack.seq_len); nullopt for a sample whose record, reads or size pass fail. The media
// it read go to `keep`, the token sequences it tokenized to `told` (null: dropped). An
// object over `io_budget_bytes` is not read (the engine fails its sample as it would: it
// can never fit the I/O budget), nor is anything once the run stops. At most
// `max_inflight` reads are in flight at once (the run's execution.io_inflight), holding
// at most `io_budget_bytes` (or one sample's media alone) as the read stage holds its
// reads, and a sample's bytes are dropped once it is sized (unless kept): a call over a
// whole data-parallel step holds the window's media, not the step's. Where
// `image_header_bytes` > 0 (and nothing is kept), an image's first that many bytes are
// read, not the whole object: its size pass reads the header only (image.decode's
// PlanDecode). A sample whose size they cannot tell (a header past them) is not told:
// the caller sizes it again from whole reads (SizeEverySample).
PackPlanner::Sizer SizeByTheSizePass(std::shared_ptr<const EngineInputs> inputs,
                                     int token_field, const PackOptions& pack,
                                     std::shared_ptr<ReadMedia> keep = nullptr,
                                     int64_t io_budget_bytes = INT64_MAX,
                                     std::shared_ptr<ToldSequences> told = nullptr,
                                     int max_inflight = kSizerInflight,
                                     int64_t image_header_bytes = 0);

}  // namespace headrace
