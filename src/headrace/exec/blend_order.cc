#include "headrace/exec/blend_order.h"

#include <cmath>
#include <limits>
#include <numeric>

#include "headrace/core/rng.h"
#include "headrace/exec/epoch_order.h"

namespace headrace {
namespace {

constexpr uint64_t kBlendStream = 0x626c656e64ULL;  // "blend": one block's shuffle
// An epoch longer than this is refused: its order is held in memory (4 bytes a position).
constexpr int64_t kMaxBlendLength = int64_t{1} << 36;

Status Invalid(size_t part, const std::string& key, const std::string& what) {
  return Status::InvalidArgument("source.mix[" + std::to_string(part) + "]." + key + " " + what);
}

// The picks part `s` made before the sequence starts (a continuation's), else 0.
int64_t StartOf(const BlendOptions& blend, size_t s) {
  return s < blend.start.size() ? blend.start[s] : 0;
}

// An epochized part's reads an epoch still to come.
int64_t EpochizedLeft(const BlendOptions& blend, size_t s) {
  const BlendPart& p = blend.parts[s];
  return std::max<int64_t>(
      0, std::llround(p.repeat * static_cast<double>(p.size)) - StartOf(blend, s));
}

// The weights the sequence follows: the parts' weights, or for an epochized blend the
// number of reads each part still gets this epoch.
std::vector<double> EffectiveWeights(const BlendOptions& blend) {
  std::vector<double> w;
  for (size_t s = 0; s < blend.parts.size(); ++s) {
    w.push_back(blend.until == BlendUntil::kEpochized
                    ? static_cast<double>(EpochizedLeft(blend, s))
                    : blend.parts[s].weight);
  }
  return w;
}

int64_t StartTotal(const BlendOptions& blend) {
  int64_t n = 0;
  for (int64_t v : blend.start) n += v;
  return n;
}

// The smooth weighted round-robin of BlendOrder's step 1, one position at a time.
class Deficit {
 public:
  explicit Deficit(std::vector<double> weights) : counts_(weights.size(), 0) {
    const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
    for (double& w : weights) w = sum > 0 ? w / sum : 0;
    weights_ = std::move(weights);
  }
  int32_t Next() {
    ++n_;
    size_t best = 0;
    double best_deficit = -std::numeric_limits<double>::infinity();
    for (size_t s = 0; s < weights_.size(); ++s) {
      if (weights_[s] <= 0) continue;
      const double deficit = static_cast<double>(n_) * weights_[s] - static_cast<double>(counts_[s]);
      if (deficit > best_deficit) {
        best_deficit = deficit;
        best = s;
      }
    }
    ++counts_[best];
    return static_cast<int32_t>(best);
  }
  const std::vector<int64_t>& counts() const { return counts_; }

 private:
  std::vector<double> weights_;
  std::vector<int64_t> counts_;
  int64_t n_ = 0;
};

}  // namespace

Result<int64_t> BlendEpochLength(const BlendOptions& blend) {
  if (blend.parts.empty()) {
    return Status::InvalidArgument("source.mix must list at least one source");
  }
  if (!blend.start.empty() && blend.start.size() != blend.parts.size()) {
    return Status::InvalidArgument("state dict: blend picks: " + std::to_string(blend.start.size()) +
                                   " entries, the mix has " + std::to_string(blend.parts.size()));
  }
  for (size_t s = 0; s < blend.parts.size(); ++s) {
    const BlendPart& p = blend.parts[s];
    if (StartOf(blend, s) < 0) {
      return Status::InvalidArgument("state dict: blend picks of source.mix[" +
                                     std::to_string(s) + "] is negative");
    }
    if (p.size <= 0) return Invalid(s, "size", "has no samples");
    if (!std::isfinite(p.weight) || p.weight <= 0) {
      return Invalid(s, "weight", "must be a number > 0, got " + std::to_string(p.weight));
    }
    if (!std::isfinite(p.repeat) || p.repeat <= 0) {
      return Invalid(s, "repeat", "must be a number > 0, got " + std::to_string(p.repeat));
    }
  }
  int64_t length = 0;
  switch (blend.until) {
    case BlendUntil::kSamples:
      if (blend.samples <= 0) {
        return Status::InvalidArgument("source.samples must be >= 1 with source.until: samples");
      }
      length = std::max<int64_t>(0, blend.samples - StartTotal(blend));
      break;
    case BlendUntil::kEpochized: {
      for (size_t s = 0; s < blend.parts.size(); ++s) length += EpochizedLeft(blend, s);
      if (length <= 0 && blend.start.empty()) {
        return Status::InvalidArgument("source.mix: an epochized blend reads nothing");
      }
      for (size_t s = 0; s < blend.parts.size(); ++s) {
        if (std::llround(blend.parts[s].repeat * static_cast<double>(blend.parts[s].size)) < 1) {
          return Invalid(s, "repeat", "times its size rounds to 0 reads an epoch");
        }
      }
      break;
    }
    case BlendUntil::kFirstExhausted:
    case BlendUntil::kAllExhausted: {
      // Walks the sequence until it ends: the counts it needs are those of step 1 (the
      // block shuffle keeps each block's counts, and the end is a block's count test
      // made position by position before it), so the length is the seed's invariant.
      Deficit deficit(EffectiveWeights(blend));
      const auto parts = static_cast<int64_t>(blend.parts.size());
      int64_t exhausted = 0;  // all_exhausted: the parts read through
      for (size_t s = 0; s < blend.parts.size(); ++s) {
        exhausted += StartOf(blend, s) >= blend.parts[s].size;
      }
      if (blend.until == BlendUntil::kAllExhausted && exhausted == parts) break;
      while (true) {
        if (length >= kMaxBlendLength) break;
        const auto s = static_cast<size_t>(deficit.Next());
        const int64_t c = deficit.counts()[s] + StartOf(blend, s);
        if (blend.until == BlendUntil::kFirstExhausted) {
          if (c > blend.parts[s].size) break;
          ++length;
        } else {
          ++length;
          if (c == blend.parts[s].size && ++exhausted == parts) break;
        }
      }
      break;
    }
  }
  if (length >= kMaxBlendLength) {
    return Status::InvalidArgument("source.mix: an epoch of " + std::to_string(length) +
                                   " or more positions is more than an order can hold (" +
                                   std::to_string(kMaxBlendLength) +
                                   "): raise the small parts' weights or set source.until");
  }
  return length;
}

std::vector<int32_t> BlendChoices(const BlendOptions& blend, int64_t length) {
  Deficit deficit(EffectiveWeights(blend));
  std::vector<int32_t> choices(static_cast<size_t>(length));
  for (int32_t& c : choices) c = deficit.Next();
  return choices;
}

namespace {

std::vector<int32_t> ShuffledChoices(const BlendOptions& blend, int64_t length, bool shuffle,
                                     uint64_t seed, int64_t epoch) {
  std::vector<int32_t> choices = BlendChoices(blend, length);
  if (!shuffle) return choices;
  for (int64_t begin = 0; begin < length; begin += kBlendBlock) {
    const int64_t end = std::min(length, begin + kBlendBlock);
    // A continuation's blocks are shuffled apart from the epoch's first sequence.
    Rng rng(HashKeys(seed ^ static_cast<uint64_t>(StartTotal(blend)), static_cast<uint64_t>(epoch),
                     kBlendStream, static_cast<uint64_t>(begin / kBlendBlock)));
    for (int64_t i = end - 1; i > begin; --i) {
      const auto j = begin + static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i - begin + 1)));
      std::swap(choices[static_cast<size_t>(i)], choices[static_cast<size_t>(j)]);
    }
  }
  return choices;
}

}  // namespace

