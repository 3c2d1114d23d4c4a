// The driver a fuzz target links when it is not built with libFuzzer (g++, the
// sanitizer builds of `make test`): a deterministic mutation harness.
//
//   hr_fuzz_X [--mutations=N] [--seed=S] PATH...
//
// Runs LLVMFuzzerTestOneInput on every file under the PATHs (files or folders, e.g. a
// seed corpus or a crash file from libFuzzer), then on N mutants of each: bytes
// flipped, set to boundary values, inserted, deleted, duplicated, truncated, or spliced
// with another input. The mutants are a pure function of the inputs and the seed, so a
// failure reproduces exactly; the failing mutant is written to ./replay-crash-<target>
// before each run so that it survives the crash.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

// xorshift64*: small, fast and identical everywhere.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t Next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545F4914F6CDD1Dull;
  }
  size_t Below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(Next() % n); }

 private:
  uint64_t state_;
};

void Mutate(Bytes& b, const Bytes& other, Rng& rng) {
  static constexpr uint8_t kBoundary[] = {0x00, 0x01, 0x7F, 0x80, 0xFF, '\n', '"', '\\', '/', '.'};
  const int steps = 1 + static_cast<int>(rng.Below(4));
  for (int i = 0; i < steps; ++i) {
    const size_t pos = rng.Below(b.size() + 1);
    switch (rng.Below(8)) {
      case 0:  // flip a bit
        if (!b.empty()) b[std::min(pos, b.size() - 1)] ^= uint8_t{1} << rng.Below(8);
        break;
      case 1:  // a random byte
        if (!b.empty()) b[std::min(pos, b.size() - 1)] = static_cast<uint8_t>(rng.Next());
        break;
      case 2:  // a boundary byte
        if (!b.empty()) b[std::min(pos, b.size() - 1)] = kBoundary[rng.Below(sizeof(kBoundary))];
        break;
      case 3:  // insert bytes
        b.insert(b.begin() + pos, 1 + rng.Below(8), kBoundary[rng.Below(sizeof(kBoundary))]);
        break;
      case 4:  // delete a range
        b.erase(b.begin() + pos, b.begin() + std::min(b.size(), pos + 1 + rng.Below(16)));
        break;
      case 5: {  // duplicate a range
        const size_t n = std::min(b.size() - pos, 1 + rng.Below(64));
        const Bytes copy(b.begin() + pos, b.begin() + pos + n);
        b.insert(b.begin() + rng.Below(b.size() + 1), copy.begin(), copy.end());
        break;
      }
      case 6:  // truncate
        b.resize(pos);
        break;
      case 7: {  // splice: a piece of another input
        if (other.empty()) break;
        const size_t from = rng.Below(other.size());
        const size_t n = std::min(other.size() - from, 1 + rng.Below(256));
        b.insert(b.begin() + pos, other.begin() + from, other.begin() + from + n);
        break;
      }
    }
  }
}

bool ReadFile(const fs::path& path, Bytes* out) {
  std::ifstream in(path, std::ios::binary);
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  long mutations = 0;
  uint64_t seed = 1;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with("--mutations=")) {
      mutations = std::strtol(argv[i] + 12, nullptr, 10);
    } else if (arg.starts_with("--seed=")) {
      seed = std::strtoull(argv[i] + 7, nullptr, 10);
    } else if (fs::is_directory(arg)) {
      for (const auto& entry : fs::recursive_directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    } else if (fs::is_regular_file(arg)) {
      files.emplace_back(arg);
    } else {
      std::fprintf(stderr, "%s: no such file or folder: %s\n", argv[0], argv[i]);
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s [--mutations=N] [--seed=S] FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  std::sort(files.begin(), files.end());
  std::vector<Bytes> inputs(files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    if (!ReadFile(files[i], &inputs[i])) {
      std::fprintf(stderr, "%s: cannot read %s\n", argv[0], files[i].c_str());
      return 2;
    }
  }

  const std::string crash_file = "replay-crash-" + fs::path(argv[0]).filename().string();
  const auto start = std::chrono::steady_clock::now();
  long runs = 0;
  Rng rng(seed);
  for (size_t i = 0; i < inputs.size(); ++i) {
    LLVMFuzzerTestOneInput(inputs[i].data(), inputs[i].size());
    ++runs;
    for (long m = 0; m < mutations; ++m) {
      Bytes mutant = inputs[i];
      Mutate(mutant, inputs[rng.Below(inputs.size())], rng);
      std::ofstream(crash_file, std::ios::binary | std::ios::trunc)
          .write(reinterpret_cast<const char*>(mutant.data()),
                 static_cast<std::streamsize>(mutant.size()));
      LLVMFuzzerTestOneInput(mutant.data(), mutant.size());
      ++runs;
    }
  }
  std::error_code ignored;
  fs::remove(crash_file, ignored);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %ld inputs (%zu files, %ld mutants each) in %.1f s, no failure\n", argv[0], runs,
              files.size(), mutations, seconds);
  return 0;
}
