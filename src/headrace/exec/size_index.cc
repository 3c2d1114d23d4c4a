#include "headrace/exec/size_index.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <numeric>
#include <thread>

#include "headrace/exec/batch_formers.h"
#include "headrace/exec/pack_sizer.h"

namespace headrace {
namespace {

constexpr char kMagic[8] = {'H', 'R', 'S', 'I', 'Z', 'E', 'S', '2'};

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}
template <typename T>
void PutAll(std::string& out, const std::vector<T>& values) {
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// Reads the file's bytes in order, failing once they run out.
struct Reader {
  std::string_view bytes;
  size_t at = 0;
  bool Take(void* to, size_t n) {
    if (bytes.size() - at < n) return false;
    if (n == 0) return true;  // `to` may be an empty vector's null data()
    std::memcpy(to, bytes.data() + at, n);
    at += n;
    return true;
  }
  template <typename T>
  bool TakeAll(std::vector<T>& values, uint64_t n) {
    if ((bytes.size() - at) / sizeof(T) < n) return false;  // before allocating n
    values.resize(n);
    return Take(values.data(), n * sizeof(T));
  }
};

}  // namespace

SizeIndex SizeIndex::Of(std::string fingerprint,
                        std::span<const std::optional<SampleSize>> sizes) {
  SizeIndex index;
  index.fingerprint_ = std::move(fingerprint);
  index.tokens_.reserve(sizes.size());
  index.modalities_.reserve(sizes.size());
  index.first_patch_.reserve(sizes.size() + 1);
  index.first_patch_.push_back(0);
  for (const std::optional<SampleSize>& s : sizes) {
    index.tokens_.push_back(s.has_value() ? s->tokens : -1);
    index.modalities_.push_back(s.has_value() ? s->modalities : 0);
    if (s.has_value()) index.patches_.insert(index.patches_.end(), s->patches.begin(), s->patches.end());
    index.first_patch_.push_back(index.patches_.size());
  }
  return index;
}

std::optional<SampleSize> SizeIndex::At(int64_t index) const {
  if (index < 0 || index >= size() || tokens_[index] < 0) return std::nullopt;
  return SampleSize{tokens_[index],
                    std::vector<int64_t>(patches_.begin() + first_patch_[index],
                                         patches_.begin() + first_patch_[index + 1]),
                    modalities_[index]};
}

std::string SizeIndex::Serialize() const {
  std::string out(kMagic, sizeof(kMagic));
  Put(out, static_cast<uint32_t>(fingerprint_.size()));
  out += fingerprint_;
  Put(out, static_cast<uint64_t>(tokens_.size()));
  Put(out, static_cast<uint64_t>(patches_.size()));
  PutAll(out, tokens_);
  PutAll(out, modalities_);
  PutAll(out, first_patch_);
  PutAll(out, patches_);
  return out;
}

Result<SizeIndex> SizeIndex::Join(std::span<const SizeIndex> parts) {
  SizeIndex joined;
  if (parts.empty()) {
    joined.first_patch_.push_back(0);
    return joined;
  }
  joined.fingerprint_ = parts.front().fingerprint_;
  joined.first_patch_.push_back(0);
  for (const SizeIndex& part : parts) {
    if (part.fingerprint_ != joined.fingerprint_) {
      return Status::InvalidArgument("size index parts of two pipelines (fingerprints " +
                                     joined.fingerprint_ + " and " + part.fingerprint_ + ")");
    }
    const uint64_t base = joined.patches_.size();
    joined.tokens_.insert(joined.tokens_.end(), part.tokens_.begin(), part.tokens_.end());
    joined.modalities_.insert(joined.modalities_.end(), part.modalities_.begin(),
                              part.modalities_.end());
    for (size_t i = 1; i < part.first_patch_.size(); ++i) {
      joined.first_patch_.push_back(base + part.first_patch_[i]);
    }
    joined.patches_.insert(joined.patches_.end(), part.patches_.begin(), part.patches_.end());
  }
  return joined;
}

std::optional<int64_t> SizeIndex::TokensAt(int64_t index) const {
  if (index < 0 || index >= size() || tokens_[index] < 0) return std::nullopt;
  return tokens_[index];
}

int64_t SizeIndex::untold() const {
  return std::count_if(tokens_.begin(), tokens_.end(), [](int64_t t) { return t < 0; });
}

Status SizeIndex::Write(const std::string& path) const {
  const std::string out = Serialize();
  // Written aside and renamed: a reader never sees half an index.
  const std::string part = path + ".part";
  {
    std::ofstream file(part, std::ios::binary | std::ios::trunc);
    file.write(out.data(), static_cast<std::streamsize>(out.size()));
    if (!file.good()) return Status::IoError(part + ": cannot write the size index");
  }
  if (std::rename(part.c_str(), path.c_str()) != 0) {
    return Status::IoError(path + ": cannot write the size index: " + std::strerror(errno));
  }
  return Status::Ok();
}

Result<SizeIndex> SizeIndex::Read(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file.is_open()) return Status::NotFound(path + ": no size index there");
  const std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  return Parse(bytes, path);
}

