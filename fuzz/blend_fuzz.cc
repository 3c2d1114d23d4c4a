// Fuzz target: a blend's epoch (exec/blend_order.h) from hostile source.mix settings:
// up to 6 parts of any size up to 100,000 (a dataset's records exist, so sizes are
// bounded; weights and repeats are not), any `until` and `samples`, and a continuation's
// picks (a resume under new weights). Values come from fuzz_util.h's ValueReader.
//
// Properties checked besides "no crash, no UB, no leak, no hang" (issue 50: a blend's
// order was allocated whole, and a walk toward 2^36 positions ran before any refusal):
//   - every refusal is kInvalidArgument;
//   - asked with a limit (as a run asks with its memory budget), the answer is at most
//     the limit and comes at once (no walk toward 2^36 positions: one hung here);
//   - an epoch of at most 100,000 positions, made, holds only its parts' indices, its
//     parts' counts sum to its length, and without a continuation: first_exhausted reads
//     no sample twice, all_exhausted every sample at least once, epochized each part
//     round(repeat x size) times, samples exactly `samples` positions.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_util.h"
#include "headrace/exec/blend_order.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace headrace;
  fuzz::ValueReader r(data, size);
  BlendOptions blend;
  const int64_t parts = 1 + (r.Next() & 0x7fffffff) % 6;
  int64_t first = 0;
  for (int64_t s = 0; s < parts; ++s) {
    BlendPart p;
    p.first = first;
    p.size = r.Next() % 100'001;  // may be 0 or negative: refused
    p.weight = r.NextDouble();
    p.repeat = r.NextDouble();
    p.key = BlendKey("part" + std::to_string(s));
    first += std::max<int64_t>(p.size, 0);
    blend.parts.push_back(p);
  }
  blend.until = static_cast<BlendUntil>((r.Next() & 0x7fffffff) % 4);
  blend.samples = r.Next();
  if (r.Next() % 4 == 1) {
    for (int64_t s = 0; s < parts; ++s) blend.start.push_back(r.Next());
  }
  const bool shuffle = r.Next() % 2 == 1;
  const auto seed = static_cast<uint64_t>(r.Next());
  const int64_t epoch = r.Next() & 0xffff;

  // As a run asks with a memory budget (pipeline/prepared.cc): no walk past the limit.
  constexpr int64_t kLimit = 1'000'001;
  const Result<int64_t> length = BlendEpochLength(blend, kLimit);
  if (!length.ok()) {
    HR_FUZZ_CHECK(length.status().code() == StatusCode::kInvalidArgument, "%s",
                  length.status().ToString().c_str());
    return 0;
  }
  HR_FUZZ_CHECK(*length >= 0 && *length <= kLimit, "length %lld",
                static_cast<long long>(*length));
  if (*length > 100'000) return 0;

  const std::vector<int64_t> sequence =
      BlendSequence<int64_t>(blend, *length, shuffle, seed, epoch);
  HR_FUZZ_CHECK(static_cast<int64_t>(sequence.size()) == *length, "sequence of %zu for %lld",
                sequence.size(), static_cast<long long>(*length));
  std::vector<int64_t> reads(static_cast<size_t>(first), 0);
  for (int64_t index : sequence) {
    HR_FUZZ_CHECK(index >= 0 && index < first, "index %lld outside [0, %lld)",
                  static_cast<long long>(index), static_cast<long long>(first));
    ++reads[static_cast<size_t>(index)];
  }
  const std::vector<int64_t> counts =
      BlendCounts(blend, *length, shuffle, seed, epoch, *length);
  int64_t total = 0;
  for (size_t s = 0; s < blend.parts.size(); ++s) {
    const BlendPart& p = blend.parts[s];
    int64_t in_part = 0;
    for (int64_t i = p.first; i < p.first + p.size; ++i) in_part += reads[static_cast<size_t>(i)];
    HR_FUZZ_CHECK(counts[s] == in_part, "part %zu: counted %lld, read %lld", s,
                  static_cast<long long>(counts[s]), static_cast<long long>(in_part));
    total += counts[s];
    if (!blend.start.empty()) continue;
    if (blend.until == BlendUntil::kEpochized) {
      HR_FUZZ_CHECK(in_part == std::llround(p.repeat * static_cast<double>(p.size)),
                    "epochized part %zu read %lld times for repeat %g x %lld", s,
                    static_cast<long long>(in_part), p.repeat, static_cast<long long>(p.size));
    }
    for (int64_t i = p.first; i < p.first + p.size; ++i) {
      const int64_t n = reads[static_cast<size_t>(i)];
      if (blend.until == BlendUntil::kFirstExhausted) {
        HR_FUZZ_CHECK(n <= 1, "first_exhausted read sample %lld %lld times",
                      static_cast<long long>(i), static_cast<long long>(n));
      }
      if (blend.until == BlendUntil::kAllExhausted) {
        HR_FUZZ_CHECK(n >= 1, "all_exhausted never read sample %lld", static_cast<long long>(i));
      }
    }
  }
  HR_FUZZ_CHECK(total == *length, "counts sum to %lld of %lld", static_cast<long long>(total),
                static_cast<long long>(*length));
  if (blend.start.empty() && blend.until == BlendUntil::kSamples) {
    HR_FUZZ_CHECK(*length == blend.samples, "samples %lld, length %lld",
                  static_cast<long long>(blend.samples), static_cast<long long>(*length));
  }
  return 0;
}
