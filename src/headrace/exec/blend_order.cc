#include "headrace/exec/blend_order.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <set>

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

// The smooth weighted round-robin of BlendOrder's step 1, one position at a time: the
// part with the largest deficit n·w_s − c_s, the earliest among equals. Parts of one
// weight are ranked by their picks alone (the fewest, then the earliest), so they are
// kept in one ordered set per distinct weight and a position costs the number of
// distinct weights plus a log, not the number of parts: 5,000 entries of one weight
// took 52 s to load, every position scanning every part. The deficits are the same
// doubles the one-by-one scan computed, so the sequence is too.
class Deficit {
 public:
  explicit Deficit(std::vector<double> weights) : counts_(weights.size(), 0) {
    const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
    std::map<double, size_t> group_of_weight;
    for (size_t s = 0; s < weights.size(); ++s) {
      const double w = sum > 0 ? weights[s] / sum : 0;
      if (w <= 0) continue;  // never drawn
      const auto [it, fresh] = group_of_weight.emplace(w, groups_.size());
      if (fresh) groups_.push_back(Group{w, {}});
      groups_[it->second].parts.emplace(0, static_cast<int32_t>(s));
    }
  }
  int32_t Next() {
    ++n_;
    Group* best = nullptr;
    double best_deficit = -std::numeric_limits<double>::infinity();
    for (Group& g : groups_) {
      const auto [count, part] = *g.parts.begin();
      const double deficit = static_cast<double>(n_) * g.weight - static_cast<double>(count);
      if (deficit > best_deficit ||
          (deficit == best_deficit && part < best->parts.begin()->second)) {
        best_deficit = deficit;
        best = &g;
      }
    }
    if (best == nullptr) return 0;  // no part has weight: the caller refused it already
    const auto node = best->parts.begin();
    const int32_t part = node->second;
    best->parts.erase(node);
    best->parts.emplace(++counts_[static_cast<size_t>(part)], part);
    return part;
  }
  const std::vector<int64_t>& counts() const { return counts_; }

 private:
  struct Group {
    double weight;
    std::set<std::pair<int64_t, int32_t>> parts;  // (picks, part): the first is next
  };
  std::vector<Group> groups_;
  std::vector<int64_t> counts_;
  int64_t n_ = 0;
};

}  // namespace

Result<int64_t> BlendEpochLength(const BlendOptions& blend, int64_t limit) {
  limit = std::clamp<int64_t>(limit, 1, kMaxBlendLength);
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
      // The deficits of the K parts sum to 1 at every position, so the largest, the one
      // picked, is at least 1/K: part s makes its k-th pick at a position n with
      // (n + 1)·w_s − (k − 1) >= 1/K, n >= (k − 1 + 1/K) / w_s − 1. An epoch that cannot
      // end before `limit` is answered without a walk (weights 1 and 1e-12 walked toward
      // 2^36 positions first), and the walk stops at `limit`.
      const std::vector<double> weights = EffectiveWeights(blend);
      const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
      const double share = 1.0 / static_cast<double>(blend.parts.size());
      double first_end = std::numeric_limits<double>::infinity(), last_end = 0;
      for (size_t s = 0; s < blend.parts.size(); ++s) {
        const double left = static_cast<double>(blend.parts[s].size - StartOf(blend, s));
        if (left <= 0) continue;
        const double w = weights[s] / sum;
        // Its (left + 1)-th pick ends first_exhausted, its left-th all_exhausted.
        first_end = std::min(first_end, (left + share) / w - 1);
        last_end = std::max(last_end, (left - 1 + share) / w - 1);
      }
      const double end = blend.until == BlendUntil::kFirstExhausted ? first_end : last_end;
      if (std::isfinite(end) && end >= static_cast<double>(limit)) {
        length = limit;
        break;
      }
      Deficit deficit(weights);
      const auto parts = static_cast<int64_t>(blend.parts.size());
      int64_t exhausted = 0;  // all_exhausted: the parts read through
      for (size_t s = 0; s < blend.parts.size(); ++s) {
        exhausted += StartOf(blend, s) >= blend.parts[s].size;
      }
      if (blend.until == BlendUntil::kAllExhausted && exhausted == parts) break;
      while (true) {
        if (length >= limit) break;
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
    return Status::InvalidArgument("source.mix: an epoch of about " + std::to_string(length) +
                                   " or more positions is more than an order can hold (" +
                                   std::to_string(kMaxBlendLength) +
                                   "): raise the small parts' weights or set source.until");
  }
  return std::min(length, limit);
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
