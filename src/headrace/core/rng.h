// Deterministic randomness.
//
// Every random choice in Headrace derives from a key, never from a global generator or
// the thread that happens to run the work: the epoch order from (seed, epoch), a
// sample's augmentation from (seed, epoch, sample_index, op_position). This is what
// makes a batch a pure function of (seed, epoch, batch_index), whatever the thread count.
#pragma once

#include <cstdint>

namespace headrace {

// SplitMix64 finalizer: a bijective 64-bit mix with good avalanche.
constexpr uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Combines keys into one 64-bit seed; order matters.
constexpr uint64_t HashKeys(uint64_t a, uint64_t b) { return Mix64(a ^ Mix64(b)); }
constexpr uint64_t HashKeys(uint64_t a, uint64_t b, uint64_t c) {
  return HashKeys(HashKeys(a, b), c);
}
constexpr uint64_t HashKeys(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return HashKeys(HashKeys(a, b, c), d);
}

// xoshiro256** seeded through SplitMix64. Small, fast, and identical on every platform
// (unlike std::uniform_*_distribution, whose output is implementation-defined).
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& s : s_) {
      seed += 0x9e3779b97f4a7c15ULL;
      s = Mix64(seed);
    }
  }

  uint64_t Next() {
    const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = Rotl(s_[3], 45);
    return result;
  }

  // Uniform in [0, 1).
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }
  // Uniform in [lo, hi).
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  // Uniform integer in [0, n), n > 0 (Lemire's multiply-shift; bias < 2^-64 * n).
  uint64_t Below(uint64_t n) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(Next()) * n) >> 64);
  }
  bool Bernoulli(double p) { return Uniform() < p; }

 private:
  static constexpr uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t s_[4];
};

}  // namespace headrace
