#include "headrace/formats/parquet_row_groups.h"

#include <algorithm>
#include <optional>

#include "headrace/core/strings.h"

namespace headrace {

ParquetRowGroupCache::ParquetRowGroupCache(std::shared_ptr<Storage> base,
                                           std::shared_ptr<const ParquetFileSet> source,
                                           SourceSpec spec, int64_t capacity_bytes)
    : base_(std::move(base)),
      source_(std::move(source)),
      spec_(std::move(spec)),
      capacity_(std::max<int64_t>(capacity_bytes, 1)) {
  for (const ParquetFieldColumn& c : source_->columns) column_names_.push_back(c.column);
  for (size_t g = 0; g < source_->groups.size(); ++g) {
    const ParquetFileSet::Group& group = source_->groups[g];
    const ParquetRowGroup& rg = source_->layouts[group.file].row_groups[group.row_group];
    range_to_group_.emplace(std::make_pair(source_->files[group.file], rg.offset), g);
  }
  stats_.capacity_bytes = capacity_;
}

ParquetRowGroupCache::~ParquetRowGroupCache() = default;

void ParquetRowGroupCache::ReadAsync(std::string uri, ReadCallback done) {
  base_->ReadAsync(std::move(uri), std::move(done));
}

void ParquetRowGroupCache::ReadAsyncGated(std::string uri, ReadCallback done, ReadGate gate) {
  base_->ReadAsyncGated(std::move(uri), std::move(done), std::move(gate));
}

void ParquetRowGroupCache::ReadRangeAsyncGated(std::string uri, int64_t offset, int64_t length,
                                               ReadCallback done, ReadGate gate) {
  const auto found = range_to_group_.find(std::make_pair(uri, offset));
  if (found == range_to_group_.end()) {
    base_->ReadRangeAsyncGated(std::move(uri), offset, length, std::move(done), std::move(gate));
    return;
  }
  const size_t group = found->second;
  // Whether this read fetches the group (and is charged its bytes), or is answered by the
  // cache (charged nothing: the cache's capacity counts those bytes).
  bool charged = false;
  while (true) {
    std::unique_lock lock(mu_);
    auto it = groups_.find(group);
    if (it == groups_.end()) {
      if (!charged) {
        lock.unlock();
        if (gate && !gate(length)) {
          done(Status::Cancelled("the read's gate refused it"));
          return;
        }
        charged = true;
        continue;  // look again: another read may have started the fetch meanwhile
      }
      Entry& entry = groups_[group];
      entry.state = GroupState::kFetching;
      entry.waiters.push_back(Waiter{std::move(done), nullptr});
      ++stats_.fetches;
      lock.unlock();
      base_->ReadRangeAsyncGated(
          std::move(uri), offset, length,
          [this, group](Result<Buffer> bytes) { OnFetched(group, std::move(bytes)); },
          [](int64_t) { return true; });
      return;
    }
    Entry& entry = it->second;
    if (entry.state == GroupState::kFetching) {
      // Already charged by this read's own gate: nothing more to charge.
      entry.waiters.push_back(Waiter{std::move(done), charged ? nullptr : std::move(gate)});
      ++stats_.fetch_waits;
      return;
    }
    ++stats_.fetch_hits;
    TouchLocked(group, entry);
    Buffer bytes = entry.state == GroupState::kFetched || entry.state == GroupState::kDecoding
                       ? entry.bytes
                       : Buffer();
    lock.unlock();
    if (!charged && gate && !gate(0)) {
      done(Status::Cancelled("the read's gate refused it"));
      return;
    }
    done(std::move(bytes));
    return;
  }
}

void ParquetRowGroupCache::OnFetched(size_t group, Result<Buffer> bytes) {
  std::vector<Waiter> waiters;
  {
    std::lock_guard lock(mu_);
    Entry& entry = groups_.at(group);
    waiters = std::move(entry.waiters);
    entry.waiters.clear();
    if (bytes.ok()) {
      entry.state = GroupState::kFetched;
      entry.bytes = *bytes;
      SetHeldLocked(group, entry, static_cast<int64_t>(entry.bytes.size()));
    } else {
      // Not kept: a later sample of the group reads it again (storage errors are the
      // read's, as with a manifest's media).
      EraseLocked(group);
    }
    decoded_cv_.notify_all();  // a sample may wait for a fetch it has no bytes of
  }
  for (Waiter& w : waiters) {
    if (w.gate && !w.gate(0)) {
      w.done(Status::Cancelled("the read's gate refused it"));
      continue;
    }
    w.done(bytes);
  }
}

void ParquetRowGroupCache::SetHeldLocked(size_t group, Entry& entry, int64_t held) {
  held_ += held - entry.held;
  entry.held = held;
  stats_.bytes_held = held_;
  stats_.peak_bytes = std::max(stats_.peak_bytes, held_);
  TouchLocked(group, entry);
  // Oldest first; groups being fetched or decoded are not in the list.
  while (held_ > capacity_ && !lru_.empty()) {
    const size_t victim = lru_.front();
    if (victim == group && lru_.size() == 1) break;  // the one just stored stays
    if (victim == group) {
      lru_.splice(lru_.end(), lru_, lru_.begin());
      continue;
    }
    ++stats_.evictions;
    EraseLocked(victim);
  }
}

void ParquetRowGroupCache::TouchLocked(size_t group, Entry& entry) {
  const bool listed = entry.state == GroupState::kFetched ||
                      entry.state == GroupState::kDecoded || entry.state == GroupState::kFailed;
  if (entry.in_lru) lru_.erase(entry.lru);
  entry.in_lru = listed;
  if (listed) entry.lru = lru_.insert(lru_.end(), group);
}

void ParquetRowGroupCache::EraseLocked(size_t group) {
  const auto it = groups_.find(group);
  if (it == groups_.end()) return;
  if (it->second.in_lru) lru_.erase(it->second.lru);
  held_ -= it->second.held;
  stats_.bytes_held = held_;
  groups_.erase(it);
}

Result<std::shared_ptr<const ParquetRowGroupData>> ParquetRowGroupCache::Decode(
    size_t group, const Buffer& bytes) {
  const ParquetFileSet::Group& g = source_->groups[group];
  ParquetDecodeOptions options;
  options.max_uncompressed_bytes = capacity_;
  Result<ParquetRowGroupData> data = DecodeParquetRowGroup(
      source_->layouts[g.file], g.row_group, bytes, column_names_, options);
  if (!data.ok()) {
    Status status = data.status().WithContext(source_->files[g.file]);
    if (status.code() == StatusCode::kResourceExhausted) {
      status = Status::ResourceExhausted(
          status.message() + ": the row-group cache holds " + std::to_string(capacity_) +
          " bytes (source.cache_bytes, part of memory.budget_bytes); raise "
          "memory.budget_bytes or source.cache_bytes, or write smaller row groups");
    }
    return status;
  }
  return std::make_shared<const ParquetRowGroupData>(*std::move(data));
}

Result<Buffer> ParquetRowGroupCache::Refetch(size_t group) {
  const ParquetFileSet::Group& g = source_->groups[group];
  const ParquetRowGroup& rg = source_->layouts[g.file].row_groups[g.row_group];
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<Buffer>> got;
  base_->ReadRangeAsyncGated(
      source_->files[g.file], rg.offset, rg.length,
      [&](Result<Buffer> bytes) {
        std::lock_guard lock(mu);
        got = std::move(bytes);
        cv.notify_all();
      },
      [](int64_t) { return true; });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return got.has_value(); });
  return *std::move(got);
}

