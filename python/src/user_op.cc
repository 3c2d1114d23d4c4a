// Python operators: a user function applied to each sample on the engine's CPU threads.
//
// The op holds the GIL only around the call (building the sample dict, calling, and
// copying the returned arrays into the sample's rows of the batch); everything else on
// that thread — the other operators, reads, assembly — runs without it. A function that
// holds the GIL for long therefore serializes the CPU pool; for those, the Python layer
// wraps the function so that the call waits (GIL released) on a worker process
// (headrace/_procpool.py).
//
// The sample a function receives is a dict: index, epoch, id, uri, turns (a list of
// (role, text)), and, for each image value the chain holds where the op stands (after
// image.decode: `image`), a read-only uint8 numpy view (height, width, 3) RGB of it by
// its name, valid only during the call (copy it to keep it). The function returns a
// mapping with one array-like per declared output field, of the declared shape; it is
// converted with numpy.ascontiguousarray to the field's dtype and copied into the batch
// row. A function
// that raises or returns the wrong fields fails its sample with kUserFunctionError
// ("user_function_error"), the Python traceback in the message.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <tuple>

#include "common.h"
#include "headrace/ops/op.h"
#include "headrace/pipeline/spec.h"

namespace headrace::python {
namespace {

const char* RoleName(Role role) {
  switch (role) {
    case Role::kSystem: return "system";
    case Role::kUser: return "user";
    case Role::kAssistant: return "assistant";
  }
  return "user";
}

int64_t ThreadCpuNanos() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

// Sets ctx.gil_wait_ns, when the op's Run ends, to the time the thread spent in it off
// the CPU: the wait to acquire the GIL, and the waits to get it back after the
// interpreter's switch interval (5 ms) handed it to another thread mid-call. A pure-Python
// function under contention spends most of its call there; one that releases the GIL
// (numpy) keeps running. That is the doctor's evidence that the calls serialize.
class GilWaitMeter {
 public:
  explicit GilWaitMeter(SampleContext& ctx)
      : ctx_(ctx), wall_start_(std::chrono::steady_clock::now()), cpu_start_(ThreadCpuNanos()) {}
  ~GilWaitMeter() {
    const int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - wall_start_)
                             .count();
    ctx_.gil_wait_ns = std::max<int64_t>(0, wall - (ThreadCpuNanos() - cpu_start_));
  }
  GilWaitMeter(const GilWaitMeter&) = delete;
  GilWaitMeter& operator=(const GilWaitMeter&) = delete;

 private:
  SampleContext& ctx_;
  const std::chrono::steady_clock::time_point wall_start_;
  const int64_t cpu_start_;
};

class PyMapOp : public Op {
 public:
  PyMapOp(std::string name, std::shared_ptr<PyCallable> fn, std::vector<FieldSpec> fields,
          const UserOpBinding& at, bool meter_gil)
      : name_(std::move(name)),
        fn_(std::move(fn)),
        fields_(std::move(fields)),
        meter_gil_(meter_gil),
        first_row_(at.first_row),
        images_(at.images) {}

  std::string_view name() const override { return name_; }

  Status Run(SampleContext& ctx) const override {
    std::optional<GilWaitMeter> meter;  // outlives `gil`: it counts the release too
    if (meter_gil_) meter.emplace(ctx);
    nb::gil_scoped_acquire gil;
    try {
      nb::object out = fn_->fn(MakeSampleDict(ctx));
      for (size_t f = 0; f < fields_.size(); ++f) {
        HR_RETURN_IF_ERROR(WriteField(out, f, ctx.rows[first_row_ + f]));
      }
      return Status::Ok();
    } catch (nb::python_error& e) {
      // what() is the formatted Python traceback.
      return Status::UserFunctionError(name_ + " raised:\n" + e.what());
    } catch (const std::exception& e) {
      return Status::UserFunctionError(name_ + ": " + e.what());
    }
  }

