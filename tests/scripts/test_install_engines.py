"""scripts/install-engines' llama-server step: recipe-keyed cache and smoke test.

A real rebuild takes minutes, so the step is run on a stand-in llama.cpp source tree
(``KVROUTE_LLAMA_CPP_SDIST``): a CMake project whose ``llama-server`` target installs a
small HTTP server answering ``/health`` and one chat completion, as the real one does.
The crashing binary is a stand-in too: a real llama-server cannot be made to crash on
demand (issue 18's AMX build did so only on some CPUs).
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-engines"
VERSION = "0.3.36"

FAKE_SERVER = textwrap.dedent(
    """\
    #!{python}
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Handler(BaseHTTPRequestHandler):
        def _send(self, body):
            data = json.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send({{"status": "ok"}})

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self._send({{"choices": [{{"message": {{"content": "Paris (rebuilt)"}}}}]}})

        def log_message(self, *args):
            pass

    port = int(sys.argv[sys.argv.index("--port") + 1])
    HTTPServer(("127.0.0.1", port), Handler).serve_forever()
    """
)

FAKE_CMAKE = textwrap.dedent(
    """\
    cmake_minimum_required(VERSION 3.14)
    project(fake_llama_cpp NONE)
    add_custom_target(llama-server ALL
      COMMAND ${CMAKE_COMMAND} -E make_directory ${CMAKE_BINARY_DIR}/bin
      COMMAND ${CMAKE_COMMAND} -E copy ${CMAKE_SOURCE_DIR}/server.py ${CMAKE_BINARY_DIR}/bin/llama-server)
    """
)

pytestmark = pytest.mark.skipif(
    shutil.which("cmake") is None,
    reason="cmake is not installed (scripts/install-engines needs it too)",
)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    root = tmp_path / "cache"
    (root / "models").mkdir(parents=True)
    (root / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf").write_bytes(b"GGUF stand-in")
    return root


@pytest.fixture
def sdist(tmp_path: Path) -> Path:
    src = tmp_path / "sdist" / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    src.mkdir(parents=True)
    (src / "CMakeLists.txt").write_text(FAKE_CMAKE)
    server = src / "server.py"
    server.write_text(FAKE_SERVER.format(python=sys.executable))
    server.chmod(0o755)
    archive = tmp_path / f"llama_cpp_python-{VERSION}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "sdist" / f"llama_cpp_python-{VERSION}", f"llama_cpp_python-{VERSION}")
    return archive


def _install(cache: Path, sdist: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "KVROUTE_CACHE": str(cache),
        "KVROUTE_LLAMA_CPP_SDIST": str(sdist),
        "PYTHON": sys.executable,
    }
    return subprocess.run(
        [str(SCRIPT), "llamacpp"], check=False, env=env, capture_output=True, text=True, timeout=300
    )


def _binary(cache: Path) -> Path:
    return cache / "llama.cpp" / VERSION / "bin" / "llama-server"


def _crashing_binary(path: Path) -> None:
    path.write_text("#!/bin/sh\necho 'llama_model_load: loading'\nsleep 0.2\nkill -SEGV $$\n")
    path.chmod(0o755)


def test_binary_from_an_older_recipe_is_rebuilt_and_smoke_tested(cache: Path, sdist: Path) -> None:
    binary = _binary(cache)
    binary.parent.mkdir(parents=True)
    _crashing_binary(binary)  # left by an older script: no recipe file beside it
    done = _install(cache, sdist)
    assert done.returncode == 0, done.stderr
    assert "built by another recipe; rebuilding" in done.stderr
    assert "llama-server answers" in done.stderr and "Paris (rebuilt)" in done.stderr
    recipe = (binary.parent / "llama-server.recipe").read_text()
    assert recipe.startswith(f"llama-cpp-python=={VERSION} ")
    if platform.machine() == "x86_64":  # never a native build that may compile AMX kernels
        assert "-DGGML_NATIVE=ON" not in recipe or "-mno-amx-tile" in recipe


def test_crashing_binary_with_current_recipe_is_replaced(cache: Path, sdist: Path) -> None:
    assert _install(cache, sdist).returncode == 0  # a good install, recipe written
    binary = _binary(cache)
    _crashing_binary(binary)  # same recipe, but it now dies at model load
    done = _install(cache, sdist)
    assert done.returncode == 0, done.stderr
    assert "killed by SIGSEGV while starting" in done.stderr
    assert "llama_model_load: loading" in done.stderr  # the log's end is shown
    assert "fails its smoke test; rebuilding" in done.stderr
    assert "Paris (rebuilt)" in done.stderr
    assert "kill -SEGV" not in binary.read_text()


def test_good_cached_binary_is_kept_without_a_build(cache: Path, sdist: Path) -> None:
    assert _install(cache, sdist).returncode == 0
    before = _binary(cache).stat().st_mtime_ns
    done = _install(cache, cache / "no-such-sdist.tar.gz")  # a build would fail
    assert done.returncode == 0, done.stderr
    assert "llama-server present" in done.stderr
    assert _binary(cache).stat().st_mtime_ns == before


def test_a_fresh_build_that_fails_its_smoke_test_is_not_installed(
    cache: Path, sdist: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.tar.gz"
    src_dir = tmp_path / "b" / f"llama_cpp_python-{VERSION}" / "vendor" / "llama.cpp"
    src_dir.mkdir(parents=True)
    (src_dir / "CMakeLists.txt").write_text(FAKE_CMAKE)
    _crashing_binary(src_dir / "server.py")
    with tarfile.open(broken, "w:gz") as tar:
        tar.add(tmp_path / "b" / f"llama_cpp_python-{VERSION}", f"llama_cpp_python-{VERSION}")
    done = _install(cache, broken)
    assert done.returncode == 1
    assert "fails its smoke test" in done.stderr and "smoke.log" in done.stderr
    assert not _binary(cache).exists()
