"""The `headrace` console script of the installed package.

It execs the C++ command line the wheel ships beside this file (headrace/bin/headrace,
the same program as `make build`'s build/headrace): the process becomes that program, so
its signals (SIGINT/SIGTERM cancel a run, exit 130/143), exit codes, progress line and
output are exactly the command line's, with no Python in between. The program finds the
vendored libraries through its RPATH (headrace.libs/, set by auditwheel), and Arrow, for
a Parquet source only, in the folder of the pyarrow this Python imports
(HEADRACE_PYARROW_DIR; src/headrace/formats/arrow_bridge.h); Tesseract's English data and
make-sample's font are the package's own unless TESSDATA_PREFIX / HEADRACE_FONT name
others.

Cost: ~0.15 s a command on the 2-core VM, nearly all of it `import headrace` (Python
imports the package before this module, and the package loads the extension); the
program itself starts in 0.03 s. Its commands run for seconds and more.
"""
import os
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent


def pyarrow_folder():
    """The folder of the pyarrow this Python would import, found without importing it
    (importlib's finder only), or None. The C++ side reads Parquet through that pyarrow's
    libarrow (its Arrow bridge, src/headrace/formats/arrow_bridge.h): whichever site
    directory or environment holds it, the extension and the CLI then use the same one."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("pyarrow")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return str(Path(list(spec.submodule_search_locations)[0]).resolve())


def bundled_environment():
    """What the wheel's data files need set, where the package has them: Tesseract's
    English model (headrace/share/tessdata, read by ocr.text through TESSDATA_PREFIX) and
    DejaVu Sans (headrace/share/fonts, make-sample's OCR pages, through HEADRACE_FONT);
    and where pyarrow is (HEADRACE_PYARROW_DIR), when it is installed. A source install
    has neither data file."""
    env = {}
    pyarrow = pyarrow_folder()
    if pyarrow is not None:
        env["HEADRACE_PYARROW_DIR"] = pyarrow
    tessdata = _HERE / "share" / "tessdata"
    if tessdata.is_dir():
        env["TESSDATA_PREFIX"] = str(tessdata)
    font = _HERE / "share" / "fonts" / "DejaVuSans.ttf"
    if font.is_file():
        env["HEADRACE_FONT"] = str(font)
    return env


def use_bundled_environment():
    """Sets bundled_environment()'s variables the user has not set (theirs win)."""
    for name, value in bundled_environment().items():
        os.environ.setdefault(name, value)


def main():
    exe = _HERE / "bin" / "headrace"
    if not exe.is_file():
        sys.exit(f"headrace: no command line in this installation ({exe} is missing); "
                 "reinstall the wheel, or build it from source with `make build`")
    use_bundled_environment()
    from . import _loadcheck
    problem = _loadcheck.explain(None)
    if problem is not None:
        sys.exit(f"headrace: {problem}")
    os.execv(exe, [sys.argv[0], *sys.argv[1:]])
