#include "headrace/formats/shard_records.h"

#include <algorithm>

namespace headrace {

void ShardRecords::AppendShard(const std::string& shard, std::span<const SampleRecord> records) {
  shards_.push_back(shard);
  shard_first_.push_back(size());
  for (const SampleRecord& r : records) {
    if (!r.status.ok()) bad_.emplace_back(size(), r.status);
    keys_ += r.id;
    key_end_.push_back(keys_.size());
    for (const MediaRef& m : r.media) items_.push_back(Item{m.offset, m.length, m.field});
    item_end_.push_back(items_.size());
  }
}

std::vector<std::pair<int64_t, int>> ShardRecords::SampleStarts(size_t shard) const {
  const auto first = static_cast<size_t>(shard_first_[shard]);
  const size_t end =
      shard + 1 < shard_first_.size() ? static_cast<size_t>(shard_first_[shard + 1]) : key_end_.size();
  std::vector<std::pair<int64_t, int>> starts;
  starts.reserve(end - first);
  for (size_t i = first; i < end; ++i) {
    const size_t item_begin = i == 0 ? 0 : item_end_[i - 1];
    if (item_begin == item_end_[i]) continue;
    int64_t start = items_[item_begin].offset;
    for (size_t k = item_begin + 1; k < item_end_[i]; ++k) {
      start = std::min(start, items_[k].offset);
    }
    starts.emplace_back(start, static_cast<int>(item_end_[i] - item_begin));
  }
  return starts;
}

void ShardRecords::ShrinkToFit() {
  keys_.shrink_to_fit();
  key_end_.shrink_to_fit();
  items_.shrink_to_fit();
  item_end_.shrink_to_fit();
  bad_.shrink_to_fit();
}

const SampleRecord& ShardRecords::Get(int64_t index, SampleRecord& scratch) const {
  const auto i = static_cast<size_t>(index);
  // The last shard that starts at or before `index`.
  const size_t shard = static_cast<size_t>(
      std::upper_bound(shard_first_.begin(), shard_first_.end(), index) - shard_first_.begin() -
      1);
  const std::string& uri = shards_[shard];
  const size_t key_begin = i == 0 ? 0 : key_end_[i - 1];
  const size_t item_begin = i == 0 ? 0 : item_end_[i - 1];
  scratch = SampleRecord{};
  scratch.id.assign(keys_, key_begin, key_end_[i] - key_begin);
  scratch.location.reserve(uri.size() + 1 + scratch.id.size());
  scratch.location.append(uri).append("#").append(scratch.id);
  scratch.line = index + 1;
  scratch.media.reserve(item_end_[i] - item_begin);
  for (size_t k = item_begin; k < item_end_[i]; ++k) {
    const Item& item = items_[k];
    scratch.media.push_back(MediaRef{item.field, uri, item.offset, item.length});
  }
  const auto bad = std::lower_bound(bad_.begin(), bad_.end(), index,
                                    [](const auto& entry, int64_t i) { return entry.first < i; });
  if (bad != bad_.end() && bad->first == index) scratch.status = bad->second;
  return scratch;
}

RecordStoreMemory ShardRecords::Memory() const {
  size_t bytes = sizeof(*this) + keys_.capacity() + key_end_.capacity() * sizeof(uint64_t) +
                 items_.capacity() * sizeof(Item) + item_end_.capacity() * sizeof(uint64_t) +
                 shard_first_.capacity() * sizeof(int64_t) +
                 shards_.capacity() * sizeof(std::string) +
                 bad_.capacity() * sizeof(bad_[0]);
  for (const std::string& s : shards_) bytes += s.capacity() + 1;
  for (const auto& [_, status] : bad_) bytes += 64 + status.message().size();
  return {static_cast<int64_t>(bytes), 0};
}

}  // namespace headrace
