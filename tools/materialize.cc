#include "materialize.h"

#include <cstdio>
#include <filesystem>
#include <memory>

#include "headrace/core/json_writer.h"
#include "headrace/core/strings.h"
#include "headrace/formats/tar_shard.h"
#include "headrace/pipeline/config.h"
#include "headrace/pipeline/loader.h"
#include "headrace/pipeline/op_types.h"
#include "shard.h"

namespace headrace {
namespace {

namespace fs = std::filesystem;

// The shards of one set being written: a shard is closed (and indexed) before the
// sample that would take it past the target.
class SetWriter {
 public:
  SetWriter(fs::path dir, int64_t target_bytes, MaterializedInfo::Set& set)
      : dir_(std::move(dir)), target_bytes_(target_bytes), set_(set) {}

  // One sample: its members in order, the last its .json.
  Status Add(const std::string& id,
             const std::vector<std::pair<std::string, std::string>>& members) {
    int64_t bytes = 0;
    for (const auto& [name, data] : members) {
      bytes += TarMemberBytes(static_cast<int64_t>(data.size()));
    }
    if (writer_ != nullptr && open_bytes_ + bytes > target_bytes_) HR_RETURN_IF_ERROR(Close());
    if (writer_ == nullptr) {
      MaterializedInfo::Shard& shard = set_.shards.emplace_back();
      shard.name = ShardName(static_cast<int64_t>(set_.shards.size()) - 1);
      HR_ASSIGN_OR_RETURN(writer_, TarWriter::Open((dir_ / shard.name).string()));
      open_bytes_ = 1024;  // the two zero blocks that end an archive
      ids_ = JsonWriter(false);
      ids_.BeginArray();
    }
    for (const auto& [name, data] : members) HR_RETURN_IF_ERROR(writer_->Add(name, AsBytes(data)));
    ids_.String(id);
    open_bytes_ += bytes;
    ++set_.shards.back().samples;
    ++set_.samples;
    return Status::Ok();
  }

  // Closes the open shard: its index and ids beside it.
  Status Close() {
    if (writer_ == nullptr) return Status::Ok();
    MaterializedInfo::Shard& shard = set_.shards.back();
    HR_ASSIGN_OR_RETURN(shard.bytes, writer_->Close());
    writer_.reset();
    HR_RETURN_IF_ERROR(IndexShard(dir_.string(), shard.name, shard.samples));
    ids_.EndArray();
    return WriteFileText((dir_ / (shard.name + ".ids.json")).string(), ids_.str() + "\n");
  }

