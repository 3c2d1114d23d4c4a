#include "headrace/pipeline/plan.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>

#include "headrace/ops/image/center_crop.h"
#include "headrace/ops/image/decode.h"
#include "headrace/ops/image/flip.h"
#include "headrace/ops/image/normalize.h"
#include "headrace/ops/image/random_resized_crop.h"
#include "headrace/ops/image/resize.h"
#include "headrace/ops/text/tokenize.h"
#include "headrace/pipeline/source_fields.h"

namespace headrace {
namespace {

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

struct Size {
  int width = 0;
  int height = 0;
};

// What the decoder may scale down to: the needs of the first geometric op after it.
DecodeTarget TargetAfterDecode(const std::vector<OpSpec>& ops, size_t decode_position) {
  for (size_t i = decode_position + 1; i < ops.size(); ++i) {
    const OpSpec& op = ops[i];
    if (std::holds_alternative<FlipSpec>(op)) continue;  // geometry-neutral
    if (const auto* resize = std::get_if<ResizeSpec>(&op)) {
      DecodeTarget target;
      if (resize->shorter_side > 0) {
        target.min_shorter_side = resize->shorter_side;
      } else {
        target.min_width = resize->width;
        target.min_height = resize->height;
      }
      return target;
    }
    break;  // crops and normalize read native pixels: no scaling
  }
  return DecodeTarget{};
}

// "ops[2].image.center_crop.size 224", or "... .width 300, height 200".
std::string SizeSource(size_t position, std::string_view op, int width, int height,
                       bool has_size_key) {
  const std::string p = "ops[" + std::to_string(position) + "]." + std::string(op);
  if (has_size_key && width == height) return p + ".size " + std::to_string(width);
  return p + ".width " + std::to_string(width) + ", height " + std::to_string(height);
}

Status OpError(size_t position, const OpSpec& op, const std::string& message) {
  return Status::InvalidArgument("ops[" + std::to_string(position) + "] " + OpSpecName(op) + ": " +
                                 message);
}

// A model file the storage could not read. A missing file is a mistake in the config,
// like any other bad key; other failures (denied, endpoint down) keep their code.
Status ModelReadError(size_t position, const std::string& uri, const Status& read) {
  const StatusCode code =
      read.code() == StatusCode::kNotFound ? StatusCode::kInvalidArgument : read.code();
  return Status(code, "ops[" + std::to_string(position) + "]: text.tokenize.model: cannot read '" +
                          uri + "': " + read.message());
}

}  // namespace

std::string OpSpecName(const OpSpec& op) {
  return std::visit(Overloaded{
                        [](const DecodeSpec&) { return "image.decode"; },
                        [](const ResizeSpec&) { return "image.resize"; },
                        [](const CenterCropSpec&) { return "image.center_crop"; },
                        [](const RandomResizedCropSpec&) { return "image.random_resized_crop"; },
                        [](const FlipSpec&) { return "image.flip"; },
                        [](const NormalizeSpec&) { return "image.normalize"; },
                        [](const TokenizeSpec&) { return "text.tokenize"; },
                        [](const UserOpSpec& s) { return s.name.c_str(); },
                    },
                    op);
}

namespace {

// Batch fields are found by name (Batch::Find, the Python batch dict): two fields of one
// name, or one named like the engine's own "index", would shadow each other.
Status CheckFieldNames(const PipelinePlan& plan) {
  std::map<std::string_view, size_t> seen;
  for (size_t f = 0; f < plan.fields.size(); ++f) {
    const std::string& name = plan.fields[f].name;
    const std::string& source = plan.field_sources[f];
    if (name == "index") {
      return Status::InvalidArgument(source + ": the field name 'index' is the engine's own "
                                     "(each sample's dataset index): choose another name");
    }
    const auto [it, fresh] = seen.emplace(name, f);
    if (!fresh) {
      return Status::InvalidArgument(source + ": writes the field '" + name + "', which " +
                                     plan.field_sources[it->second] +
                                     " writes too: batch field names must be unique");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<PipelinePlan> PlanPipeline(const PipelineSpec& spec, Storage& storage) {
  PipelinePlan plan;
  bool decoded = false;
  bool normalized = false;
  std::optional<Size> size;  // fixed image size at this point of the chain, if known
  std::string size_source;   // the key that fixed it (SizeSource)
  for (size_t i = 0; i < spec.ops.size(); ++i) {
    const OpSpec& op = spec.ops[i];
    const int position = static_cast<int>(i);
    // A user op reads the image if there is one but never changes it: not an image op.
    const bool is_image =
        !std::holds_alternative<TokenizeSpec>(op) && !std::holds_alternative<UserOpSpec>(op);
    if (is_image && !std::holds_alternative<DecodeSpec>(op) && !decoded) {
      return OpError(i, op, "image operators need image.decode before them");
    }
    if (is_image && normalized) {
      return OpError(i, op,
                     "image.normalize writes the batch tensor and must be the last "
                     "image operator");
    }
    std::unique_ptr<Op> built;
    Status status = std::visit(
        Overloaded{
            [&](const DecodeSpec& s) -> Status {
              if (decoded) return OpError(i, op, "the chain decodes only once");
              if (i != 0) return OpError(i, op, "image.decode must be the first operator");
              decoded = true;
              plan.reads_media = true;
              built = std::make_unique<DecodeOp>(s, TargetAfterDecode(spec.ops, i));
              return Status::Ok();
            },
            [&](const ResizeSpec& s) -> Status {
              size =
                  s.shorter_side > 0 ? std::nullopt : std::optional<Size>(Size{s.width, s.height});
              size_source = SizeSource(i, "image.resize", s.width, s.height, false);
              built = std::make_unique<ResizeOp>(s);
              return Status::Ok();
            },
            [&](const CenterCropSpec& s) -> Status {
              size = Size{s.width, s.height};
              size_source = SizeSource(i, "image.center_crop", s.width, s.height, true);
              built = std::make_unique<CenterCropOp>(s);
              return Status::Ok();
            },
            [&](const RandomResizedCropSpec& s) -> Status {
              size = Size{s.width, s.height};
              size_source = SizeSource(i, "image.random_resized_crop", s.width, s.height, true);
              built = std::make_unique<RandomResizedCropOp>(s, position);
              return Status::Ok();
            },
            [&](const FlipSpec& s) -> Status {
              built = std::make_unique<FlipOp>(s, position);
              return Status::Ok();
            },
            [&](const NormalizeSpec& s) -> Status {
              if (!size) {
                return OpError(i, op,
                               "the image size is not fixed here: add "
                               "image.center_crop, image.random_resized_crop or an "
                               "exact image.resize before it");
              }
              normalized = true;
              FieldSpec field{"image", s.dtype, {}};
              field.sample_shape = s.layout == Layout::kCHW
                                       ? std::vector<int64_t>{3, size->height, size->width}
                                       : std::vector<int64_t>{size->height, size->width, 3};
              built = std::make_unique<NormalizeOp>(s, static_cast<int>(plan.fields.size()),
                                                    size->width, size->height);
              plan.fields.push_back(std::move(field));
              plan.field_sources.push_back(size_source);
              return Status::Ok();
            },
            [&](const TokenizeSpec& s) -> Status {
              const int first = static_cast<int>(plan.fields.size());
              Buffer model;
              if (!s.model.empty()) {  // an empty key is TokenizeOp::Make's to name
                Result<Buffer> read = storage.Read(s.model);
                if (!read.ok()) return ModelReadError(i, s.model, read.status());
                model = *std::move(read);
              }
              auto tokenize = TokenizeOp::Make(
                  s, std::string_view(reinterpret_cast<const char*>(model.data()), model.size()),
                  first, first + 1, first + 2);
              if (!tokenize.ok())
                return tokenize.status().WithContext("ops[" + std::to_string(i) + "]");
              for (const char* name : {"input_ids", "attention_mask", "labels"}) {
                plan.fields.push_back(FieldSpec{name, DType::kI64, {s.max_length}});
                plan.field_sources.push_back("ops[" + std::to_string(i) +
                                             "].text.tokenize.max_length " +
                                             std::to_string(s.max_length));
              }
              built = *std::move(tokenize);
              return Status::Ok();
            },
            [&](const UserOpSpec& s) -> Status {
              auto made = s.make(static_cast<int>(plan.fields.size()), position);
              if (!made.ok()) return made.status().WithContext("ops[" + std::to_string(i) + "]");
              if (*made == nullptr) return OpError(i, op, "the op factory returned no op");
              for (size_t f = 0; f < s.fields.size(); ++f) {
                std::string shape;
                for (int64_t d : s.fields[f].sample_shape) {
                  shape += (shape.empty() ? "" : "x") + std::to_string(d);
                }
                plan.fields.push_back(s.fields[f]);
                plan.field_sources.push_back("ops[" + std::to_string(i) + "].fields[" +
                                             std::to_string(f) + "] (" + s.name + ", " +
                                             s.fields[f].name + ") shape " + shape);
              }
              built = *std::move(made);
              return Status::Ok();
            },
        },
        op);
    HR_RETURN_IF_ERROR(status);
    plan.ops.push_back(std::move(built));
  }
  for (size_t i = 0; i < spec.batch_ops.size(); ++i) {
    const BatchOpSpec& b = spec.batch_ops[i];
    if (!b.make) {
      return Status::InvalidArgument("batch_ops[" + std::to_string(i) + "] " + b.name +
                                     ": no factory");
    }
    HR_ASSIGN_OR_RETURN(std::unique_ptr<BatchOp> op, b.make());
    plan.batch_ops.push_back(std::move(op));
  }
  AddSourceFields(spec.source, plan);
  if (decoded && !normalized) {
    return Status::InvalidArgument(
        "ops: an image chain must end with image.normalize, which writes the batch tensor");
  }
  if (plan.fields.empty()) {
    return Status::InvalidArgument(
        "ops: the pipeline produces no batch field; add "
        "image.normalize or text.tokenize");
  }
  HR_RETURN_IF_ERROR(CheckFieldNames(plan));
  return plan;
}

Status CheckBatchFitsBudget(const PipelineSpec& spec, const PipelinePlan& plan,
                            int64_t batch_budget_bytes) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  const auto mul = [](int64_t a, int64_t b) {
    int64_t out = 0;
    return __builtin_mul_overflow(a, b, &out) ? kMax : out;
  };
  const auto add = [](int64_t a, int64_t b) {
    int64_t out = 0;
    return __builtin_add_overflow(a, b, &out) ? kMax : out;
  };
  // Bytes of one sample, per source key (text.tokenize writes three fields); kMax when a
  // product overflows, which no budget can hold.
  std::map<std::string, int64_t> by_source;
  int64_t sample_bytes = static_cast<int64_t>(sizeof(int64_t));  // the engine's "index"
  for (size_t f = 0; f < plan.fields.size(); ++f) {
    int64_t bytes = static_cast<int64_t>(DTypeSize(plan.fields[f].dtype));
    for (int64_t d : plan.fields[f].sample_shape) bytes = mul(bytes, d);
    const std::string& source = f < plan.field_sources.size() ? plan.field_sources[f]
                                                              : plan.fields[f].name;
    by_source[source] = add(by_source[source], bytes);
    sample_bytes = add(sample_bytes, bytes);
  }
  const int64_t batch_bytes = mul(sample_bytes, spec.batch.size);
  if (batch_bytes <= batch_budget_bytes) return Status::Ok();
  const auto largest =
      std::max_element(by_source.begin(), by_source.end(),
                       [](const auto& a, const auto& b) { return a.second < b.second; });
  const std::string key = largest == by_source.end() ? std::string("batch.size") : largest->first;
  const std::string bytes_text =
      batch_bytes == kMax ? "more than " + std::to_string(kMax) : std::to_string(batch_bytes);
  return Status::InvalidArgument(
      key + ": a batch of " + std::to_string(spec.batch.size) + " samples would take " +
      bytes_text + " bytes, more than the " + std::to_string(batch_budget_bytes) +
      " that memory.budget_bytes " + std::to_string(spec.memory.budget_bytes) +
      " leaves for batches after execution.io_budget_bytes; lower it or batch.size, or "
      "raise memory.budget_bytes");
}

}  // namespace headrace
