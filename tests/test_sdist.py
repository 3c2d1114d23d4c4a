"""The sdist (pyproject.toml's [tool.scikit-build] sdist): built by the build backend's own
PEP 517 hook, as `pip download`/`python -m build --sdist` would, it holds exactly the
git-tracked tree less the benchmark outputs (bench/*.json), and PKG-INFO carries the
licence. `make test-sdist` builds a wheel from it and runs it."""
import fnmatch
import subprocess
import sys
import tarfile

from e2e_util import REPO

# What pyproject.toml's sdist.exclude leaves out of the tracked files.
EXCLUDED = ["bench/*.json"]


def test_the_sdist_holds_the_tracked_tree_and_the_licence(tmp_path):
    subprocess.run(
        [sys.executable, "-c",
         "import sys; from scikit_build_core.build import build_sdist; "
         "print(build_sdist(sys.argv[1]))", str(tmp_path)],
        cwd=REPO, check=True, capture_output=True, text=True, timeout=300)
    (sdist,) = tmp_path.glob("headrace-*.tar.gz")
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.isfile()]
        prefix = members[0].name.split("/")[0] + "/"
        held = {m.name[len(prefix):] for m in members}
        pkg_info = tar.extractfile(prefix + "PKG-INFO").read().decode()
    # The tracked files, and those not yet added that git does not ignore (a work tree's
    # new files: the backend reads .gitignore, not the index).
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, check=True, capture_output=True, text=True)
    tracked = set(listed.stdout.splitlines())
    # Files deleted in the work tree but not yet from the index are not in the sdist.
    tracked = {f for f in tracked if (REPO / f).is_file()}
    expected = {f for f in tracked if not any(fnmatch.fnmatch(f, p) for p in EXCLUDED)}
    held.discard("PKG-INFO")
    assert held == expected, (
        f"missing: {sorted(expected - held)[:20]}, extra: {sorted(held - expected)[:20]}")
    for needed in ("LICENSE", "CMakeLists.txt", "python/CMakeLists.txt",
                   "tests/python/data/chat_templates/Qwen3-VL-8B-Instruct.jinja",
                   "scripts/build_wheel.sh"):
        assert needed in held, needed
    assert "License-Expression: Apache-2.0" in pkg_info
    assert "License-File: LICENSE" in pkg_info
