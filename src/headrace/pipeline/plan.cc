#include "headrace/pipeline/plan.h"

#include <optional>

#include "headrace/ops/image/center_crop.h"
#include "headrace/ops/image/decode.h"
#include "headrace/ops/image/flip.h"
#include "headrace/ops/image/normalize.h"
#include "headrace/ops/image/random_resized_crop.h"
#include "headrace/ops/image/resize.h"
#include "headrace/ops/text/tokenize.h"

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

Result<PipelinePlan> PlanPipeline(const PipelineSpec& spec, Storage& storage) {
  PipelinePlan plan;
  bool decoded = false;
  bool normalized = false;
  std::optional<Size> size;  // fixed image size at this point of the chain, if known
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
              built = std::make_unique<ResizeOp>(s);
              return Status::Ok();
            },
            [&](const CenterCropSpec& s) -> Status {
              size = Size{s.width, s.height};
              built = std::make_unique<CenterCropOp>(s);
              return Status::Ok();
            },
            [&](const RandomResizedCropSpec& s) -> Status {
              size = Size{s.width, s.height};
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
              }
              built = *std::move(tokenize);
              return Status::Ok();
            },
            [&](const UserOpSpec& s) -> Status {
              auto made = s.make(static_cast<int>(plan.fields.size()), position);
              if (!made.ok()) return made.status().WithContext("ops[" + std::to_string(i) + "]");
              if (*made == nullptr) return OpError(i, op, "the op factory returned no op");
              plan.fields.insert(plan.fields.end(), s.fields.begin(), s.fields.end());
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
  if (decoded && !normalized) {
    return Status::InvalidArgument(
        "ops: an image chain must end with image.normalize, which writes the batch tensor");
  }
  if (plan.fields.empty()) {
    return Status::InvalidArgument(
        "ops: the pipeline produces no batch field; add "
        "image.normalize or text.tokenize");
  }
  return plan;
}

}  // namespace headrace
