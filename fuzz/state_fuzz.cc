// Fuzz target: a Loader state dict's position (pipeline/run_position.h) as it comes back
// from a checkpoint anyone may edit: CheckLoaderState with and without a pipeline's
// bounds, and MergeLoaderStates of up to 4 rank states, on states read from the bytes.
//
// Values are read one at a time by fuzz_util.h's ValueReader (small values, and every
// int64 through an escape byte). Properties checked besides "no
// crash, no UB (signed overflow included), no leak":
//   - every refusal is kInvalidArgument and names the state ("state dict: ..." or
//     "merge_state_dicts: ...");
//   - a state accepted with bounds is accepted without them, and its positions
//     (batch_in_epoch x world_size x batch_size) are within the epoch it claims;
//   - a merge that succeeds leaves a rest inside kMaxEpochPositions past an earlier
//     remainder, whose pending samples are unique.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "headrace/pipeline/run_position.h"

namespace headrace::fuzz {
namespace {

LoaderState ReadState(ValueReader& r) {
  LoaderState s;
  s.rank = r.Next();
  s.world_size = r.Next();
  s.batch_size = r.Next();
  s.epoch = r.Next();
  s.batch_in_epoch = r.Next();
  const int64_t flags = r.Next();
  if (flags & 1) s.batches_per_epoch = r.Next();
  if (flags & 2) {
    PackState p;
    p.epoch = r.Next();
    p.from_batch = r.Next();
    p.next_batch = r.Next();
    p.delivered = r.Next();
    p.waiting = r.List();
    s.pack = p;
  }
  if (flags & 4) s.remainder = EpochRemainder{r.Next(), r.Next(), r.List()};
  if (flags & 8) s.blend_start = r.List();
  if (flags & 16) s.blend_picks = r.List();
  return s;
}

void CheckRefusal(const Status& st, const char* prefix) {
  HR_FUZZ_CHECK(st.code() == StatusCode::kInvalidArgument, "%s", st.ToString().c_str());
  HR_FUZZ_CHECK(st.message().rfind(prefix, 0) == 0, "%s", st.message().c_str());
}

}  // namespace
}  // namespace headrace::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace headrace;
  using namespace headrace::fuzz;
  ValueReader r(data, size);
  StateBounds bounds;
  bounds.num_samples = r.Next();
  bounds.epoch_samples = r.Next();
  bounds.batches_per_epoch = r.Next();
  bounds.blend_entries = r.Next() % 8;
  const bool lockstep = r.Next() & 1;
  std::vector<LoaderState> states;
  for (int i = 0; i < 4 && !r.empty(); ++i) states.push_back(ReadState(r));
  for (const LoaderState& s : states) {
    const Status bare = CheckLoaderState(s, std::nullopt);
    if (!bare.ok()) CheckRefusal(bare, "state dict: ");
    const Status bounded = CheckLoaderState(s, bounds);
    if (!bounded.ok()) {
      CheckRefusal(bounded, "state dict: ");
      continue;
    }
    HR_FUZZ_CHECK(bare.ok(), "accepted with bounds, refused without: %s",
                  bare.ToString().c_str());
    const Result<int64_t> positions =
        PositionsConsumed(s.batch_in_epoch, s.world_size, s.batch_size);
    HR_FUZZ_CHECK(positions.ok() && *positions <= kMaxEpochPositions, "positions");
    if (!s.remainder && bounds.epoch_samples >= 0) {
      HR_FUZZ_CHECK(*positions <= bounds.epoch_samples, "%lld positions past an epoch of %lld",
                    static_cast<long long>(*positions),
                    static_cast<long long>(bounds.epoch_samples));
    }
  }
  if (states.empty()) return 0;
  const Result<GlobalPosition> merged = MergeLoaderStates(states, lockstep);
  if (!merged.ok()) {
    const Status& st = merged.status();
    HR_FUZZ_CHECK(st.code() == StatusCode::kInvalidArgument, "%s", st.ToString().c_str());
    HR_FUZZ_CHECK(st.message().rfind("merge_state_dicts: ", 0) == 0 ||
                      st.message().rfind("state dict: ", 0) == 0,
                  "%s", st.message().c_str());
    return 0;
  }
  if (merged->remainder) {
    const EpochRemainder& rest = *merged->remainder;
    HR_FUZZ_CHECK(rest.consumed >= 0 && rest.consumed <= 2 * kMaxEpochPositions, "consumed %lld",
                  static_cast<long long>(rest.consumed));
    std::unordered_set<int64_t> seen(rest.pending.begin(), rest.pending.end());
    HR_FUZZ_CHECK(seen.size() == rest.pending.size(), "a pending sample twice");
  }
  return 0;
}
