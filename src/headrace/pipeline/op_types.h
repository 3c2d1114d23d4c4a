// The operator types of a PipelineSpec's ops: every op of ops/all_ops.h, and the code op
// (UserOpSpec) with the same static description, so that the config, the planner and
// the bindings treat every alternative of OpSpec alike.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "headrace/ops/all_ops.h"
#include "headrace/ops/op_plan.h"
#include "headrace/pipeline/spec.h"

namespace headrace {

// The description of a user op (a Python function): built in code, never from YAML.
struct UserOpType {
  static constexpr std::string_view kName = "user";  // its YAML placeholder key
  using Spec = UserOpSpec;
  // Only its name is written (as a placeholder that the parser refuses).
  static void Fields(auto& s, auto&& f) { f("name", s.name); }
  static Status Validate(const Spec& spec, const std::string& key);
  // Reads every image the chain holds where it stands; writes its fields.
  static Status Declare(const Spec& spec, PlanContext& ctx);
  static Result<std::unique_ptr<Op>> Make(const Spec& spec, PlanContext& ctx);
};

// The operator type of a spec: DecodeOp for DecodeSpec, ..., UserOpType for UserOpSpec.
template <typename Spec>
using OpTypeOf = std::conditional_t<std::is_same_v<Spec, UserOpSpec>, UserOpType,
                                    AllOps::OpFor<Spec>>;

// Calls f.template operator()<OpType>(spec) with the op's type and its spec.
template <typename F>
decltype(auto) VisitOpType(const OpSpec& op, F&& f) {
  return std::visit(
      [&](const auto& spec) -> decltype(auto) {
        using Spec = std::remove_cvref_t<decltype(spec)>;
        return f.template operator()<OpTypeOf<Spec>>(spec);
      },
      op);
}

// Whether the op draws from its random stream with this spec (its type's DrawsRandom,
// ops/op_plan.h), so that its output depends on the seed and the epoch. A code op may
// do anything: it counts as random.
inline bool OpDrawsRandom(const OpSpec& op) {
  return VisitOpType(op, []<typename T>(const auto& spec) {
    if constexpr (std::is_same_v<T, UserOpType>) {
      return true;
    } else if constexpr (requires { T::DrawsRandom(spec); }) {
      return T::DrawsRandom(spec);
    } else {
      return false;
    }
  });
}

// "ops[2].image.resize", "ops[0].user": the key of the op at `position`, the prefix of
// every key its errors name.
inline std::string OpKey(size_t position, const OpSpec& op) {
  return "ops[" + std::to_string(position) + "]." +
         std::string(VisitOpType(op, []<typename T>(const auto&) { return T::kName; }));
}
// "source.mix[1].ops[0].video.patchify": the key of a blend entry's own op.
inline std::string MixOpKey(size_t entry, size_t position, const OpSpec& op) {
  return "source.mix[" + std::to_string(entry) + "]." + OpKey(position, op);
}

}  // namespace headrace
