#include "headrace/pipeline/source_fields.h"

#include <cstring>
#include <string>
#include <variant>
#include <vector>

namespace headrace {
namespace {

// One scalar source field and the batch rows it fills.
struct ScalarField {
  int field = 0;  // index into the source's fields
  std::string name;
  FieldKind kind = FieldKind::kInt;
  int max_items = 0;  // 0: one value
  int row = 0;        // its batch field
  int count_row = -1; // `<name>_count` for a list
};

class PassThroughOp final : public Op {
 public:
  explicit PassThroughOp(std::vector<ScalarField> fields) : fields_(std::move(fields)) {}
  std::string_view name() const override { return "source.fields"; }

  Status Run(SampleContext& ctx) const override {
    const std::span<const Attribute> attributes = ctx.sample->attributes;
    for (const ScalarField& f : fields_) {
      const int capacity = f.max_items == 0 ? 1 : f.max_items;
      uint8_t* row = ctx.rows[f.row];
      const size_t item_bytes = f.kind == FieldKind::kInt ? sizeof(int64_t) : sizeof(float);
      std::memset(row, 0, item_bytes * static_cast<size_t>(capacity));
      int items = 0;
      for (const Attribute& a : attributes) {
        if (a.field != f.field || items == capacity) continue;
        if (f.kind == FieldKind::kInt) {
          const int64_t v = std::get<int64_t>(a.value);
          std::memcpy(row + items * item_bytes, &v, item_bytes);
        } else {
          const float v = static_cast<float>(std::get<double>(a.value));
          std::memcpy(row + items * item_bytes, &v, item_bytes);
        }
        ++items;
      }
      if (f.max_items == 0 && items == 0) {
        return Status::MissingField("the record has no '" + f.name + "'");
      }
      if (f.count_row >= 0) {
        const int64_t count = items;
        std::memcpy(ctx.rows[f.count_row], &count, sizeof(count));
      }
    }
    return Status::Ok();
  }

 private:
  std::vector<ScalarField> fields_;
};

// Copies the rows a materialization stored (formats/materialized.h) into the batch.
class MaterializedRowsOp final : public Op {
 public:
  explicit MaterializedRowsOp(std::vector<FieldSpec> fields) : fields_(std::move(fields)) {}
  std::string_view name() const override { return "source.materialized"; }

  Status Run(SampleContext& ctx) const override {
    const std::vector<Sample::Item>& media = ctx.sample->media;
    if (media.size() != fields_.size() + 1) {
      return Status::Internal("a materialized sample with " + std::to_string(media.size()) +
                              " members, not " + std::to_string(fields_.size() + 1));
    }
    for (size_t f = 0; f < fields_.size(); ++f) {
      const std::span<const uint8_t> npy{media[f].bytes.data(), media[f].bytes.size()};
      switch (fields_[f].layout) {
        case FieldLayout::kFixed: {
          HR_ASSIGN_OR_RETURN(const std::span<const uint8_t> row, NpyRow(npy, fields_[f]));
          std::memcpy(ctx.rows[f], row.data(), row.size());
          break;
        }
        case FieldLayout::kItems: {
          HR_ASSIGN_OR_RETURN(const NpyRows items, NpyRowsOf(npy, fields_[f]));
          HR_ASSIGN_OR_RETURN(uint8_t * out, ctx.AppendRows(static_cast<int>(f), items.rows));
          if (!items.bytes.empty()) std::memcpy(out, items.bytes.data(), items.bytes.size());
          break;
        }
        case FieldLayout::kRagged:
          HR_RETURN_IF_ERROR(AppendEntries(ctx, f, npy, media[f + 1]));
          break;
        case FieldLayout::kLengths:  // with its ragged field, just before
          break;
      }
    }
    return Status::Ok();
  }