Result<SizeIndex> SizeIndex::Parse(std::string_view bytes, const std::string& name) {
  const auto corrupt = [&](const char* what) {
    return Status::CorruptData(name + ": not a whole size index (" + what + ")");
  };
  Reader r{bytes};
  char magic[sizeof(kMagic)];
  if (!r.Take(magic, sizeof(magic)) || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return corrupt("no HRSIZES2 header");
  }
  SizeIndex index;
  uint32_t fingerprint_bytes = 0;
  uint64_t n = 0, p = 0;
  if (!r.Take(&fingerprint_bytes, sizeof(fingerprint_bytes)) || fingerprint_bytes > 4096) {
    return corrupt("fingerprint");
  }
  index.fingerprint_.resize(fingerprint_bytes);
  if (!r.Take(index.fingerprint_.data(), fingerprint_bytes) || !r.Take(&n, sizeof(n)) ||
      !r.Take(&p, sizeof(p))) {
    return corrupt("header cut short");
  }
  if (!r.TakeAll(index.tokens_, n) || !r.TakeAll(index.modalities_, n) || n == UINT64_MAX ||
      !r.TakeAll(index.first_patch_, n + 1) ||
      !r.TakeAll(index.patches_, p)) {
    return corrupt("cut short");
  }
  if (r.at != bytes.size()) return corrupt("bytes past its end");
  if (index.first_patch_.front() != 0 || index.first_patch_.back() != p ||
      !std::is_sorted(index.first_patch_.begin(), index.first_patch_.end())) {
    return corrupt("patch offsets out of order");
  }
  return index;
}

std::optional<SampleSize> SizeOf(const std::optional<PackPlanner::Told>& told) {
  if (!told.has_value()) return std::nullopt;
  return SampleSize{told->tokens, told->patches, told->modalities};
}

PackPlanner::Sizer SizeByTheIndex(std::shared_ptr<const SizeIndex> index, int64_t seq_len,
                                  PackPlanner::Sizer exact) {
  return [index = std::move(index), seq_len, exact = std::move(exact)](
             int64_t epoch, std::span<const int64_t> indices, std::stop_token stop) {
    std::vector<std::optional<PackPlanner::Told>> told(indices.size());
    std::vector<int64_t> unsure;  // sized by the size pass
    std::vector<size_t> at;       // ... their places in `told`
    for (size_t k = 0; k < indices.size(); ++k) {
      std::optional<SampleSize> size = index->At(indices[k]);
      if (!size.has_value() || size->tokens > seq_len) {
        unsure.push_back(indices[k]);
        at.push_back(k);
        continue;
      }
      PackPlanner::Told t;
      t.tokens = size->tokens;
      t.patches = std::move(size->patches);
      t.modalities = size->modalities;
      told[k] = std::move(t);
    }
    if (!unsure.empty()) {
      std::vector<std::optional<PackPlanner::Told>> sized = exact(epoch, unsure, std::move(stop));
      for (size_t u = 0; u < at.size(); ++u) told[at[u]] = std::move(sized[u]);
    }
    return told;
  };
}

Result<std::vector<std::optional<SampleSize>>> SizeEverySample(
    std::shared_ptr<const EngineInputs> inputs, const std::string& token_field, int threads,
    int64_t begin, int64_t end, int64_t image_header_bytes) {
  HR_ASSIGN_OR_RETURN(const int field, BalanceTokenField(*inputs, token_field));
  const int64_t samples = inputs->source->size();
  if (end < 0) end = samples;
  if (begin < 0 || begin > end || end > samples) {
    return Status::InvalidArgument("size index: samples [" + std::to_string(begin) + ", " +
                                   std::to_string(end) + ") are not inside the source's " +
                                   std::to_string(samples));
  }
  PackOptions sizing;
  sizing.seq_len = INT64_MAX;  // sizes only: no row to locate vision tokens in
  constexpr int64_t kChunk = 256;  // a chunk's media reads are all in flight together
  std::vector<std::optional<SampleSize>> sizes(static_cast<size_t>(end - begin));
  // Sizes samples `indices` by `sizer` in chunks taken in turn by the threads.
  const auto size_all = [&](const PackPlanner::Sizer& sizer, const std::vector<int64_t>& indices) {
    const auto n = static_cast<int64_t>(indices.size());
    std::atomic<int64_t> next{0};
    std::vector<std::jthread> pool;
    for (int t = 0; t < std::max(threads, 1); ++t) {
      pool.emplace_back([&] {
        for (int64_t at; (at = next.fetch_add(kChunk)) < n;) {
          const std::span<const int64_t> chunk(indices.data() + at,
                                               static_cast<size_t>(std::min(kChunk, n - at)));
          const std::vector<std::optional<PackPlanner::Told>> told = sizer(0, chunk, {});
          for (size_t k = 0; k < chunk.size(); ++k) sizes[chunk[k] - begin] = SizeOf(told[k]);
        }
      });
    }
    pool.clear();  // joins
  };
  std::vector<int64_t> all(static_cast<size_t>(end - begin));
  std::iota(all.begin(), all.end(), begin);
  size_all(SizeByTheSizePass(inputs, field, sizing, nullptr, INT64_MAX, nullptr, kChunk,
                             image_header_bytes),
           all);
  if (image_header_bytes > 0) {
    // Those whose headers the first bytes did not hold (or that cannot be sized at all),
    // from whole reads.
    std::vector<int64_t> again;
    for (int64_t i : all) {
      if (!sizes[i - begin].has_value()) again.push_back(i);
    }
    if (!again.empty()) {
      size_all(SizeByTheSizePass(inputs, field, sizing, nullptr, INT64_MAX, nullptr, kChunk),
               again);
    }
  }
  return sizes;
}

}  // namespace headrace
