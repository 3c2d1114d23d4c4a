// The extension module `headrace._headrace`: each area registers itself from its own
// file. Python users import `headrace`, the thin layer over this module.
#include "common.h"
#include "headrace/observe/crash_trace.h"

NB_MODULE(_headrace, m) {
  namespace hp = headrace::python;
  m.doc() = "Headrace C++ core (see the headrace package for the Python API)";
  hp::RegisterErrors(m);
  hp::RegisterSpec(m);
  hp::RegisterBatch(m);
  hp::RegisterUserOps(m);
  hp::RegisterBatchOps(m);
  hp::RegisterLoader(m);
  hp::RegisterRunRules(m);
  hp::RegisterDoctor(m);
  hp::RegisterFormers(m);
  hp::RegisterPinned(m);
  hp::RegisterTools(m);
  hp::RegisterText(m);
  hp::RegisterRunPosition(m);
  hp::RegisterSizeIndex(m);
  // HEADRACE_CRASH_TRACE: the native stack on a fatal signal (observe/crash_trace.h).
  m.def("_install_crash_trace", &headrace::InstallCrashTrace);
}
