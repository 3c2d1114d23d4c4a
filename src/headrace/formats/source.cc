#include "headrace/formats/source.h"

#include "headrace/formats/source_kinds.h"

namespace headrace {

Source::Source(SourceSpec spec, std::shared_ptr<Storage> storage)
    : spec_(std::move(spec)),
      storage_(std::move(storage)),
      read_policy_(SourceKindOf(spec_).read_policy) {}

Status Source::Fill(std::vector<Buffer> media, Sample& sample) const {
  FillFromRecord(std::move(media), sample);
  return Status::Ok();
}

Status Source::CheckRun(int64_t /*start_epoch*/, std::optional<int64_t> /*epochs*/) const {
  return Status::Ok();
}

void FillFromRecord(std::vector<Buffer> media, Sample& sample) {
  const SampleRecord& record = *sample.record;
  sample.media.clear();
  const size_t n = std::min(media.size(), record.media.size());
  sample.media.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    sample.media.push_back(
        Sample::Item{record.media[i].field, std::move(media[i]), record.media[i].uri});
  }
  sample.turns = record.turns;
  sample.attributes = record.attributes;
}

RecordSource::RecordSource(SourceSpec spec, std::shared_ptr<Storage> storage,
                           std::vector<std::shared_ptr<const RecordStore>> epochs)
    : Source(std::move(spec), std::move(storage)), epochs_(std::move(epochs)) {}

const RecordStore& RecordSource::records(int64_t epoch) const {
  if (epochs_.size() == 1) return *epochs_.front();
  return *epochs_[static_cast<size_t>(epoch)];
}

Status RecordSource::CheckRun(int64_t /*start_epoch*/, std::optional<int64_t> epochs) const {
  if (epochs_.empty() || !epochs_.front() || epochs_.front()->size() == 0) {
    return Status::InvalidArgument("the dataset has no samples");
  }
  for (const auto& store : epochs_) {
    if (!store || store->size() != epochs_.front()->size()) {
      return Status::InvalidArgument("every epoch's records must be the dataset's size");
    }
  }
  if (epochs_.size() == 1) return Status::Ok();
  const auto have = static_cast<int64_t>(epochs_.size());
  if (!epochs || *epochs > have) {
    return Status::InvalidArgument("the source holds " + std::to_string(have) +
                                   " epochs; the run needs more");
  }
  return Status::Ok();
}

std::shared_ptr<RecordSource> MakeRecordSource(std::shared_ptr<const RecordStore> records,
                                               std::shared_ptr<Storage> storage,
                                               SourceSpec spec) {
  return std::make_shared<RecordSource>(
      std::move(spec), std::move(storage),
      std::vector<std::shared_ptr<const RecordStore>>{std::move(records)});
}

}  // namespace headrace