Status ParquetRowGroupCache::Prepare(Sample& sample) {
  if (source_->columns.empty()) return Status::Ok();  // paths only: nothing in the groups
  const size_t group = source_->GroupOf(sample.index);
  const int64_t row = sample.index - source_->groups[group].first_record;
  // The group's bytes as this sample's read delivered them (none when it was decoded):
  // the record's first media item (parquet_file_set.h), which is no source field's, so it
  // leaves the sample's items here.
  Buffer own;
  if (!sample.media.empty() && sample.media.front().field == kRowGroupField) {
    own = std::move(sample.media.front().bytes);
    sample.media.erase(sample.media.begin());
  }
  std::shared_ptr<const ParquetRowGroupData> data;
  Status failed;
  {
    std::unique_lock lock(mu_);
    bool waited = false;
    while (true) {
      auto it = groups_.find(group);
      if (it != groups_.end() && it->second.state == GroupState::kDecoded) {
        data = it->second.data;
        TouchLocked(group, it->second);
        break;
      }
      if (it != groups_.end() && it->second.state == GroupState::kFailed) {
        failed = it->second.status;
        break;
      }
      const bool busy = it != groups_.end() && (it->second.state == GroupState::kDecoding ||
                                                (it->second.state == GroupState::kFetching &&
                                                 own.size() == 0));
      if (busy) {
        if (!waited) ++stats_.decode_waits;
        waited = true;
        decoded_cv_.wait(lock);
        continue;
      }
      // This thread decodes it: from the cache's bytes, else the sample's own, else a
      // fresh read (the group was dropped between this sample's read and now).
      Buffer bytes = own;
      if (it != groups_.end() && it->second.state == GroupState::kFetched) bytes = it->second.bytes;
      // kFetching with bytes of our own: decode those for this sample rather than wait,
      // and leave the entry to its fetch.
      const bool fetch_pending = it != groups_.end() && it->second.state == GroupState::kFetching;
      if (it == groups_.end()) {
        it = groups_.emplace(group, Entry{}).first;
        it->second.state = GroupState::kDecoding;
      }
      Entry& entry = it->second;
      if (!fetch_pending) {
        entry.state = GroupState::kDecoding;
        TouchLocked(group, entry);
        SetHeldLocked(group, entry, static_cast<int64_t>(bytes.size()));
      }
      lock.unlock();
      if (bytes.size() == 0) {
        Result<Buffer> fetched = Refetch(group);
        lock.lock();
        ++stats_.refetches;
        if (!fetched.ok()) {
          if (!fetch_pending) EraseLocked(group);
          decoded_cv_.notify_all();
          lock.unlock();
          return fetched.status();
        }
        lock.unlock();
        bytes = *std::move(fetched);
      }
      Result<std::shared_ptr<const ParquetRowGroupData>> decoded = Decode(group, bytes);
      bytes = Buffer();
      lock.lock();
      ++stats_.decodes;
      if (fetch_pending) {
        // Its fetch is still someone else's; keep the result for this sample only.
        if (decoded.ok()) data = *decoded; else failed = decoded.status();
        break;
      }
      Entry& done = groups_.at(group);  // a decoding entry is never dropped
      done.bytes = Buffer();
      if (decoded.ok()) {
        done.state = GroupState::kDecoded;
        done.data = *decoded;
        data = done.data;
        SetHeldLocked(group, done, done.data->decoded_bytes);
      } else {
        done.state = GroupState::kFailed;
        done.status = decoded.status();
        failed = done.status;
        SetHeldLocked(group, done, 0);
      }
      decoded_cv_.notify_all();
      break;
    }
    // Each row is a sample once per epoch: when an epoch has prepared every row, nothing
    // is likely to need the group soon (the next epoch's samples of it, admitted early,
    // may: they read it again).
    auto it = groups_.find(group);
    if (it != groups_.end() &&
        (it->second.state == GroupState::kDecoded || it->second.state == GroupState::kFailed) &&
        ++it->second.prepared[sample.epoch] >= source_->group_rows[group]) {
      EraseLocked(group);
    }
  }
  if (!failed.ok()) return failed;
  return FillSampleFromRowGroup(*source_, spec_, *data, row, sample);
}

RowGroupCacheStats ParquetRowGroupCache::CacheStats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace headrace