template <typename T>
std::vector<T> BlendSequence(const BlendOptions& blend, int64_t length, bool shuffle,
                             uint64_t seed, int64_t epoch) {
  const std::vector<int32_t> choices = ShuffledChoices(blend, length, shuffle, seed, epoch);
  const size_t parts = blend.parts.size();
  std::vector<int64_t> picks(parts, 0);
  for (size_t s = 0; s < parts; ++s) picks[s] = StartOf(blend, s);
  std::vector<int64_t> pass_of(parts, -1);        // the pass whose permutation is held
  std::vector<std::vector<int64_t>> permutation(parts);
  std::vector<T> out(static_cast<size_t>(length));
  for (size_t n = 0; n < choices.size(); ++n) {
    const auto s = static_cast<size_t>(choices[n]);
    const BlendPart& part = blend.parts[s];
    const int64_t k = picks[s]++;
    const int64_t pass = k / part.size;
    if (pass != pass_of[s]) {
      // The part's order for this pass, as a single source's epoch order: the same
      // shard and window shuffle, seeded by (seed, key, pass).
      EpochOrderOptions o;
      o.num_samples = part.size;
      o.shuffle = shuffle;
      o.seed = HashKeys(seed, part.key, static_cast<uint64_t>(pass));
      o.shard_samples = part.shard_samples;
      o.shuffle_window = part.shuffle_window;
      o.epochs = std::nullopt;
      Result<EpochOrder> order = EpochOrder::Make(o);
      permutation[s] = order.ok() ? order->Permutation(epoch) : std::vector<int64_t>();
      if (permutation[s].size() != static_cast<size_t>(part.size)) {
        permutation[s].resize(static_cast<size_t>(part.size));
        std::iota(permutation[s].begin(), permutation[s].end(), int64_t{0});
      }
      pass_of[s] = pass;
    }
    out[n] = static_cast<T>(part.first + permutation[s][static_cast<size_t>(k % part.size)]);
  }
  return out;
}

template std::vector<uint32_t> BlendSequence<uint32_t>(const BlendOptions&, int64_t, bool,
                                                       uint64_t, int64_t);
template std::vector<int64_t> BlendSequence<int64_t>(const BlendOptions&, int64_t, bool,
                                                     uint64_t, int64_t);

std::vector<int64_t> BlendCounts(const BlendOptions& blend, int64_t length, bool shuffle,
                                 uint64_t seed, int64_t epoch, int64_t positions) {
  const std::vector<int32_t> choices = ShuffledChoices(blend, length, shuffle, seed, epoch);
  std::vector<int64_t> counts(blend.parts.size(), 0);
  const int64_t n = std::min<int64_t>(positions, length);
  for (int64_t i = 0; i < n; ++i) ++counts[static_cast<size_t>(choices[static_cast<size_t>(i)])];
  return counts;
}

}  // namespace headrace
