// Finding and loading the Arrow bridge that matches the pyarrow installed beside Headrace.
//
// Arrow's C++ ABI changes with each release (libarrow.so.NNNN, NNNN = major * 100 +
// minor), and the engine links no Arrow at all: the Parquet reader lives in a bridge,
// one per supported Arrow (formats/arrow_bridge/, its ABI in arrow_bridge_abi.h). The
// first Parquet read loads, once per process:
//
//   pyarrow's folder ──> its libarrow.so.NNNN ──> bridge headrace_arrow_NNNN.so ──> entry
//   (HEADRACE_PYARROW_DIR,    (dlopen, RTLD_LOCAL,   (from a bridge folder,      point,
//    else beside the binary,   with libparquet)        else: the error names      checked
//    else the build's .venv)                           every version there is)
//
// Where pyarrow is looked for, in order: $HEADRACE_PYARROW_DIR (the Python package sets it
// for the extension and the CLI it execs, from importlib's view of `pyarrow`); the
// site-packages layout of an installed wheel (`../pyarrow` beside the extension,
// `../../pyarrow` beside headrace/bin/headrace); the pyarrow a source build compiled its
// bridge against. Bridges are looked for in $HEADRACE_ARROW_BRIDGE_DIR, in the package's
// `arrow/` folder (beside the extension, or `../arrow` from bin/), then the build tree's.
//
// Why RTLD_LOCAL: libparquet exports a static OpenSSL and simdjson (see the top-level
// CMakeLists.txt). Loaded locally, they serve the bridge's Arrow only; the engine's own
// calls keep Debian's (or the wheel's vendored) libcrypto and libsimdjson, whatever is
// loaded when. When pyarrow is imported in the same process, its libarrow is the same file
// under the same soname: the process holds one Arrow.
//
// Everything but a Parquet source works without pyarrow installed: nothing is loaded
// until a Parquet footer is read.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "headrace/core/status.h"
#include "headrace/formats/arrow_bridge_abi.h"

namespace headrace {

// The loaded bridge (never unloaded), or why none can be: kUnsupportedFormat naming what
// was found (no pyarrow; a pyarrow whose Arrow has no bridge, with the pyarrow versions
// that have one; a bridge that does not load). Thread-safe; the first call decides, later
// calls return the same result.
Result<const HrArrowBridge*> LoadArrowBridge();

// Where to look: the folders in order (the first pyarrow folder that holds a
// libarrow.so.NNNN is the one used; the first bridge folder that holds a bridge).
struct ArrowBridgeSearch {
  std::vector<std::filesystem::path> pyarrow_folders;
  std::vector<std::filesystem::path> bridge_folders;
};

// The search described above, from the environment and this binary's place.
ArrowBridgeSearch DefaultArrowBridgeSearch();

// Loads a bridge as LoadArrowBridge does, from `search`, every call anew (for tests; the
// engine's one is LoadArrowBridge). What it loads stays loaded.
Result<const HrArrowBridge*> LoadArrowBridgeFrom(const ArrowBridgeSearch& search);

}  // namespace headrace