 private:
  fs::path dir_;
  int64_t target_bytes_;
  MaterializedInfo::Set& set_;
  std::unique_ptr<TarWriter> writer_;
  int64_t open_bytes_ = 0;
  JsonWriter ids_{false};
};

// The batch's layout as materialized.json declares it: the pipeline's fields (the
// engine's "index" is not one), and the strings after "id".
void DescribeBatch(const Batch& batch, const std::vector<FieldSpec>& fields,
                   MaterializedInfo& info) {
  info.fields = fields;
  for (const Batch::Strings& s : batch.strings) {
    if (s.name != "id") info.strings.push_back({s.name, s.list});
  }
}

// Writes each sample of `batch` into `out`: a member per field, each sample's own part
// of a concatenated one ((rows, ...shape): its tokens, its images' patches, their lengths).
Status WriteBatch(const Batch& batch, const std::vector<FieldSpec>& fields, SetWriter& out) {
  const Tensor* index = batch.Find("index");
  if (index == nullptr) return Status::Internal("a batch without 'index'");
  std::vector<std::vector<int64_t>> offsets;
  std::vector<const Tensor*> tensors;  // SampleOffsets found each (or failed)
  for (const FieldSpec& field : fields) {
    HR_ASSIGN_OR_RETURN(std::vector<int64_t> o, SampleOffsets(batch, field));
    offsets.push_back(std::move(o));
    tensors.push_back(batch.Find(field.name));
  }
  for (int64_t s = 0; s < batch.size(); ++s) {
    const std::string key = SampleKey(index->data<int64_t>()[s]);
    std::vector<std::pair<std::string, std::string>> members;
    for (size_t f = 0; f < fields.size(); ++f) {
      const FieldSpec& field = fields[f];
      const Tensor& tensor = *tensors[f];
      const int64_t first = offsets[f][s];
      const int64_t rows = offsets[f][s + 1] - first;
      const size_t row = field.sample_bytes();
      std::string npy = field.concatenated() ? NpyHeader(field, rows) : NpyHeader(field);
      npy.append(reinterpret_cast<const char*>(tensor.buffer().data()) + row * first,
                 row * static_cast<size_t>(rows));
      members.emplace_back(key + "." + field.name + ".npy", std::move(npy));
    }
    std::string id;
    JsonWriter json(false);
    json.BeginObject().Key("strings").BeginObject();
    for (const Batch::Strings& column : batch.strings) {
      const std::vector<std::string>& row = column.rows[static_cast<size_t>(s)];
      if (column.name == "id") {
        id = row.empty() ? "" : row[0];
        continue;
      }
      json.Key(column.name).BeginArray();
      for (const std::string& item : row) json.String(item);
      json.EndArray();
    }
    json.EndObject().Key("id").String(id).Key("index").Int(index->data<int64_t>()[s]).EndObject();
    members.emplace_back(key + ".json", json.str());
    HR_RETURN_IF_ERROR(out.Add(id, members));
  }
  return Status::Ok();
}

// One pass over the dataset, in index order, for `epoch` (nullopt: every epoch, no op
// being random): the set's shards under out_dir/set.dir.
Status MaterializeSet(const MaterializeOptions& options, MaterializedInfo& info,
                      MaterializedInfo::Set& set) {
  PipelineSpec spec = options.spec;
  spec.shuffle = false;
  spec.batch.drop_last = false;
  const int64_t epoch = set.epoch.value_or(0);
  spec.epochs = epoch + 1;
  LoaderOptions loader_options;
  loader_options.start_epoch = epoch;
  // A batch whose samples all failed still comes: the fields are known from any batch.
  loader_options.deliver_empty_batches = true;
  HR_ASSIGN_OR_RETURN(std::unique_ptr<Loader> loader, Loader::Make(spec, loader_options));
  const fs::path dir = fs::path(options.out_dir) / set.dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::IoError(dir.string() + ": " + ec.message());
  info.dataset_samples = loader->num_samples();
  info.shard_samples = loader->order().options().shard_samples;
  info.shuffle_window = loader->order().options().shuffle_window;
  info.sequences.clear();
  for (const TokenSequence& s : loader->prepared().sequences()) {
    info.sequences.push_back({s.field, s.pad_id, s.ignore_index, s.vision_token_ids});
  }
  SetWriter writer(dir, options.shard_bytes, set);
  while (true) {
    HR_ASSIGN_OR_RETURN(std::optional<Batch> batch, loader->Next());
    if (!batch) break;
    const std::vector<FieldSpec>& fields = loader->prepared().fields();
    if (info.fields.empty() && info.strings.empty()) DescribeBatch(*batch, fields, info);
    for (const SampleError& e : batch->errors) set.skipped.push_back({e.index, e.status});
    HR_RETURN_IF_ERROR(WriteBatch(*batch, fields, writer));
  }
  return writer.Close();
}

}  // namespace

std::vector<std::string> RandomOps(const PipelineSpec& spec) {
  std::vector<std::string> keys;
  for (size_t e = 0; e < spec.mix_ops.size(); ++e) {  // a blend entry's own
    for (size_t i = 0; i < spec.mix_ops[e].size(); ++i) {
      if (OpDrawsRandom(spec.mix_ops[e][i])) keys.push_back(MixOpKey(e, i, spec.mix_ops[e][i]));
    }
  }
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    if (OpDrawsRandom(spec.ops[i])) keys.push_back(OpKey(i, spec.ops[i]));
  }
  return keys;
}

Result<MaterializedInfo> Materialize(const MaterializeOptions& options) {
  const PipelineSpec& spec = options.spec;
  if (!spec.source.materialized.empty()) {
    return Status::InvalidArgument("source.materialized: the config reads a materialization "
                                   "already; materialize the config that produced it");
  }
  if (!spec.batch_ops.empty()) {
    return Status::InvalidArgument("batch ops (code) are not materialized: they run on batches");
  }
  MaterializedInfo info;
  info.seed = spec.seed;
  info.random_ops = RandomOps(spec);
  if (!info.random_ops.empty() && options.epochs.empty()) {
    std::string ops;
    for (const std::string& op : info.random_ops) ops += (ops.empty() ? "" : ", ") + op;
    return Status::InvalidArgument(
        ops + (info.random_ops.size() > 1 ? " draw" : " draws") +
        " randomness per sample and epoch, so one copy cannot serve every epoch: give "
        "--epochs (a list such as 0,1, or all: the config's epochs), each written to "
        "epoch-K/");
  }
  if (info.random_ops.empty()) {
    info.sets.push_back({std::nullopt, ".", 0, {}, {}});
  } else {
    for (const int64_t e : options.epochs) {
      info.sets.push_back({e, "epoch-" + std::to_string(e), 0, {}, {}});
    }
  }
  for (MaterializedInfo::Set& set : info.sets) {
    HR_RETURN_IF_ERROR(MaterializeSet(options, info, set));
  }
  const fs::path dir = options.out_dir;
  HR_RETURN_IF_ERROR(WriteFileText((dir / info.config).string(), PipelineSpecToYaml(spec)));
  // Last: a folder without it is not a materialization (one that stopped half way).
  HR_RETURN_IF_ERROR(WriteFileText((dir / std::string(kMaterializedFile)).string(),
                                   MaterializedInfoToJson(info)));
  return info;
}

}  // namespace headrace
