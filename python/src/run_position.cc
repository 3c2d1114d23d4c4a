// The run's position from Python: a Loader's state dict (version 2) parsed into a
// LoaderState (pipeline/run_position.h), checked, and merged over ranks. The rules live in
// C++; this file only reads the dict's keys, naming the key when a value has the wrong
// type, and python/headrace/loader.py keeps the rest of the dict plumbing.
#include "headrace/pipeline/run_position.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "common.h"
#include "headrace/pipeline/loader.h"
#include "headrace/pipeline/prepared.h"
#include "run_state.h"

namespace headrace::python {
namespace {

[[noreturn]] void Refuse(const std::string& key, const std::string& expected,
                         const nb::handle& value) {
  std::string got;
  try {
    got = nb::cast<std::string>(nb::repr(value));
  } catch (const std::exception&) {
    got = "an unprintable value";
  }
  if (got.size() > 200) got = got.substr(0, 200) + "...";
  throw StatusError(Status::InvalidArgument("state dict: " + key + ": expected " + expected +
                                            ", got " + got));
}

int64_t IntOf(const nb::handle& value, const std::string& key) {
  if (!PyLong_Check(value.ptr()) || PyBool_Check(value.ptr())) Refuse(key, "an int", value);
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
  if (overflow != 0 || (v == -1 && PyErr_Occurred())) {
    PyErr_Clear();
    Refuse(key, "an int of 64 bits", value);
  }
  return v;
}

std::vector<int64_t> IntsOf(const nb::handle& value, const std::string& key) {
  if (!nb::isinstance<nb::list>(value) && !nb::isinstance<nb::tuple>(value)) {
    Refuse(key, "a list of ints", value);
  }
  std::vector<int64_t> out;
  size_t i = 0;
  for (nb::handle item : value) out.push_back(IntOf(item, key + "[" + std::to_string(i++) + "]"));
  return out;
}

nb::dict DictOf(const nb::handle& value, const std::string& key, const std::string& expected) {
  if (!nb::isinstance<nb::dict>(value)) Refuse(key, expected, value);
  return nb::borrow<nb::dict>(value);
}

// d[key], or None when absent.
nb::object Get(const nb::dict& d, const char* key) {
  return d.contains(key) ? nb::borrow(d[key]) : nb::none();
}

nb::object Required(const nb::dict& d, const std::string& where, const char* key) {
  if (!d.contains(key)) {
    throw StatusError(Status::InvalidArgument("state dict: " + where + key + " is missing"));
  }
  return nb::borrow(d[key]);
}

// The int, or list of ints, under d[key], which must be there (`where` prefixes the key).
int64_t RequiredInt(const nb::dict& d, const std::string& where, const char* key) {
  return IntOf(Required(d, where, key), where + key);
}
std::vector<int64_t> RequiredInts(const nb::dict& d, const std::string& where, const char* key) {
  return IntsOf(Required(d, where, key), where + key);
}

PackState PackOf(const nb::handle& value) {
  const nb::dict d =
      DictOf(value, "pack", "{epoch, from_batch, next_batch, delivered, waiting, shared}");
  PackState p;
  p.epoch = RequiredInt(d, "pack.", "epoch");
  p.from_batch = RequiredInt(d, "pack.", "from_batch");
  p.next_batch = RequiredInt(d, "pack.", "next_batch");
  if (d.contains("delivered")) p.delivered = IntOf(d["delivered"], "pack.delivered");
  p.waiting = RequiredInts(d, "pack.", "waiting");
  if (d.contains("shared")) {
    if (!nb::isinstance<nb::bool_>(d["shared"])) {
      Refuse("pack.shared", "true or false (whether every rank's state holds the window)", d["shared"]);
    }
    p.shared = nb::cast<bool>(d["shared"]);
  }
  return p;
}

EpochRemainder RemainderOf(const nb::handle& value) {
  const nb::dict d = DictOf(value, "remainder", "{epoch, consumed, pending} or None");
  EpochRemainder r;
  r.epoch = RequiredInt(d, "remainder.", "epoch");
  r.consumed = RequiredInt(d, "remainder.", "consumed");
  r.pending = RequiredInts(d, "remainder.", "pending");
  return r;
}

// One rank's state (or, `global`, a merged state, which has no rank, world size or
// batch: it is the start of its epoch's rest).
LoaderState LoaderStateOf(const nb::handle& value, bool global) {
  const nb::dict d = DictOf(value, "state", "a dict (a Loader's state_dict())");
  LoaderState s;
  s.batch_size = RequiredInt(d, "", "batch_size");
  s.epoch = RequiredInt(d, "", "epoch");
  if (!global) {
    s.rank = RequiredInt(d, "", "rank");
    s.world_size = RequiredInt(d, "", "world_size");
    s.batch_in_epoch = RequiredInt(d, "", "batch_in_epoch");
    const nb::object per = Get(d, "batches_per_epoch");
    if (!per.is_none()) s.batches_per_epoch = IntOf(per, "batches_per_epoch");
    const nb::object pack = Get(d, "pack");
    if (!pack.is_none()) s.pack = PackOf(pack);
  } else {
    const nb::object saved = Get(d, "saved_world_size");
    if (!saved.is_none()) s.world_size = IntOf(saved, "saved_world_size");
  }
  const nb::object rest = Get(d, "remainder");
  if (!rest.is_none()) s.remainder = RemainderOf(rest);
  const nb::object start = Get(d, "blend_start");
  if (!start.is_none()) s.blend_start = IntsOf(start, "blend_start");
  const nb::object picks = Get(d, "blend_picks");
  if (!picks.is_none()) s.blend_picks = IntsOf(picks, "blend_picks");
  return s;
}

nb::object RemainderToPython(const std::optional<EpochRemainder>& r) {
  if (!r) return nb::none();
  nb::dict d;
  d["epoch"] = r->epoch;
  d["consumed"] = r->consumed;
  nb::list pending;
  for (int64_t i : r->pending) pending.append(i);
  d["pending"] = pending;
  return d;
}

bool IsGlobal(const nb::handle& state) {
  if (!nb::isinstance<nb::dict>(state)) return false;
  const nb::dict d = nb::borrow<nb::dict>(state);
  return d.contains("kind") && nb::isinstance<nb::str>(d["kind"]) &&
         nb::cast<std::string>(d["kind"]) == "global";
}

}  // namespace

// The readers run_state.h declares for the bindings that start runs (loader.cc, former.cc):
// the same rules as a state dict's check, each wrong value named by its key.
PackState PackStateFromDict(const nb::handle& state_object) {
  PackState p = PackOf(state_object);
  if (p.from_batch < 0 || p.next_batch < p.from_batch) {
    Refuse("pack", "{epoch, from_batch, next_batch, waiting} with 0 <= from_batch <= next_batch",
           state_object);
  }
  return p;
}

std::optional<EpochRemainder> OptionalRemainder(const nb::object& object) {
  if (object.is_none()) return std::nullopt;
  return RemainderOf(object);
}

std::vector<int64_t> BlendStartFromObject(const nb::object& object) {
  if (object.is_none()) return {};
  return IntsOf(object, "blend_start");
}

LoaderOptions LocalRunOptions(int rank, int world_size, int64_t start_epoch,
                              int64_t start_batch, const nb::object& pack_state,
                              const nb::object& remainder, const nb::object& blend_start) {
  LoaderOptions options;
  if (!pack_state.is_none()) options.pack_state = PackStateFromDict(pack_state);
  options.remainder = OptionalRemainder(remainder);
  options.blend_start = BlendStartFromObject(blend_start);
  options.rank = rank;
  options.world_size = world_size;
  options.start_epoch = start_epoch;
  options.start_batch = start_batch;
  options.deliver_empty_batches = true;
  return options;
}

void CheckStateFor(const PreparedPipeline& prepared, const nb::handle& state) {
  const LoaderState s = LoaderStateOf(state, IsGlobal(state));
  std::optional<Result<StateBounds>> bounds;
  Status checked;
  {
    nb::gil_scoped_release nogil;
    bounds.emplace(StateBoundsOf(prepared));
    if (bounds->ok()) {
      checked = CheckLoaderState(s, **bounds);
      if (checked.ok() && s.remainder) {
        checked = CheckPending(prepared, *s.remainder, s.blend_start);
      }
    }
  }
  ThrowIfError(bounds->status());
  ThrowIfError(checked);
}

void RegisterRunPosition(nb::module_& m) {
  m.def("_check_state",
        [](const nb::handle& state) {
          ThrowIfError(CheckLoaderState(LoaderStateOf(state, IsGlobal(state)), std::nullopt));
        },
        nb::arg("state").none(),
        "Checks what a Loader state dict claims on its own (pipeline/run_position.h); "
        "headrace.ConfigError naming the key");
  m.def("_merge_states",
        [](const nb::list& states, bool lockstep) {
          std::vector<LoaderState> parsed;
          size_t i = 0;
          for (nb::handle s : states) {
            try {
              parsed.push_back(LoaderStateOf(s, false));
            } catch (const StatusError& e) {
              throw StatusError(Status::InvalidArgument(
                  "merge_state_dicts: states[" + std::to_string(i) + "]: " +
                  e.status().message()));
            }
            ++i;
          }
          const GlobalPosition g = ValueOrThrow(MergeLoaderStates(parsed, lockstep));
          return nb::make_tuple(g.epoch, RemainderToPython(g.remainder), g.saved_world_size);
        },
        nb::arg("states"), nb::arg("lockstep"),
        "(epoch, remainder or None, saved_world_size): where every rank's states leave the "
        "run (MergeLoaderStates)");
  m.def("_positions_consumed",
        [](int64_t batch_in_epoch, int64_t world_size, int64_t batch_size) {
          return ValueOrThrow(PositionsConsumed(batch_in_epoch, world_size, batch_size));
        },
        nb::arg("batch_in_epoch"), nb::arg("world_size"), nb::arg("batch_size"),
        "The epoch's positions that ranks at batch_in_epoch consumed between them");
}

}  // namespace headrace::python