 private:
  // The ragged field `f`'s rows, entry by entry as its lengths member says.
  Status AppendEntries(SampleContext& ctx, size_t f, std::span<const uint8_t> npy,
                       const Sample::Item& lengths_member) const {
    HR_ASSIGN_OR_RETURN(const NpyRows rows, NpyRowsOf(npy, fields_[f]));
    HR_ASSIGN_OR_RETURN(const NpyRows lengths,
                        NpyRowsOf({lengths_member.bytes.data(), lengths_member.bytes.size()},
                                  fields_[f + 1]));
    const size_t row_bytes = fields_[f].sample_bytes();
    size_t at = 0;
    for (int64_t e = 0; e < lengths.rows; ++e) {
      int32_t length = 0;
      std::memcpy(&length, lengths.bytes.data() + e * sizeof length, sizeof length);
      const auto n = static_cast<size_t>(std::max(length, 0));
      if (length < 0 || n > (rows.bytes.size() - at) / row_bytes) {
        at = SIZE_MAX;  // more than the member holds
        break;
      }
      HR_ASSIGN_OR_RETURN(uint8_t * out, ctx.AppendRows(static_cast<int>(f), length));
      if (n > 0) std::memcpy(out, rows.bytes.data() + at, n * row_bytes);
      at += n * row_bytes;
    }
    if (at != rows.bytes.size()) {
      return Status::CorruptData("member " + fields_[f].name + ".npy has " +
                                 std::to_string(rows.rows) + " rows, its lengths say otherwise");
    }
    return Status::Ok();
  }

  std::vector<FieldSpec> fields_;
};

}  // namespace

PipelinePlan MaterializedPlan(const MaterializedInfo& info) {
  PipelinePlan plan;
  plan.fields = info.fields;
  for (const FieldSpec& f : info.fields) {
    plan.field_sources.push_back("source.materialized field '" + f.name + "'");
  }
  plan.strings.push_back(EngineInputs::StringField{"id", -1, false});
  for (size_t i = 0; i < info.strings.size(); ++i) {
    plan.strings.push_back(
        EngineInputs::StringField{info.strings[i].name, static_cast<int>(i), info.strings[i].list});
  }
  plan.chains.emplace_back().ops.push_back(std::make_unique<MaterializedRowsOp>(info.fields));
  for (const MaterializedInfo::Sequence& s : info.sequences) {
    plan.sequences.push_back(TokenSequence{s.field, s.pad_id, s.ignore_index, s.vision_token_ids});
  }
  plan.reads_media = true;
  return plan;
}

void AddSourceFields(const SourceSpec& spec, PipelinePlan& plan) {
  plan.strings.push_back(EngineInputs::StringField{"id", -1, false});
  const std::vector<SourceFieldSpec> fields = ResolvedFields(spec);
  std::vector<ScalarField> scalars;
  for (size_t i = 0; i < fields.size(); ++i) {
    const SourceFieldSpec& f = fields[i];
    const std::string source = "source.fields[" + std::to_string(i) + "] (" + f.name + ")";
    const int field = static_cast<int>(i);
    if (f.kind == FieldKind::kText || f.kind == FieldKind::kString) {
      plan.strings.push_back(EngineInputs::StringField{f.name, field, f.max_items > 0});
      continue;
    }
    if (f.kind != FieldKind::kInt && f.kind != FieldKind::kFloat) continue;
    ScalarField s{field, f.name, f.kind, f.max_items, static_cast<int>(plan.fields.size())};
    FieldSpec tensor{f.name, f.kind == FieldKind::kInt ? DType::kI64 : DType::kF32, {}};
    if (f.max_items > 0) tensor.sample_shape = {f.max_items};
    plan.fields.push_back(std::move(tensor));
    plan.field_sources.push_back(source);
    if (f.max_items > 0) {
      s.count_row = static_cast<int>(plan.fields.size());
      plan.fields.push_back(FieldSpec{f.name + "_count", DType::kI64, {}});
      plan.field_sources.push_back(source + " count");
    }
    scalars.push_back(std::move(s));
  }
  if (scalars.empty()) return;
  for (OpChain& chain : plan.chains) chain.ops.push_back(std::make_unique<PassThroughOp>(scalars));
}

}  // namespace headrace
