// The op types' rules the planner runs through (pipeline/op_types.h): a user op's
// (UserOpType), and an op spec's name.
#include "headrace/pipeline/op_types.h"

namespace headrace {

std::string_view OpSpecName(const OpSpec& op) {
  return std::visit(
      [](const auto& spec) -> std::string_view {
        using Spec = std::remove_cvref_t<decltype(spec)>;
        if constexpr (std::is_same_v<Spec, UserOpSpec>) {
          return spec.name;
        } else {
          return OpTypeOf<Spec>::kName;
        }
      },
      op);
}

// --- the user op's description ---------------------------------------------------------

Status UserOpType::Validate(const Spec& s, const std::string& p) {
  HR_RETURN_IF_ERROR(schema::NonEmpty(p + ".name", s.name, "the op's name in reports"));
  if (!s.make) return schema::Invalid(p + ".make", "must be set (the op factory)");
  for (size_t f = 0; f < s.fields.size(); ++f) {
    const std::string key = p + ".fields[" + std::to_string(f) + "]";
    HR_RETURN_IF_ERROR(schema::NonEmpty(key, s.fields[f].name, "a batch field name"));
    for (int64_t d : s.fields[f].sample_shape) {
      HR_RETURN_IF_ERROR(schema::AtLeast<int64_t>(key, d, 1));
    }
  }
  return Status::Ok();
}

Status UserOpType::Declare(const Spec& s, PlanContext& ctx) {
  ctx.ReadEvery(ValueKind::kImage);
  const std::string at = ctx.key().substr(0, ctx.key().find('.'));  // "ops[3]"
  for (size_t f = 0; f < s.fields.size(); ++f) {
    std::string shape;
    for (int64_t d : s.fields[f].sample_shape) {
      shape += (shape.empty() ? "" : "x") + std::to_string(d);
    }
    const std::string source = at + ".fields[" + std::to_string(f) + "] (" + s.name + ", " +
                               s.fields[f].name + ") shape " + shape;
    ctx.AddField(s.fields[f], source, source);
  }
  return Status::Ok();
}

Result<std::unique_ptr<Op>> UserOpType::Make(const Spec& s, PlanContext& ctx) {
  UserOpBinding binding;
  binding.first_row = s.fields.empty() ? 0 : ctx.row(s.fields[0].name);
  binding.position = ctx.position();
  binding.images = ctx.reads();
  const std::string at = ctx.key().substr(0, ctx.key().find('.'));
  auto made = s.make(binding);
  if (!made.ok()) return made.status().WithContext(at);
  if (*made == nullptr) return ctx.Error("the op factory returned no op");
  return *std::move(made);
}

}  // namespace headrace
