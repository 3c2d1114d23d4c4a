#include "headrace/formats/source_mix.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>

#include "headrace/core/field_kind_names.h"
#include "headrace/formats/source_kinds.h"
#include "headrace/ops/schema.h"

namespace headrace {

namespace {

// "image:image, conversation:conversation": a layout, for the mismatch message.
std::string DescribeFields(const std::vector<SourceField>& fields) {
  std::string out;
  for (const SourceField& f : fields) {
    if (!out.empty()) out += ", ";
    out += f.name + ":" + std::string(FieldKindName(f.kind));
    if (f.max_items > 0) out += "[" + std::to_string(f.max_items) + "]";
  }
  return out;
}

bool SameLayout(const std::vector<SourceField>& a, const std::vector<SourceField>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].kind != b[i].kind || a[i].max_items != b[i].max_items ||
        a[i].pad_items != b[i].pad_items) {
      return false;
    }
  }
  return true;
}

class MixSource;

// The entries' records one after another (each sample's entry name, the `source`
// attribute after the entries' own fields, is added by MixSource::Fill).
class MixRecords final : public RecordStore {
 public:
  explicit MixRecords(const MixSource& mix) : mix_(mix) {}
  int64_t size() const override;
  const SampleRecord& Get(int64_t index, SampleRecord& scratch) const override;
  RecordStoreMemory Memory() const override;

 private:
  const MixSource& mix_;
};

class MixSource final : public Source {
 public:
  MixSource(SourceSpec spec, std::shared_ptr<Storage> storage,
            std::vector<std::shared_ptr<const Source>> entries)
      : Source(std::move(spec), std::move(storage)),
        entries_(std::move(entries)),
        records_(*this) {
    int64_t first = 0;
    for (const auto& e : entries_) {
      first_.push_back(first);
      first += e->size();
    }
    total_ = first;
    source_field_ = static_cast<int>(SourceFieldsOf(entries_.front()->spec()).size());
    // One read stage serves every entry: a read may pass the I/O budget when any
    // entry's may (a Parquet entry's row group).
    for (const auto& e : entries_) {
      if (e->read_policy() == ReadPolicy::kBoundedByCache) read_policy_ = ReadPolicy::kBoundedByCache;
    }
  }

  const RecordStore& records(int64_t /*epoch*/) const override { return records_; }

  Status Fill(std::vector<Buffer> media, Sample& sample) const override {
    const int s = EntryOf(sample.index);
    const int64_t index = sample.index;
    sample.index = index - first_[static_cast<size_t>(s)];
    Status status = entries_[static_cast<size_t>(s)]->Fill(std::move(media), sample);
    sample.index = index;
    // The entry's name after the entry's own values (the record's, or those it parsed
    // at run time: a shard's JSON member, a Parquet row), in sample.parsed.
    if (sample.attributes.data() != sample.parsed.attributes.data()) {
      sample.parsed.attributes.assign(sample.attributes.begin(), sample.attributes.end());
    }
    sample.parsed.attributes.push_back(
        Attribute{source_field_, info_.entries[static_cast<size_t>(s)]});
    sample.attributes = sample.parsed.attributes;
    return status;
  }

  Status CheckRun(int64_t start_epoch, std::optional<int64_t> epochs) const override {
    for (size_t s = 0; s < entries_.size(); ++s) {
      if (Status st = entries_[s]->CheckRun(start_epoch, epochs); !st.ok()) {
        return Status(st.code(), "source.mix[" + std::to_string(s) + "] (" + info_.entries[s] +
                                     "): " + st.message());
      }
    }
    return Status::Ok();
  }

  int EntryOf(int64_t index) const override {
    const auto it = std::upper_bound(first_.begin(), first_.end(), index);
    return static_cast<int>(it - first_.begin()) - 1;
  }
  Storage* StorageFor(int64_t index) const override {
    return entries_[static_cast<size_t>(EntryOf(index))]->storage().get();
  }
  // The first entry's cache of each kind, for the run report (an entry's own caches
  // are in its storage's stats).
  const BlockCache* block_cache() const override {
    for (const auto& e : entries_) {
      if (e->block_cache() != nullptr) return e->block_cache();
    }
    return nullptr;
  }
  const ParquetRowGroupCache* row_group_cache() const override {
    for (const auto& e : entries_) {
      if (e->row_group_cache() != nullptr) return e->row_group_cache();
    }
    return nullptr;
  }

