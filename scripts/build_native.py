"""Build the compiled modules (the groups of ``src/kvroute/_accel.py``): the replay's and
capture's and prompt tokenizing's, one mypyc group each, and kvroute.trace's two C
modules (``src/kvroute/trace/*.c``).

Usage: ``scripts/build-native [--force]``. Needs mypy (a dev dependency: mypyc comes with
it) and a C compiler. Each build runs in a temporary copy of ``src/`` and only replaces
its package's ``_native/`` when it succeeded, stamp last, so an interrupted or failed
build leaves the package on its previous build or on the Python sources.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kvroute._accel import CACHE, GATEWAY, STAMP, TRACE_C, Group  # noqa: E402

SETUP = """
from mypyc.build import mypycify
from setuptools import setup

setup(
    name="kvroute-native",
    ext_modules=mypycify({files!r}, opt_level="3", group_name={group!r}),
    script_args=["build_ext", "--inplace"],
)
"""

SETUP_C = """
from setuptools import Extension, setup

setup(
    name="kvroute-trace-c",
    ext_modules=[
        Extension(name, [name + ".c"], extra_compile_args=["-O3"]) for name in {names!r}
    ],
    script_args=["build_ext", "--inplace"],
)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even when current")
    args = parser.parse_args()
    failed = 0
    for group in (CACHE, GATEWAY):
        failed += _build(group, force=args.force)
    failed += _build_c(force=args.force)
    return 1 if failed else 0


def _build_c(*, force: bool) -> int:
    """Compile ``trace/*.c`` into ``trace/_native/`` (stamp last)."""
    usable, why = TRACE_C.status()
    if usable and not force:
        print("[build-native] kvroute.trace C modules: up to date", file=sys.stderr)
        return 0
    print(f"[build-native] compiling kvroute.trace's C modules ({why})", file=sys.stderr)
    digest = TRACE_C.source_digest()
    with tempfile.TemporaryDirectory(prefix="kvroute-trace-c-") as tmp:
        work = Path(tmp)
        for source in TRACE_C.sources():
            shutil.copy2(source, work / source.name)
        setup = SETUP_C.format(names=list(TRACE_C.modules))
        built = _run_setup(
            work,
            setup,
            lambda: sorted(work.glob("*.so")),
            len(list(TRACE_C.modules)),
            "kvroute.trace's C modules did not build (see above); kvroute uses their Python "
            "and numpy versions",
        )
        if built is None:
            return 1
        _install(built, TRACE_C.native_dir, {"digest": digest, "modules": list(TRACE_C.modules)})
    print(
        f"[build-native] built {len(built)} C modules -> {TRACE_C.native_dir.relative_to(ROOT)}",
        file=sys.stderr,
    )
    return 0


def _run_setup(
    work: Path, setup: str, outputs: Callable[[], list[Path]], expected: int, failed: str
) -> list[Path] | None:
    """Run a setuptools ``setup`` script in ``work``; the built extension modules, or
    None (after printing the build's output and ``failed``) when there are fewer than
    ``expected`` of them."""
    (work / "setup_build.py").write_text(setup)
    done = subprocess.run(
        [sys.executable, "setup_build.py"],
        cwd=work,
        env={**os.environ, "MYPYPATH": str(work)},
        capture_output=True,
        text=True,
        check=False,
    )
    built = outputs()
    if done.returncode == 0 and len(built) >= expected:
        return built
    sys.stderr.write(done.stdout[-4000:] + done.stderr[-4000:])
    print(f"[build-native] error: {failed}", file=sys.stderr)
    return None


def _install(
    built: list[Path], native_dir: Path, stamp: dict[str, object], root: Path | None = None
) -> None:
    """Replace ``native_dir`` with the built files and their stamp (written last); a
    file keeps its place below ``root`` (a subpackage's module in its folder)."""
    staging = native_dir.with_name("_native.new")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for so in built:
        target = staging / (so.relative_to(root) if root is not None else so.name)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(so, target)
    stamp = {**stamp, "python": sys.version.split()[0]}
    (staging / STAMP).write_text(json.dumps(stamp, indent=1) + "\n")
    shutil.rmtree(native_dir, ignore_errors=True)
    staging.rename(native_dir)


def _build(native: Group, *, force: bool) -> int:
    package = native.package
    usable, why = native.status()
    if usable and not force:
        print(f"[build-native] kvroute.{package}: up to date", file=sys.stderr)
        return 0
    if os.environ.get("KVROUTE_NATIVE") == "0":
        print("[build-native] KVROUTE_NATIVE=0: building anyway", file=sys.stderr)
    print(
        f"[build-native] compiling {len(native.modules)} modules of kvroute.{package} "
        f"with mypyc ({why})",
        file=sys.stderr,
    )
    started = time.monotonic()
    digest = native.source_digest()
    with tempfile.TemporaryDirectory(prefix="kvroute-native-") as tmp:
        work = Path(tmp)
        shutil.copytree(
            ROOT / "src" / "kvroute",
            work / "kvroute",
            ignore=shutil.ignore_patterns("_native", "__pycache__"),
        )
        files = [f"kvroute/{package}/{m.replace('.', '/')}.py" for m in native.modules]
        root = work / "kvroute" / package
        built = _run_setup(
            work,
            SETUP.format(files=files, group=native.library),
            lambda: sorted(root.rglob("*.so")),
            len(native.modules),
            "the build failed (see above); kvroute keeps using the Python sources",
        )
        if built is None:
            return 1
        stamp: dict[str, object] = {"digest": digest, "modules": list(native.modules)}
        _install(built, native.native_dir, stamp, root=root)
    if native.source_digest() != digest:
        print(
            "[build-native] warning: sources changed during the build; it is stale", file=sys.stderr
        )
    print(
        f"[build-native] built {len(built)} extension modules in "
        f"{time.monotonic() - started:.0f} s -> {native.native_dir.relative_to(ROOT)}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
