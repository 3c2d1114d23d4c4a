// Statuses to Python exceptions, in one place.
#include <Python.h>

#include <string>

#include "common.h"

namespace headrace::python {
namespace {

// Created once at import, never freed (they live as long as the interpreter).
PyObject* g_error = nullptr;
PyObject* g_config_error = nullptr;
PyObject* g_cancelled_error = nullptr;

PyObject* ExceptionTypeFor(StatusCode code) {
  switch (code) {
    case StatusCode::kInvalidArgument: return g_config_error;
    case StatusCode::kCancelled: return g_cancelled_error;
    default: return g_error;
  }
}

}  // namespace

StatusError::StatusError(Status status)
    : std::runtime_error(status.ToString()), status_(std::move(status)) {}

void RegisterErrors(nb::module_& m) {
  g_error = PyErr_NewExceptionWithDoc("headrace.Error",
                                      "A Headrace operation failed; `code` names the kind.",
                                      PyExc_RuntimeError, nullptr);
  nb::object bases = nb::make_tuple(nb::handle(g_error), nb::handle(PyExc_ValueError));
  g_config_error = PyErr_NewExceptionWithDoc(
      "headrace.ConfigError",
      "A configuration, API argument or state dict is wrong; the message names the key.",
      bases.ptr(), nullptr);
  g_cancelled_error = PyErr_NewExceptionWithDoc("headrace.CancelledError", "The run was stopped.",
                                                g_error, nullptr);
  m.attr("Error") = nb::handle(g_error);
  m.attr("ConfigError") = nb::handle(g_config_error);
  m.attr("CancelledError") = nb::handle(g_cancelled_error);

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      PyObject* type = ExceptionTypeFor(e.status().code());
      nb::object exc = nb::steal(PyObject_CallFunction(type, "s", e.status().message().c_str()));
      if (!exc.is_valid()) return;  // the call set its own error
      const std::string_view code = StatusCodeName(e.status().code());
      exc.attr("code") = nb::str(code.data(), code.size());
      PyErr_SetObject(type, exc.ptr());
    }
  });
}

}  // namespace headrace::python