  int64_t total() const { return total_; }
  const Source& entry(int s) const { return *entries_[static_cast<size_t>(s)]; }
  int64_t first(int s) const { return first_[static_cast<size_t>(s)]; }
  int source_field() const { return source_field_; }
  const std::string& name(int s) const { return info_.entries[static_cast<size_t>(s)]; }
  size_t size_entries() const { return entries_.size(); }

  // For OpenMixSource: the parts a blend sets after construction.
  OrderShape& mutable_order() { return order_; }
  SourceInfo& mutable_info() { return info_; }
  void set_values_need_reads(bool v) { values_need_reads_ = v; }

 private:
  std::vector<std::shared_ptr<const Source>> entries_;
  std::vector<int64_t> first_;
  int64_t total_ = 0;
  int source_field_ = 0;
  MixRecords records_;
};

int64_t MixRecords::size() const { return mix_.total(); }

const SampleRecord& MixRecords::Get(int64_t index, SampleRecord& scratch) const {
  // The entry's own record, not a copy: the entry's name joins the sample's values in
  // Fill (a record copy per sample would cost the blend its conversation's bytes).
  const int s = mix_.EntryOf(index);
  return mix_.entry(s).records(0).Get(index - mix_.first(s), scratch);
}

RecordStoreMemory MixRecords::Memory() const {
  RecordStoreMemory m;
  for (size_t s = 0; s < mix_.size_entries(); ++s) {
    const RecordStoreMemory e = mix_.entry(static_cast<int>(s)).records(0).Memory();
    m.heap_bytes += e.heap_bytes;
    m.mapped_bytes += e.mapped_bytes;
  }
  return m;
}

}  // namespace

Result<std::shared_ptr<const Source>> OpenMixSource(const SourceSpec& spec,
                                                    const SourceOptions& options,
                                                    std::shared_ptr<Storage> storage) {
  std::vector<std::shared_ptr<const Source>> entries;
  SourceSpec resolved = spec;  // each entry's spec as its source resolved it
  std::vector<SourceField> layout;
  for (size_t s = 0; s < spec.mix.size(); ++s) {
    const MixEntrySpec& e = spec.mix[s];
    const std::string where = "source.mix[" + std::to_string(s) + "] (" + e.name + ")";
    Result<std::shared_ptr<const Source>> opened = OpenSource(e.source, options, storage);
    if (!opened.ok()) {
      return Status(opened.status().code(), where + ": " + opened.status().message());
    }
    // MixRecords reads each entry's records of epoch 0 (RecordStore::Get takes no epoch):
    // right for every entry whose records are the same each epoch, which a materialized
    // source's are not. CheckMixKeys refuses one first; this keeps the assumption here too.
    if ((*opened)->materialized() != nullptr) {
      return Status::InvalidArgument(where + ": a materialized source cannot be a mix entry "
                                             "(its records change with the epoch)");
    }
    const std::vector<SourceField> fields = SourceFieldsOf((*opened)->spec());
    if (s == 0) {
      layout = fields;
    } else if (!SameLayout(fields, layout)) {
      return Status::InvalidArgument(
          where + ": its fields (" + DescribeFields(fields) + ") differ from source.mix[0]'s (" +
          DescribeFields(layout) +
          "): the entries of a mix share one batch layout; declare the same source.fields "
          "in each (a field an entry lacks may be absent from its records)");
    }
    resolved.mix[s].source = (*opened)->spec();
    entries.push_back(std::move(*opened));
  }
  auto mix = std::make_shared<MixSource>(std::move(resolved), std::move(storage), entries);

  BlendOptions blend;
  blend.until = spec.until;
  blend.samples = spec.samples;
  SourceInfo& info = mix->mutable_info();
  info.path = "mix";
  bool needs_reads = false;
  for (size_t s = 0; s < entries.size(); ++s) {
    const Source& e = *entries[s];
    const MixEntrySpec& entry = spec.mix[s];
    BlendPart part;
    part.first = mix->first(static_cast<int>(s));
    part.size = e.size();
    part.shard_samples = e.order().shard_samples;
    part.shuffle_window = e.order().shuffle_window;
    part.weight = entry.weight;
    part.repeat = entry.repeat;
    part.key = BlendKey(entry.name);
    blend.parts.push_back(std::move(part));

    info.entries.push_back(entry.name);
    char weight[32];
    std::snprintf(weight, sizeof weight, "%g", entry.weight);
    info.description += (s == 0 ? "mix of " + std::to_string(entries.size()) + ": " : "; ") +
                        entry.name + " (" + e.info().description + ", weight " + weight + ")";
    info.bad_records += e.info().bad_records;
    for (const BadShard& bad : e.info().bad_shards) info.bad_shards.push_back(bad);
    info.heap_bytes += e.info().heap_bytes;
    info.mapped_bytes += e.info().mapped_bytes;
    info.cache_bytes += e.info().cache_bytes;
    needs_reads = needs_reads || e.values_need_reads();
  }
  mix->mutable_order().blend = std::move(blend);
  mix->set_values_need_reads(needs_reads);
  return std::shared_ptr<const Source>(std::move(mix));
}

