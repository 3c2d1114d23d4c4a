#include "headrace/formats/source_materialized.h"

#include "headrace/formats/shard_set.h"  // RecordsHeapBytes
#include "headrace/formats/source_kinds.h"
#include "headrace/ops/schema.h"

namespace headrace {
namespace {

class MaterializedSource final : public Source {
 public:
  MaterializedSource(const SourceSpec& spec, std::shared_ptr<Storage> storage,
                        MaterializedIndex index, std::optional<int64_t> epochs)
      : Source(spec, std::move(storage)),
        uri_(std::move(index.uri)),
        info_json_(std::move(index.info)) {
    info_.heap_bytes = static_cast<int64_t>(RecordsHeapBytes(index.records.front()) *
                                            index.records.size());
    for (auto& set : index.records) {
      sets_.push_back(std::make_shared<VectorRecords>(
          std::make_shared<const std::vector<SampleRecord>>(std::move(set))));
    }
    for (const SampleRecord& r : sets_.front()->records()) info_.bad_records += r.status.ok() ? 0 : 1;
    values_need_reads_ = true;  // the rows are the members
    order_ = OrderShape{info_json_.shard_samples, info_json_.shuffle_window};
    // Epoch e reads the set written for it (every epoch the one set, when not per epoch).
    if (info_json_.per_epoch() && epochs) {
      for (int64_t e = 0; e < *epochs; ++e) {
        int found = -1;
        for (size_t i = 0; i < info_json_.sets.size(); ++i) {
          if (info_json_.sets[i].epoch == e) found = static_cast<int>(i);
        }
        epoch_set_.push_back(found);
      }
    }
    std::string epochs_text = "all";
    if (info_json_.per_epoch()) epochs_text = Written();
    info_.description = "materialized " + spec.materialized + " (" +
                        std::to_string(info_json_.dataset_samples) + " samples, epochs " +
                        epochs_text + ", written by headrace " + info_json_.headrace_version + ")";
    info_.path = spec.materialized;
  }

  const RecordStore& records(int64_t epoch) const override {
    if (epoch_set_.empty()) return *sets_.front();
    const int set = epoch < static_cast<int64_t>(epoch_set_.size())
                        ? epoch_set_[static_cast<size_t>(epoch)]
                        : -1;
    // An epoch that was not written is one the run starts after (CheckRun): any set
    // stands in for it, and no sample of it is read.
    return *sets_[set < 0 ? 0 : static_cast<size_t>(set)];
  }

  Status Fill(std::vector<Buffer> media, Sample& sample) const override {
    FillFromRecord(std::move(media), sample);
    return PrepareMaterializedSample(sample);
  }

  Status CheckRun(int64_t start_epoch, std::optional<int64_t> epochs) const override {
    if (!info_json_.per_epoch()) return Status::Ok();
    if (!epochs) {
      return Status::InvalidArgument("epochs: " + Why() + ": a run of it needs a bounded epochs");
    }
    for (int64_t e = std::max<int64_t>(start_epoch, 0); e < *epochs; ++e) {
      const bool written = e < static_cast<int64_t>(epoch_set_.size()) &&
                           epoch_set_[static_cast<size_t>(e)] >= 0;
      if (!written) {
        return Status::InvalidArgument("epochs: " + Why() + "; this run (epochs: " +
                                       std::to_string(*epochs) + ") needs epoch " +
                                       std::to_string(e) + " too: materialize it (--epochs)");
      }
    }
    return Status::Ok();
  }

  const MaterializedInfo* materialized() const override { return &info_json_; }

  // Why a per-epoch materialization refuses a run, for messages.
  std::string Why() const {
    return uri_ + " was materialized per epoch (random ops: " + info_json_.random_ops[0] +
           (info_json_.random_ops.size() > 1 ? ", ..." : "") + "), epochs " + Written(", ");
  }

 private:
  std::string Written(const char* separator = ",") const {
    std::string written;
    for (const auto& set : info_json_.sets) {
      written += (written.empty() ? "" : separator) + std::to_string(set.epoch.value_or(-1));
    }
    return written;
  }

  std::string uri_;
  MaterializedInfo info_json_;
  std::vector<std::shared_ptr<const VectorRecords>> sets_;  // info_json_.sets' order
  std::vector<int> epoch_set_;  // per epoch of the run: its set, -1 when not written
};

}  // namespace

Result<std::shared_ptr<const Source>> OpenMaterializedSource(const SourceSpec& spec,
                                                             const SourceOptions& options,
                                                             std::shared_ptr<Storage> storage) {
  HR_ASSIGN_OR_RETURN(MaterializedIndex index,
                      LoadMaterializedIndex(*storage, spec.materialized));
  if (index.records.empty()) {
    return Status::InvalidArgument("source.materialized: " + spec.materialized + " holds no set");
  }
  const uint64_t seed = index.info.seed;
  const bool per_epoch = index.info.per_epoch();
  auto source = std::make_shared<MaterializedSource>(spec, std::move(storage),
                                                        std::move(index), options.epochs);
  if (per_epoch && options.seed != seed) {
    return Status::InvalidArgument("seed: " + source->Why() + " with seed " +
                                   std::to_string(seed) + ", not " + std::to_string(options.seed) +
                                   ": set seed: " + std::to_string(seed) +
                                   " or materialize again with this seed");
  }
  if (per_epoch && !options.epochs) {
    return Status::InvalidArgument("epochs: " + source->Why() +
                                   ": a run of it needs a bounded epochs");
  }
  return std::shared_ptr<const Source>(std::move(source));
}

Status CheckMaterializedKeys(const SourceSpec& spec, const SourceKeyContext& /*context*/) {
  if (!spec.fields.empty()) {
    return schema::Invalid("source.fields", "source.materialized declares its own fields (its "
                                            "materialized.json): leave source.fields empty");
  }
  return Status::Ok();
}

}  // namespace headrace