 private:
  nb::dict MakeSampleDict(const SampleContext& ctx) const {
    const Sample& sample = *ctx.sample;
    nb::dict d;
    d["index"] = sample.index;
    d["epoch"] = sample.epoch;
    d["id"] = sample.record->id;
    d["uri"] = sample.record->uri();
    nb::list turns;  // the sample's, as its source put them in place (any source kind)
    for (const Turn& t : sample.turns) turns.append(nb::make_tuple(RoleName(t.role), t.text));
    d["turns"] = turns;
    for (const auto& [image_name, slot] : images_) {
      const ImageView* image = ctx.Get<ImageView>(slot);
      if (image == nullptr || image->empty()) continue;
      const ImageView& im = *image;
      // The image's own channels (1 after image.grayscale, 3 RGB), except that RGBX's
      // padding byte (ops/image/image.h) is left out of the view.
      const size_t channels = im.channels == 4 ? 3 : static_cast<size_t>(im.channels);
      const size_t shape[3] = {static_cast<size_t>(im.height), static_cast<size_t>(im.width),
                               channels};
      const int64_t strides[3] = {im.stride, im.channels, 1};
      nb::ndarray<nb::numpy, const uint8_t, nb::ndim<3>> view(im.data, 3, shape, nb::handle(),
                                                              strides);
      d[image_name.c_str()] = nb::cast(view, nb::rv_policy::reference);
    }
    return d;
  }

  Status WriteField(const nb::object& out, size_t f, uint8_t* row) const {
    const FieldSpec& field = fields_[f];
    nb::object value;
    try {
      value = out[field.name.c_str()];
    } catch (nb::python_error&) {
      return Status::UserFunctionError(name_ + " returned no '" + field.name +
                                       "' (it must return a dict with every declared output)");
    }
    nb::object array = Numpy().attr("ascontiguousarray")(value, NumpyName(field.dtype));
    auto data = nb::cast<nb::ndarray<nb::ro, nb::c_contig, nb::device::cpu>>(array);
    if (data.nbytes() != field.sample_bytes()) {
      std::string want;
      for (int64_t d : field.sample_shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
      std::string got;
      for (size_t d = 0; d < data.ndim(); ++d) {
        got += (got.empty() ? "" : ", ") + std::to_string(data.shape(d));
      }
      return Status::UserFunctionError(name_ + " returned '" + field.name + "' of shape (" + got +
                                       "), declared (" + want + ")");
    }
    std::memcpy(row, data.data(), data.nbytes());
    return Status::Ok();
  }

  const std::string name_;
  const std::shared_ptr<PyCallable> fn_;
  const std::vector<FieldSpec> fields_;
  // Off when the function waits on worker processes (processes=N) with the GIL
  // released: that wait is not the GIL's, and the op then counts as CPU work.
  const bool meter_gil_;
  const int first_row_;
  // The image values the op sees: name and slot.
  const std::vector<std::pair<std::string, int>> images_;
};

}  // namespace

void RegisterUserOps(nb::module_& m) {
  using FieldTuple = std::tuple<std::string, std::string, std::vector<int64_t>>;
  m.def(
      "_insert_map_op",
      [](PipelineSpec& spec, size_t position, const std::string& name,
         const std::vector<FieldTuple>& outputs, nb::object fn, bool meter_gil) {
        if (position > spec.ops.size()) {
          throw StatusError(Status::InvalidArgument("ops: position " + std::to_string(position) +
                                                    " is past the end"));
        }
        if (!PyCallable_Check(fn.ptr())) {
          throw StatusError(Status::InvalidArgument(name + ": the function is not callable"));
        }
        std::vector<FieldSpec> fields;
        for (const auto& [field_name, dtype_name, shape] : outputs) {
          Result<DType> dtype = ParseDType(dtype_name);
          if (!dtype.ok() || NumpyName(*dtype) == nullptr) {
            throw StatusError(Status::InvalidArgument(name + ".outputs." + field_name +
                                                      ": dtype must be one of u8, i32, i64, f16, "
                                                      "f32 (got '" +
                                                      dtype_name + "')"));
          }
          fields.push_back(FieldSpec{field_name, *dtype, shape});
        }
        auto callable = std::make_shared<PyCallable>();
        callable->fn = std::move(fn);
        UserOpSpec op;
        op.name = name;
        op.fields = fields;
        op.make = [name, callable, fields,
                   meter_gil](const UserOpBinding& at) -> Result<std::unique_ptr<Op>> {
          return std::unique_ptr<Op>(
              std::make_unique<PyMapOp>(name, callable, fields, at, meter_gil));
        };
        spec.ops.insert(spec.ops.begin() + static_cast<std::ptrdiff_t>(position), std::move(op));
      },
      nb::arg("spec"), nb::arg("position"), nb::arg("name"), nb::arg("outputs"), nb::arg("fn"),
      nb::arg("meter_gil") = true);
}

}  // namespace headrace::python