using schema::AtLeast;
using schema::Got;
using schema::Invalid;
using schema::NonEmpty;
using schema::Probability;

Status CheckMixKeys(const SourceSpec& src, const SourceKeyContext& context) {
  bool beside = !src.fields.empty();
  for (const SourceKind& kind : SourceKinds()) beside = beside || (!kind.blend && kind.selected(src));
  if (beside) {
    return Invalid("source.mix", "is a source of its own: give manifest, shards, parquet and "
                                 "fields inside each entry, not beside the list");
  }
  if (src.until == BlendUntil::kSamples) {
    HR_RETURN_IF_ERROR(AtLeast<int64_t>("source.samples", src.samples, 1));
  } else if (src.samples != 0) {
    return Invalid("source.samples", "applies with source.until: samples" + Got(src.samples));
  }
  std::map<std::string, size_t> names;
  for (size_t i = 0; i < src.mix.size(); ++i) {
    const MixEntrySpec& e = src.mix[i];
    const std::string p = "source.mix[" + std::to_string(i) + "]";
    HR_RETURN_IF_ERROR(NonEmpty(p + ".name", e.name, "the entry's name (its samples' `source`)"));
    if (const auto [it, fresh] = names.emplace(e.name, i); !fresh) {
      return Invalid(p + ".name", "'" + e.name + "' is also source.mix[" +
                                      std::to_string(it->second) +
                                      "].name: entry names must be unique");
    }
    if (!(e.weight > 0 && e.weight < 1e300)) {
      return Invalid(p + ".weight", "must be a number > 0" + Got(e.weight));
    }
    if (!(e.repeat > 0 && e.repeat < 1e9)) {
      return Invalid(p + ".repeat", "must be a number > 0" + Got(e.repeat));
    }
    if (src.until != BlendUntil::kEpochized && e.repeat != 1) {
      return Invalid(p + ".repeat", "applies with source.until: epochized (weights are then "
                                    "the reads each entry gets)" + Got(e.repeat));
    }
    if (e.max_error_rate) {
      HR_RETURN_IF_ERROR(Probability(p + ".max_error_rate", *e.max_error_rate));
    }
    for (const SourceKind& kind : SourceKinds()) {
      if (!kind.not_a_blend_entry.empty() && kind.selected(e.source)) {
        return Invalid(p + "." + std::string(kind.key), kind.not_a_blend_entry);
      }
    }
    for (const SourceFieldSpec& f : e.source.fields) {
      if (f.name == kMixSourceField) {
        return Invalid(p + ".fields", "'source' is the mix's own field (each sample's entry "
                                      "name): rename the field");
      }
    }
    if (!context.check_entry) continue;
    if (Status st = context.check_entry(e.source); !st.ok()) {
      std::string message = st.message();
      if (message.rfind("source.", 0) == 0) message = p + message.substr(6);
      return Status(st.code(), message);
    }
  }
  return Status::Ok();
}

Result<std::string> MixMediaRoot(const SourceSpec& src) {
  std::optional<std::string> common;
  for (const MixEntrySpec& e : src.mix) {
    const SourceKind& kind = SourceKindOf(e.source);
    if (kind.media_root == nullptr) continue;
    HR_ASSIGN_OR_RETURN(std::string root, kind.media_root(e.source));
    if (root.empty() || root.front() != '/') return std::string();
    if (!common) {
      common = root;
      continue;
    }
    size_t n = 0;
    while (n < common->size() && n < root.size() && (*common)[n] == root[n]) ++n;
    // Back to a whole folder name ("/data/ab" and "/data/abc" share "/data").
    const auto boundary = [n](const std::string& p) { return n == p.size() || p[n] == '/'; };
    const bool whole = boundary(*common) && boundary(root);
    common->resize(n);
    if (!whole) {
      const size_t slash = common->rfind('/');
      common->resize(slash == std::string::npos ? 0 : std::max<size_t>(slash, 1));
    }
  }
  return common.value_or(std::string());
}

}  // namespace headrace
