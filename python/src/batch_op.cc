// Python batch operators (headrace.ops.map_batch): a user function applied to each
// complete batch on the engine's CPU thread that finished it, before delivery, so that
// its time is the engine's (reported among the ops), not the consumer's wait.
//
// The op holds the GIL only around the call. The callable registered here is the
// Python layer's adapter, called as `fn(fields, epoch, index, global_index, seed)`:
// `fields` is a dict of writable numpy views of the batch's buffers (no copy; bf16 as
// uint16), which keep the memory alive but must not be written after the call (the
// batch is then the consumer's). The function changes the batch in place, or returns a
// mapping of some fields to arrays of the same shape and dtype, copied into the batch;
// entries that are the views it was given are skipped. It cannot add, drop or reshape
// fields: the batch's layout and memory are fixed when it is admitted. A function that
// raises (or returns something else) fails with kUserFunctionError and its traceback;
// the engine then drops the batch and counts each of its samples (its message is
// prefixed with the op's name and the batch's position there).
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <cstring>
#include <memory>
#include <string>

#include "common.h"
#include "headrace/ops/op.h"
#include "headrace/pipeline/spec.h"

namespace headrace::python {
namespace {

std::string Text(nb::handle value) { return nb::cast<std::string>(nb::repr(value)); }

class PyBatchOp : public BatchOp {
 public:
  PyBatchOp(std::string name, std::shared_ptr<PyCallable> fn)
      : name_(std::move(name)), fn_(std::move(fn)) {}

  std::string_view name() const override { return name_; }

  Status Run(Batch& batch, uint64_t batch_seed) const override {
    nb::gil_scoped_acquire gil;
    try {
      nb::dict fields;
      for (const auto& [name, tensor] : batch.fields) fields[name.c_str()] = TensorToNumpy(tensor);
      nb::object out =
          fn_->fn(fields, batch.epoch, batch.index_in_epoch, batch.global_index, batch_seed);
      if (out.is_none()) return Status::Ok();
      return CopyIn(batch, fields, out);
    } catch (nb::python_error& e) {
      // what() is the formatted Python traceback.
      return Status::UserFunctionError(std::string("the function raised:\n") + e.what());
    } catch (const std::exception& e) {
      return Status::UserFunctionError(e.what());
    }
  }

 private:
  // Copies the returned arrays that are not the views themselves into the batch.
  Status CopyIn(Batch& batch, const nb::dict& views, const nb::object& out) const {
    if (!PyMapping_Check(out.ptr()) || !nb::hasattr(out, "items")) {
      return Status::UserFunctionError(
          "the function returned " + nb::cast<std::string>(out.type().attr("__name__")) +
          ": return None (after changing the batch in place) or a dict of its fields");
    }
    const nb::object ascontiguous = Numpy().attr("ascontiguousarray");
    for (nb::handle item : out.attr("items")()) {
      const nb::object key = item[0];
      const nb::object value = item[1];
      const bool is_name = nb::isinstance<nb::str>(key);
      const std::string name = is_name ? nb::cast<std::string>(key) : Text(key);
      const Tensor* tensor = is_name ? batch.Find(name) : nullptr;
      if (tensor == nullptr) {
        std::string known;
        for (const auto& field : batch.fields) known += (known.empty() ? "" : ", ") + field.first;
        return Status::UserFunctionError(
            "the function returned '" + name + "', which is not a field of the batch (" + known +
            "): a batch op changes fields, it cannot add them (headrace.ops.map adds fields)");
      }
      nb::object want = views[key];
      if (value.is(want)) continue;  // the view itself: already in place
      nb::object array = ascontiguous(value);
      const auto got_dtype = nb::cast<std::string>(array.attr("dtype").attr("name"));
      const auto want_dtype = nb::cast<std::string>(want.attr("dtype").attr("name"));
      if (got_dtype != want_dtype || !array.attr("shape").equal(want.attr("shape"))) {
        return Status::UserFunctionError(
            "the function returned '" + name + "' as " + got_dtype + " of shape " +
            Text(array.attr("shape")) + "; the field is " + want_dtype + " of shape " +
            Text(want.attr("shape")) + " (convert it, e.g. .astype(), or change it in place)");
      }
      auto data = nb::cast<nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>>(array);
      // memmove: the result may overlap the field (a view of it, shifted).
      std::memmove(tensor->buffer().mutable_data(), data.data(), tensor->buffer().size());
    }
    return Status::Ok();
  }

  const std::string name_;
  const std::shared_ptr<PyCallable> fn_;
};

}  // namespace

void RegisterBatchOps(nb::module_& m) {
  m.def(
      "_add_batch_op",
      [](PipelineSpec& spec, const std::string& name, nb::object fn) {
        if (!PyCallable_Check(fn.ptr())) {
          throw StatusError(Status::InvalidArgument(name + ": the function is not callable"));
        }
        auto callable = std::make_shared<PyCallable>();
        callable->fn = std::move(fn);
        BatchOpSpec op;
        op.name = name;
        op.make = [name, callable]() -> Result<std::unique_ptr<BatchOp>> {
          return std::unique_ptr<BatchOp>(std::make_unique<PyBatchOp>(name, callable));
        };
        spec.batch_ops.push_back(std::move(op));
      },
      nb::arg("spec"), nb::arg("name"), nb::arg("fn"),
      "Appends a Python batch op: fn(fields, epoch, index, global_index, seed) on each "
      "complete batch, on an engine thread.");
}

}  // namespace headrace::python
