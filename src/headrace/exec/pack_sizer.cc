#include "headrace/exec/pack_sizer.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace headrace {

bool ChainTellsTokens(const EngineInputs& inputs) {
  if (inputs.chains.size() != 1) return false;
  for (const auto& op : inputs.chains.front().ops) {
    const Telling tells = op->Tells();
    if (tells == Telling::kNothing) return false;
    if (tells == Telling::kRowsAndTokens) return true;
  }
  return false;
}

std::optional<int> TellingTokenField(const EngineInputs& inputs, std::string_view name) {
  for (size_t f = 0; f < inputs.fields.size(); ++f) {
    if (inputs.fields[f].name == name) {
      return ChainTellsTokens(inputs) ? std::optional<int>(static_cast<int>(f)) : std::nullopt;
    }
  }
  return std::nullopt;
}

int64_t BytesOf(const std::vector<Buffer>& media) {
  int64_t n = 0;
  for (const Buffer& b : media) n += static_cast<int64_t>(b.size());
  return n;
}

int64_t BytesOf(const ToldSequence& told) {
  return static_cast<int64_t>((told.grids.size() + told.ids.size() + told.labels.size()) *
                              sizeof(int64_t));
}

namespace {

// A sizer call's media reads: at most `max_inflight` at once, and at most `budget` bytes
// admitted by their gates and not yet sized, as the read stage holds its reads to the I/O
// budget (exec/read_stage.h): a sample's first read that would take the charge past it
// is refused at its gate, before its bytes exist, parked, and issued again once it fits
// (or nothing else is charged); the reads after a sample's first are admitted even past
// it, since the bytes the sample holds are released only once all its items are in. A
// storage that ignores the gate is charged on completion. A sample whose items are all
// read is `ready`, to be sized by the calling thread. Shared with the reads' callbacks,
// which a run that stops leaves to finish alone.
struct Reads {
  explicit Reads(int64_t budget) : budget(budget) {}

  std::mutex mu;
  std::condition_variable_any changed;
  int inflight = 0;
  std::vector<int> left;                                        // per sample: items unread
  std::vector<std::vector<std::optional<Result<Buffer>>>> got;  // per sample, per item
  std::deque<size_t> ready;

  const int64_t budget;
  int64_t charged = 0;                // bytes admitted of samples not yet sized
  std::vector<int64_t> charge;        // per sample: its share of `charged`
  std::vector<int64_t> item_charge;   // per item
  std::vector<int64_t> refused;       // per item: the size its gate refused (0: none)
  std::deque<std::pair<size_t, int64_t>> parked;  // (item, size): refused, to issue again

  // Under mu: whether the gate of item `k` of sample `s` admits `bytes` more.
  bool Admits(size_t s, int64_t bytes) const {
    return charge[s] > 0 || charged == 0 || charged + bytes <= budget;
  }
};

}  // namespace

