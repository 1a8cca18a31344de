"""Packaging: the wheel carries the shaders and resources and works installed in a fresh venv;
the desktop entry, icon and PyInstaller recipe are in place.

The wheel test builds from a copy of the source tree (so no build/ or egg-info lands in the
checkout) with ``pip wheel --no-deps --no-build-isolation``, installs it with ``--no-deps`` into
a new venv whose dependencies come from this interpreter's site-packages (a .pth file: nothing is
downloaded), then runs the installed ``trifit`` from an empty folder.
"""

from __future__ import annotations

import ast
import configparser
import importlib.util
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


#: Child processes must not see the checkout (PYTHONPATH=. would make the source tree, or a
#: stale egg-info in it, shadow the installed wheel).
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _run(cmd, **kw):
    kw.setdefault("env", CLEAN_ENV)
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=240, **kw)
    assert p.returncode == 0, f"{' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def _copy_source(dst: Path) -> None:
    for name in ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "setup.cfg"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, dst / name)
    folders = set(PYPROJECT["tool"]["setuptools"]["package-dir"].values())
    for folder in sorted(f for f in folders if "/" not in f):
        shutil.copytree(ROOT / folder, dst / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def _can_build_without_isolation() -> bool:
    try:
        import setuptools
    except ImportError:
        return False
    major_minor = tuple(int(v) for v in setuptools.__version__.split(".")[:2])
    return major_minor >= (70, 1) or importlib.util.find_spec("wheel") is not None


def _expected_data_files(package: str) -> set[str]:
    patterns = PYPROJECT["tool"]["setuptools"].get("package-data", {}).get(package, [])
    return {f"{package}/{f.name}" for pat in patterns for f in (ROOT / package).glob(pat)}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    out = tmp_path_factory.mktemp("wheel")
    _copy_source(src)
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", out, src]
    if _can_build_without_isolation():  # the offline path; else pip fetches the build backend
        cmd[4:4] = ["--no-build-isolation", "--no-index"]
    _run(cmd)
    (whl,) = out.glob("trifit-*.whl")
    return whl


def test_wheel_carries_shaders_and_resources(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shaders = {f"trifit/shaders/{p.name}" for p in (ROOT / "shaders").glob("*.wgsl")}
    resources = {f"trifit/resources/{p.name}" for p in (ROOT / "resources").iterdir()
                 if p.is_file() and p.suffix in (".png", ".svg", ".desktop")}
    assert len(shaders) >= 10 and shaders <= names, sorted(shaders - names)
    assert {"trifit/resources/chelsea.png", "trifit/resources/trifit.png"} <= resources <= names, \
        sorted(resources - names)
    for mod in ("trifit/cli.py", "trifit/export.py", "trifit/report.py", "trifit/batch.py", "trifit/gpu/layouts.py",
                "trifit/shaders/__init__.py", "trifit/resources/__init__.py", "trifit/app/window.py"):
        assert mod in names, mod
    entry = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "trifit = trifit.cli:entry" in zipfile.ZipFile(wheel).read(entry).decode()


def test_wheel_has_one_top_level_package(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"trifit"}, top
    (top_level,) = [n for n in names if n.endswith(".dist-info/top_level.txt")] or [None]
    if top_level:
        assert zipfile.ZipFile(wheel).read(top_level).decode().split() == ["trifit"]


def test_wheel_carries_gui_data_files(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {f"trifit/app/{p.name}" for p in (ROOT / "app").glob("*.wgsl")}
    assert wanted <= names, sorted(wanted - names)


def test_installed_wheel_runs_in_a_fresh_venv(wheel, tmp_path):
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    py = venv / "bin" / "python"
    purelib = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    # dependencies (numpy, wgpu, pillow, tqdm, ...) from this interpreter's site-packages, after the
    # venv's own. Those folders may sit inside the checkout (CI's .venv): that is fine, the checkout's
    # own packages are not on them (an editable install's .pth hook is not run for added paths).
    deps = [p for p in dict.fromkeys(site.getsitepackages() + [sysconfig.get_paths()["purelib"]] + sys.path)
            if p and ("site-packages" in p or "dist-packages" in p) and Path(p).is_dir()]
    (purelib / "_trifit_test_deps.pth").write_text("\n".join(deps) + "\n")
    # --ignore-installed: a trifit already installed where the deps come from (an editable install
    # in CI's venv) must neither stop this install nor be uninstalled by it
    _run([sys.executable, "-m", "pip", "--python", py, "install", "-q", "--no-deps", "--no-index",
          "--ignore-installed", wheel])

    work = tmp_path / "work"
    work.mkdir()
    env = CLEAN_ENV
    trifit = venv / "bin" / "trifit"
    assert _run([trifit, "--version"], cwd=work, env=env).stdout.startswith("trifit ")
    where = _run([py, "-c", "import trifit, trifit.shaders, trifit.resources; print(trifit.__file__); "
                  "print(trifit.resources.sample_path('chelsea.png'))"], cwd=work, env=env).stdout.split()
    assert all(Path(p).resolve().is_relative_to(venv.resolve()) for p in where), where
    _run([trifit, "fit", where[1], "--size", "24", "--tris", "5", "--iters", "5", "-o", "s.json",
          "--quiet"], cwd=work, env=env)
    _run([trifit, "render", "s.json", "--size", "48x32", "-o", "s.png"], cwd=work, env=env)
    assert Image.open(work / "s.png").size == (48, 32)


def test_desktop_entry_and_icon():
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str
    entry.read(ROOT / "packaging" / "trifit.desktop", encoding="utf-8")
    d = entry["Desktop Entry"]
    assert d["Type"] == "Application" and d["Name"] == "trifit" and d["Icon"] == "trifit"
    assert d["Exec"].split()[0] == "trifit" and d["Terminal"] == "false"
    assert d["Categories"].endswith(";") and "image/png" in d["MimeType"]
    with Image.open(ROOT / "resources" / "trifit.png") as icon:
        assert icon.size == (256, 256) and icon.mode == "RGBA"
        alpha = icon.getchannel("A")
        assert alpha.getpixel((0, 0)) == 0 and alpha.getpixel((128, 128)) == 255  # rounded tile


def test_pyinstaller_recipe_names_the_data_and_entry():
    spec = (ROOT / "packaging" / "trifit.spec").read_text()
    ast.parse(spec)
    for words in ('"shaders", ["*.wgsl"]', '"resources"', '"app", ["*.wgsl"]', "trifit_entry.py",
                  "COLLECT(", 'collect_submodules("trifit")'):
        assert words in spec, words
    ast.parse((ROOT / "packaging" / "trifit_entry.py").read_text())
    script = ROOT / "packaging" / "build_app.sh"
    assert os.access(script, os.X_OK)
    assert "--version" in script.read_text() and " fit " in script.read_text()
