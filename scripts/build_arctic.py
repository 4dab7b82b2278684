"""`make arctic`: build the suffix-decoding part of Snowflake's arctic-inference as the lab's peer.

The package's own build pulls a CUDA torch through its build requirements, so nothing here goes through
pip: the source archive comes straight from PyPI (its sha256 checked against PyPI's), only
`csrc/suffix_decoding` is configured (CMake, nanobind) with this interpreter as `Python_EXECUTABLE`, and the
built `_C` module is laid out with the package's two Python files under SPECDEC_CACHE/arctic/ — nothing in
the venv or the repository. `spec:suffix@impl=arctic` adds that folder to sys.path. Skipped when built.
A missing compiler, CMake or Python headers is one line and exit status 2.
"""
from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from specdec_core.models import cache_dir  # noqa: E402

VERSION = "0.3.0"
PACKAGE = "arctic_inference/suffix_decoding"
KEEP = (f"{PACKAGE}/__init__.py", f"{PACKAGE}/cache.py")


def fail(message: str) -> None:
    print(f"make arctic: {message}", file=sys.stderr)
    sys.exit(2)


def source_archive() -> bytes:
    """arctic-inference's sdist for VERSION, checked against the sha256 PyPI lists for it."""
    listing = "https://pypi.org/pypi/arctic-inference/json"
    try:
        with urllib.request.urlopen(listing, timeout=60) as answer:
            files = json.load(answer)["releases"].get(VERSION, [])
        sdist = next((f for f in files if f["packagetype"] == "sdist"), None)
        if sdist is None:
            fail(f"PyPI lists no source archive for arctic-inference {VERSION}")
        # a mirror may answer with links relative to the listing
        with urllib.request.urlopen(urllib.parse.urljoin(listing, sdist["url"]), timeout=300) as answer:
            data = answer.read()
    except (OSError, ValueError) as err:  # URLError is an OSError
        fail(f"cannot fetch arctic-inference {VERSION} from PyPI: {err}")
    if hashlib.sha256(data).hexdigest() != sdist["digests"]["sha256"]:
        fail(f"{sdist['filename']}: sha256 differs from PyPI's")
    return data


def extract(data: bytes, into: Path) -> Path:
    """Unpack csrc/suffix_decoding and the package's Python files; return the source folder."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        top = archive.getnames()[0].split("/")[0]
        wanted = [m for m in archive.getmembers()
                  if m.name.startswith(f"{top}/csrc/suffix_decoding/") or m.name in {f"{top}/{k}" for k in KEEP}]
        archive.extractall(into, members=wanted, filter="data")
    return into / top


def build(src: Path, work: Path) -> Path:
    """Configure and build `_C`; return the built module's path."""
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            fail(f"{tool} not found: install CMake and a C++20 compiler (e.g. build-essential cmake)")
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file():
        fail(f"Python.h not found in {sysconfig.get_paths()['include']}: install the Python development headers")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    configure = ["cmake", *generator, "-S", str(src / "csrc/suffix_decoding"), "-B", str(work),
                 "-DCMAKE_BUILD_TYPE=Release", f"-DPython_EXECUTABLE={sys.executable}"]
    for step in (configure, ["cmake", "--build", str(work), "-j", "2"]):
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            fail(f"{' '.join(step[:2])} failed: {last[0]}")
    built = sorted(work.glob("_C*.so")) + sorted(work.glob("_C*.pyd"))
    if not built:
        fail(f"the build left no _C module in {work}")
    return built[0]


def main() -> None:
    target = cache_dir() / "arctic"
    package = target / PACKAGE
    if list(package.glob("_C*")):
        print(f"built: {package}")
        return
    try:
        import nanobind  # noqa: F401
    except ImportError:
        fail("nanobind is not installed in this venv (make arctic installs it first)")
    with tempfile.TemporaryDirectory() as tmp:
        src = extract(source_archive(), Path(tmp))
        module = build(src, Path(tmp) / "build")
        staging = target.with_name("arctic.partial")
        shutil.rmtree(staging, ignore_errors=True)
        (staging / PACKAGE).mkdir(parents=True)
        (staging / "arctic_inference/__init__.py").write_text("")
        for name in KEEP:
            shutil.copy(src / name, staging / name)
        shutil.copy(module, staging / PACKAGE / module.name)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    print(f"built: {package}")


if __name__ == "__main__":
    main()
