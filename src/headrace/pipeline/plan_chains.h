// The planner's passes and chains, shared by plan.cc and plan_chains.cc (internal to
// pipeline/: PlanPipeline in plan.h is the interface).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "headrace/ops/op.h"
#include "headrace/ops/op_plan.h"
#include "headrace/pipeline/source_fields.h"
#include "headrace/pipeline/spec.h"

namespace headrace::planning {

// One chain to plan: its ops (a blend entry's own, then the shared ones) and their keys.
struct ChainOps {
  std::string entry;  // the blend entry whose samples it runs; "": every sample
  std::vector<OpSpec> ops;
  std::vector<std::string> keys;
  size_t own = 0;  // the entry's own ops, first in `ops`

  ChainOps Own() const {
    ChainOps out;
    out.entry = entry;
    out.ops.assign(ops.begin(), ops.begin() + static_cast<std::ptrdiff_t>(own));
    out.keys.assign(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(own));
    out.own = own;
    return out;
  }
};

// The one batch layout of several chains: every field any of them writes, in the order
// they first appear (chain by chain), and who writes each.
struct BatchLayout {
  std::vector<FieldSpec> fields;
  std::vector<std::string> writers;
  std::vector<std::string> sources;
  std::vector<PlanState::LayoutField> shared;
  std::vector<std::vector<bool>> written;  // per chain, per field: the chain writes it
};

// Every chain declared, and the layout they share (null for one chain). The entries' own
// ops are declared alone first and their fields joined (JoinLayouts); then each whole
// chain (own ops, then the shared ones) is declared over that layout, so that a shared op
// finds a field only another entry writes (ReadField). The shared ops append their
// fields in the same order in every chain, so each chain ends with the same layout;
// where they do not (a shared op whose output shape follows the entry's: a crop of
// another size), that is a configuration error.
struct DeclaredChains {
  std::vector<ChainOps> chains;
  std::vector<PlanState> states;
  std::unique_ptr<BatchLayout> layout;
};

// --- the passes (plan.cc) --------------------------------------------------------------
// Declares each of `ops` (keys[i] names ops[i] in messages) into `state`.
Status DeclareOps(const std::vector<OpSpec>& ops, const std::vector<std::string>& keys,
                  PlanState& state);
// The source's fields as the chain's first values.
void AddSourceValues(const std::vector<SourceField>& fields, PlanState& state);
// `<list>_count` for each list whose ops write batch fields.
void AddItemCounts(const std::vector<SourceField>& fields, PlanState& state);
// No two fields of one name, nor one named like the engine's own "index".
Status CheckFieldNames(const std::vector<FieldSpec>& fields,
                       const std::vector<std::string>& writers);

// --- the chains (plan_chains.cc) -------------------------------------------------------
// Every chain of `spec` declared over one layout.
Result<DeclaredChains> DeclareChains(const PipelineSpec& spec);
// The op that fills, for chain `chain` (blend entry `entry`), the fields only other
// chains write; null when there are none.
Result<std::unique_ptr<Op>> AbsentFields(const BatchLayout& layout, size_t chain,
                                         const std::string& entry);
// The shared ops of several chains, each made once where every chain declares it alike.
Result<std::vector<std::shared_ptr<const Op>>> MakeSharedOps(const PipelineSpec& spec,
                                                            DeclaredChains& declared);

}  // namespace headrace::planning