PackPlanner::Sizer SizeByTheSizePass(std::shared_ptr<const EngineInputs> inputs,
                                     int token_field, const PackOptions& pack,
                                     std::shared_ptr<ReadMedia> keep, int64_t io_budget_bytes,
                                     std::shared_ptr<ToldSequences> told_sequences,
                                     int max_inflight, int64_t image_header_bytes) {
  // The kind of each source field, by MediaRef::field: what modalities a sample holds.
  std::vector<SourceField> fields;
  if (inputs->source != nullptr) fields = SourceFieldsOf(inputs->source->spec());
  max_inflight = std::max(1, max_inflight);
  if (keep != nullptr) image_header_bytes = 0;  // a sample's run takes whole media only
  return [inputs = std::move(inputs), token_field, fields = std::move(fields),
          seq_len = pack.seq_len, keep, io_budget_bytes, told_sequences = std::move(told_sequences),
          vision_ids = pack.vision_token_ids, max_inflight, image_header_bytes](
             int64_t epoch, std::span<const int64_t> indices, std::stop_token stop) {
    const Source& source = *inputs->source;
    const OpChain& chain = inputs->chains.front();
    const RecordStore& store = source.records(epoch);
    const size_t n = indices.size();
    std::vector<SampleRecord> scratch(n);
    std::vector<const SampleRecord*> records(n);
    for (size_t s = 0; s < n; ++s) records[s] = &store.Get(indices[s], scratch[s]);

    // The items to read, in sample order; a sample with none is ready at once.
    auto reads = std::make_shared<Reads>(io_budget_bytes);
    reads->left.assign(n, 0);
    reads->got.resize(n);
    reads->charge.assign(n, 0);
    std::vector<std::pair<size_t, size_t>> items;  // (sample, item)
    size_t to_size = 0;
    for (size_t s = 0; s < n; ++s) {
      if (!records[s]->status.ok()) continue;
      ++to_size;
      const size_t m = inputs->reads_media ? records[s]->media.size() : 0;
      if (m == 0) reads->ready.push_back(s);
      reads->left[s] = static_cast<int>(m);
      reads->got[s].resize(m);
      for (size_t i = 0; i < m; ++i) items.emplace_back(s, i);
    }
    reads->item_charge.assign(items.size(), 0);
    reads->refused.assign(items.size(), 0);
    const auto issue = [&](size_t k) {
      const size_t s = items[k].first, m = items[k].second;  // captured: not a binding
      Storage* routed = source.info().entries.empty() ? nullptr : source.StorageFor(indices[s]);
      Storage& storage = routed != nullptr ? *routed : *source.storage();
      const MediaRef& ref = records[s]->media[m];
      // As the read stage's gate: nothing past what the I/O budget could ever hold, the
      // charge held to it (Reads), nothing more once the run stops (the read ends with
      // kCancelled: not told).
      ReadGate gate = [reads, s, k, budget = io_budget_bytes, stop](int64_t bytes) {
        if (stop.stop_requested()) return false;
        if (bytes == kReadStillWanted) return true;
        if (bytes > budget) return false;
        std::lock_guard lock(reads->mu);
        const int64_t more = bytes - reads->item_charge[k];  // a body that grows asks again
        if (more <= 0) return true;
        if (!reads->Admits(s, more)) {
          reads->refused[k] = bytes;
          return false;
        }
        reads->item_charge[k] += more;
        reads->charge[s] += more;
        reads->charged += more;
        return true;
      };
      ReadCallback done = [reads, s, m, k](Result<Buffer> bytes) {
        std::lock_guard lock(reads->mu);
        --reads->inflight;
        if (const int64_t size = std::exchange(reads->refused[k], 0); size > 0) {
          reads->parked.emplace_back(k, size);
        } else {
          if (bytes.ok() && reads->item_charge[k] == 0) {  // a storage that ignores the gate
            const auto size = static_cast<int64_t>(bytes->size());
            reads->item_charge[k] = size;
            reads->charge[s] += size;
            reads->charged += size;
          }
          reads->got[s][m] = std::move(bytes);
          if (--reads->left[s] == 0) reads->ready.push_back(s);
        }
        reads->changed.notify_all();
      };
      const bool header = image_header_bytes > 0 && ref.field >= 0 &&
                          ref.field < static_cast<int>(fields.size()) &&
                          fields[ref.field].kind == FieldKind::kImage;
      if (header) {  // a range past the object's end is cut short
        const int64_t length =
            ref.length < 0 ? image_header_bytes : std::min(ref.length, image_header_bytes);
        storage.ReadRangeAsyncGated(ref.uri, ref.offset, length, std::move(done), std::move(gate));
      } else if (ref.offset == 0 && ref.length < 0) {
        storage.ReadAsyncGated(ref.uri, std::move(done), gate);
      } else {
        storage.ReadRangeAsyncGated(ref.uri, ref.offset, ref.length, std::move(done), gate);
      }
    };

    std::vector<std::optional<PackPlanner::Told>> told(n);
    std::vector<Value> values;
    std::vector<int64_t> rows(inputs->fields.size());
    // Sizes sample s from its bytes read (nullopt stays where a read or the pass fails).
    const auto size = [&](size_t s, std::vector<std::optional<Result<Buffer>>> got) {
      std::vector<Buffer> media;
      for (std::optional<Result<Buffer>>& item : got) {
        if (!item.has_value() || !item->ok()) return;
        media.push_back(**std::move(item));
      }
      Sample sample;
      sample.epoch = epoch;
      sample.index = indices[s];
      sample.record = records[s];
      if (keep != nullptr) keep->Put(epoch, indices[s], media);  // shares the bytes
      if (!source.Fill(std::move(media), sample).ok()) return;
      values.assign(static_cast<size_t>(chain.num_values), Value());
      FillSourceValues(chain.source_values, sample, values);
      SampleContext ctx;
      ctx.sample = &sample;
      ctx.values = values;
      std::fill(rows.begin(), rows.end(), 0);
      ToldSequence sequence;
      std::vector<int64_t> patches;
      TellRows(chain.ops, ctx, rows, &sequence, &patches);
      const int64_t tokens = rows[static_cast<size_t>(token_field)];
      if (tokens <= 0) return;
      PackPlanner::Told t;
      t.tokens = tokens;
      t.patches = std::move(patches);
      for (const MediaRef& ref : records[s]->media) {
        if (ref.field >= 0 && ref.field < static_cast<int>(fields.size())) {
          t.modalities |= uint32_t{1} << static_cast<int>(fields[ref.field].kind);
        }
      }
      t.id = records[s]->id;
      // Where the vision tokens lie: text.tokenize's ids, as the pass tokenized them.
      const std::vector<int64_t>& ids = sequence.ids;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (std::find(vision_ids.begin(), vision_ids.end(), ids[i]) == vision_ids.end()) continue;
        ++t.vision;
        if (static_cast<int64_t>(i) >= seq_len) ++t.vision_past_seq_len;
      }
      told[s] = std::move(t);
      // The sample's own size pass, on the thread that runs it, takes these tokens.
      if (told_sequences != nullptr && !sequence.ids.empty()) {
        told_sequences->Put(epoch, indices[s], std::move(sequence));
      }
    };

    // Reads go out as the window and the charge have room; each sample is sized once its
    // items are in and its bytes dropped then (unless kept): what the sizer holds at once
    // is the window's reads and the samples read but not yet sized, within the budget.
    size_t next = 0, sized = 0;
    // Under reads->mu: the item to issue now, if any (taken when `take`). First the items
    // of a sample that holds bytes already (it cannot be sized, nor release them, without
    // them), then parked reads in order as they fit, then new ones while there is room.
    const auto pick = [&](bool take) -> std::optional<size_t> {
      if (reads->inflight >= max_inflight) return std::nullopt;
      if (next < items.size() && reads->charge[items[next].first] > 0) {
        return take ? next++ : next;
      }
      for (auto it = reads->parked.begin(); it != reads->parked.end(); ++it) {
        const auto [k, size] = *it;
        if (reads->charge[items[k].first] == 0 &&
            (it != reads->parked.begin() || !reads->Admits(items[k].first, size))) {
          continue;  // behind the first, only a sample's later item goes ahead
        }
        if (take) reads->parked.erase(it);
        return k;
      }
      if (reads->parked.empty() && next < items.size() && reads->charged < reads->budget) {
        return take ? next++ : next;
      }
      return std::nullopt;
    };
    while (sized < to_size) {
      while (true) {
        std::optional<size_t> k;
        {
          std::lock_guard lock(reads->mu);
          k = pick(/*take=*/true);
          if (!k.has_value()) break;
          ++reads->inflight;
        }
        issue(*k);  // its callback may run here
      }
      std::vector<std::pair<size_t, std::vector<std::optional<Result<Buffer>>>>> ready;
      {
        std::unique_lock lock(reads->mu);
        // A sample ready to size, or a read to issue (a sample with more items than the
        // window is ready only after reads of its own that wait for room).
        if (!reads->changed.wait(lock, stop, [&] {
              return !reads->ready.empty() || pick(/*take=*/false).has_value();
            })) {
          return std::vector<std::optional<PackPlanner::Told>>(n);  // stopped: none told
        }
        for (const size_t s : reads->ready) ready.emplace_back(s, std::move(reads->got[s]));
        reads->ready.clear();
      }
      for (auto& [s, got] : ready) size(s, std::move(got));
      sized += ready.size();
      std::lock_guard lock(reads->mu);
      for (const auto& [s, got] : ready) reads->charged -= std::exchange(reads->charge[s], 0);
    }
    return told;
  };
}

}  // namespace headrace
