// The planner's chains (pipeline/plan.h): one chain of ops, or one per blend entry when
// some entry has ops of its own (source.mix[*].ops then the shared ops), declared one by
// one over one batch layout, the shared ops made once where every chain declares them
// alike. PlanPipeline (plan.cc) makes and groups each chain's ops.
#include "headrace/pipeline/plan_chains.h"

#include <algorithm>
#include <map>

#include "headrace/ops/absent_fields.h"
#include "headrace/ops/schema.h"
#include "headrace/pipeline/op_types.h"
#include "headrace/pipeline/source_fields.h"

namespace headrace::planning {

// The first op of the list that reads a value of kind `from` and writes it back, under
// the same name, as kind `to` (image.decode for encoded bytes -> image), from each op's
// declaration of its ExampleSpec. Only on the error path: it declares every op.
std::string ProducerOf(ValueKind from, ValueKind to) {
  std::string found;
  AllOps::ForEach([&]<typename T>() {
    if (!found.empty()) return;
    PlanState probe;
    probe.synthesize_inputs = true;
    probe.ops.resize(1);
    probe.ops[0].key = std::string(T::kName);
    PlanContext ctx(probe, 0);
    if (!T::Declare(T::ExampleSpec(), ctx).ok()) return;
    const PlanOpRecord& r = probe.ops[0];
    for (size_t i = 0; i < r.reads.size(); ++i) {
      for (const auto& [name, slot] : r.writes) {
        if (name == r.reads[i].first && r.inputs[i].kind == from &&
            probe.values[static_cast<size_t>(slot)].desc.kind == to) {
          found = T::kName;
        }
      }
    }
  });
  return found;
}


// One chain (spec.ops), or one per blend entry when some entry has ops of its own.
std::vector<ChainOps> ChainsOf(const PipelineSpec& spec) {
  const auto& mix = spec.source.mix;
  const bool own = std::any_of(spec.mix_ops.begin(), spec.mix_ops.end(),
                               [](const std::vector<OpSpec>& ops) { return !ops.empty(); });
  const auto shared = [&](ChainOps& chain) {
    for (size_t i = 0; i < spec.ops.size(); ++i) {
      chain.ops.push_back(spec.ops[i]);
      chain.keys.push_back(OpKey(i, spec.ops[i]));
    }
  };
  std::vector<ChainOps> chains;
  if (!own || mix.empty()) {
    shared(chains.emplace_back());
    return chains;
  }
  for (size_t e = 0; e < mix.size(); ++e) {
    ChainOps& chain = chains.emplace_back();
    chain.entry = mix[e].name;
    if (e < spec.mix_ops.size()) {
      for (size_t i = 0; i < spec.mix_ops[e].size(); ++i) {
        chain.ops.push_back(spec.mix_ops[e][i]);
        chain.keys.push_back(MixOpKey(e, i, spec.mix_ops[e][i]));
      }
      chain.own = spec.mix_ops[e].size();
    }
    shared(chain);
  }
  return chains;
}


// "bf16 [?, 1176] (ragged)": a field as a message names it.
std::string DescribeField(const FieldSpec& f) {
  std::string shape = f.concatenated() ? "?" : "";
  for (int64_t d : f.sample_shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  std::string out = std::string(DTypeName(f.dtype)) + " [" + shape + "]";
  if (f.concatenated()) out += " (" + std::string(FieldLayoutName(f.layout)) + ")";
  if (!f.count_field.empty()) out += " counted by '" + f.count_field + "'";
  return out;
}

// The first chain that writes field `row` of the layout so far.
size_t FirstWriter(const BatchLayout& layout, size_t row) {
  for (size_t c = 0; c < layout.written.size(); ++c) {
    if (layout.written[c][row]) return c;
  }
  return 0;
}

bool SameField(const FieldSpec& a, const FieldSpec& b) {
  return a.name == b.name && a.dtype == b.dtype && a.sample_shape == b.sample_shape &&
         a.layout == b.layout && a.count_field == b.count_field && a.tokens_of == b.tokens_of;
}

// Joins the chains' fields (each declared alone) into one layout. A field two chains
// write must be the same in both: a batch tensor has one dtype and row shape.
Result<BatchLayout> JoinLayouts(const std::vector<ChainOps>& chains,
                                const std::vector<PlanState>& declared) {
  BatchLayout layout;
  for (size_t c = 0; c < declared.size(); ++c) {
    const PlanState& state = declared[c];
    std::vector<int> joined(state.fields.size());
    for (size_t r = 0; r < state.fields.size(); ++r) {
      const FieldSpec& f = state.fields[r];
      const auto it = std::find_if(layout.fields.begin(), layout.fields.end(),
                                   [&](const FieldSpec& g) { return g.name == f.name; });
      if (it != layout.fields.end()) {
        const size_t u = static_cast<size_t>(it - layout.fields.begin());
        if (!SameField(*it, f)) {
          return Status::InvalidArgument(
              state.field_writers[r] + " writes the batch field '" + f.name + "' as " +
              DescribeField(f) + ", but " + layout.writers[u] + " (source.mix entry '" +
              chains[FirstWriter(layout, u)].entry + "') writes it as " + DescribeField(*it) +
              ": the entries of a blend fill one batch layout, so a field two of them write "
              "needs one dtype and shape (give their ops the same parameters)");
        }
        joined[r] = static_cast<int>(u);
        continue;
      }
      joined[r] = static_cast<int>(layout.fields.size());
      layout.fields.push_back(f);
      layout.writers.push_back(state.field_writers[r]);
      layout.sources.push_back(state.field_sources[r]);
      layout.shared.push_back(PlanState::LayoutField{state.field_writers[r], 0, {}, false});
      for (auto& w : layout.written) w.push_back(false);
    }
    layout.written.emplace_back(layout.fields.size(), false);
    for (int u : joined) layout.written[c][static_cast<size_t>(u)] = true;
    // A field an op writes: that op's key, items and geometry, for chains that read it
    // back without writing it (the first chain that writes it).
    for (const PlanOpRecord& op : state.ops) {
      for (const auto& [name, row] : op.fields) {
        PlanState::LayoutField& shared = layout.shared[static_cast<size_t>(joined[row])];
        if (shared.writer != state.field_writers[static_cast<size_t>(row)]) continue;
        shared.writer = op.key;
        shared.items = op.list_field >= 0 ? op.items : 0;
        shared.geometry = op.geometry;
      }
    }
  }
  return layout;
}

// The chain's declaration: the source's fields as its first values, its ops, its lists'
// item counts. With a layout (several chains), its fields take their rows there.
Result<PlanState> DeclareChain(const std::vector<SourceField>& fields, const ChainOps& chain,
                               const BatchLayout* layout, size_t index) {
  PlanState state;
  state.producer_of = ProducerOf;
  if (layout != nullptr) {
    state.fields = layout->fields;
    state.field_writers = layout->writers;
    state.field_sources = layout->sources;
    state.layout = layout->shared;
    for (size_t row = 0; row < state.layout.size(); ++row) {
      state.layout[row].this_chain = layout->written[index][row];
    }
  }
  AddSourceValues(fields, state);
  HR_RETURN_IF_ERROR(DeclareOps(chain.ops, chain.keys, state));
  AddItemCounts(fields, state);
  HR_RETURN_IF_ERROR(CheckFieldNames(state.fields, state.field_writers));
  return state;
}


// The field one chain's ops declare twice, as one name (each chain declared alone, and
// the shared ops, check it; over a layout a second declaration would take the same row).
Status CheckWrittenOnce(const PlanState& state) {
  std::map<int, std::string> by;
  for (const PlanOpRecord& op : state.ops) {
    for (const auto& [name, row] : op.fields) {
      const auto [it, fresh] = by.emplace(row, op.key);
      if (!fresh && it->second != op.key) {
        return Status::InvalidArgument(op.key + ": writes the field '" + name + "', which " +
                                       it->second + " writes too: batch field names must be "
                                       "unique");
      }
    }
  }
  return Status::Ok();
}

Result<DeclaredChains> DeclareChains(const PipelineSpec& spec) {
  DeclaredChains out;
  out.chains = ChainsOf(spec);
  const std::vector<SourceField> fields = SourceFieldsOf(spec.source);
  if (out.chains.size() == 1) {
    HR_ASSIGN_OR_RETURN(PlanState state, DeclareChain(fields, out.chains[0], nullptr, 0));
    out.states.push_back(std::move(state));
    return out;
  }
  std::vector<PlanState> own;
  for (const ChainOps& chain : out.chains) {
    HR_ASSIGN_OR_RETURN(PlanState state, DeclareChain(fields, chain.Own(), nullptr, 0));
    own.push_back(std::move(state));
  }
  HR_ASSIGN_OR_RETURN(BatchLayout layout, JoinLayouts(out.chains, own));
  for (size_t c = 0; c < out.chains.size(); ++c) {
    HR_ASSIGN_OR_RETURN(PlanState state, DeclareChain(fields, out.chains[c], &layout, c));
    HR_RETURN_IF_ERROR(CheckWrittenOnce(state));
    out.states.push_back(std::move(state));
  }
  // The layout as the whole chains leave it: the same in each.
  const PlanState& first = out.states.front();
  for (size_t c = 1; c < out.states.size(); ++c) {
    const PlanState& other = out.states[c];
    for (size_t row = 0; row < std::max(first.fields.size(), other.fields.size()); ++row) {
      if (row < first.fields.size() && row < other.fields.size() &&
          SameField(first.fields[row], other.fields[row])) {
        continue;
      }
      const PlanState& longer = row < first.fields.size() ? first : other;
      const size_t which = &longer == &first ? 0 : c;
      const FieldSpec& f = longer.fields[row];
      const auto in = [&](const PlanState& s) {
        const auto it = std::find_if(s.fields.begin(), s.fields.end(),
                                     [&](const FieldSpec& g) { return g.name == f.name; });
        return it == s.fields.end() ? std::string("not at all")
                                    : "as " + DescribeField(*it);
      };
      return Status::InvalidArgument(
          longer.field_writers[row] + " writes the batch field '" + f.name + "' " +
          in(out.states[which]) + " on source.mix entry '" + out.chains[which].entry +
          "' but " + in(out.states[which == 0 ? c : 0]) + " on '" +
          out.chains[which == 0 ? c : 0].entry + "': the entries of a blend fill one batch "
          "layout, so the shared ops must write the same fields for each (give the entries' "
          "own ops the same output sizes)");
    }
  }
  layout.fields = first.fields;
  layout.writers = first.field_writers;
  layout.sources = first.field_sources;
  layout.written.assign(out.states.size(), std::vector<bool>(layout.fields.size(), false));
  for (size_t c = 0; c < out.states.size(); ++c) {
    for (int row : out.states[c].rows_written) layout.written[c][static_cast<size_t>(row)] = true;
  }
  out.layout = std::make_unique<BatchLayout>(std::move(layout));
  return out;
}

// The op that fills, for one chain's samples, the fields of the layout only other chains
// write (AbsentFieldsOp); null when there are none. A list's items counted by a field
// this chain writes would be miscounted: refused.
Result<std::unique_ptr<Op>> AbsentFields(const BatchLayout& layout, size_t chain,
                                         const std::string& entry) {
  AbsentFieldsOp::Options options;
  const std::vector<bool>& written = layout.written[chain];
  for (size_t row = 0; row < layout.fields.size(); ++row) {
    if (written[row]) continue;
    const FieldSpec& f = layout.fields[row];
    options.names.push_back(f.name);
    if (!f.concatenated()) {
      options.zero.push_back({static_cast<int>(row), f.sample_bytes()});
    } else if (f.layout == FieldLayout::kLengths) {
      options.names.pop_back();  // the assemble stage writes it from its field's entries
    } else if (f.count_field.empty()) {
      options.empty.push_back(static_cast<int>(row));  // one entry per sample: an empty one
    } else {
      const auto count = std::find_if(layout.fields.begin(), layout.fields.end(),
                                      [&](const FieldSpec& g) { return g.name == f.count_field; });
      if (count != layout.fields.end() && written[static_cast<size_t>(count - layout.fields.begin())]) {
        return Status::InvalidArgument(
            "source.mix entry '" + entry + "': its ops write '" + f.count_field +
            "', which counts the items of '" + f.name + "' (from " + layout.writers[row] +
            "), but not '" + f.name + "' itself: its samples' counts would not match their "
            "items; give the entry the ops that write '" + f.name + "' too");
      }
    }
  }
  if (options.names.empty()) return std::unique_ptr<Op>();
  return std::unique_ptr<Op>(std::make_unique<AbsentFieldsOp>(std::move(options)));
}

// What an op's Make sees of the plan (its record: what it reads and writes, where, with
// which kinds and shapes, and what the ops after it need), as text: equal in two chains,
// the op made in one is the op the other would make.
std::string Signature(const PlanOpRecord& r) {
  std::string s;
  const auto pairs = [&s](char tag, const std::vector<std::pair<std::string, int>>& v) {
    for (const auto& [name, at] : v) s += std::string(1, tag) + name + "@" + std::to_string(at) + ";";
  };
  pairs('r', r.reads);
  pairs('w', r.writes);
  pairs('f', r.fields);
  pairs('b', r.field_reads);
  s += "l" + std::to_string(r.list_field) + "/" + std::to_string(r.items) + ";";
  for (const ValueDesc& in : r.inputs) {
    s += "i" + std::to_string(static_cast<int>(in.kind)) + "/" + std::to_string(in.items) + "/" +
         std::to_string(in.rate) + "/" + std::to_string(in.geometry.patch_size) + "/" +
         std::to_string(in.geometry.merge_size) + ":";
    for (int64_t d : in.shape) s += std::to_string(d) + ",";
    s += ";";
  }
  for (const auto* v : {&r.reads, &r.writes}) {
    for (const auto& [name, at] : *v) {
      const SizeHint h = r.hints_after.Get(name);
      const AudioWindowHint w = r.hints_after.Window(name);
      s += "h" + name + ":" + std::to_string(h.min_shorter_side) + "," +
           std::to_string(h.min_width) + "," + std::to_string(h.min_height) + "," +
           std::to_string(w.seconds) + "," + std::to_string(static_cast<int>(w.start)) + "," +
           std::to_string(w.rng_op) + ";";
    }
  }
  return s;
}

// The shared ops (spec.ops) of several chains, each made once when its declaration is the
// same in every chain (Signature; null where it is not, and for one chain).
Result<std::vector<std::shared_ptr<const Op>>> MakeSharedOps(const PipelineSpec& spec,
                                                            DeclaredChains& declared) {
  std::vector<std::shared_ptr<const Op>> shared(spec.ops.size());
  if (declared.chains.size() < 2) return shared;
  for (size_t k = 0; k < spec.ops.size(); ++k) {
    const auto record = [&](size_t c) -> PlanOpRecord& {
      return declared.states[c].ops[declared.chains[c].own + k];
    };
    const std::string first = Signature(record(0));
    bool same = true;
    for (size_t c = 1; c < declared.chains.size() && same; ++c) same = Signature(record(c)) == first;
    if (!same) continue;
    PlanContext ctx(declared.states[0], static_cast<int>(declared.chains[0].own + k));
    Result<std::unique_ptr<Op>> op = VisitOpType(
        spec.ops[k], [&]<typename T>(const auto& s) { return T::Make(s, ctx); });
    HR_RETURN_IF_ERROR(op.status());
    shared[k] = std::shared_ptr<const Op>(*std::move(op));
  }
  return shared;
}

}  // namespace headrace::planning
