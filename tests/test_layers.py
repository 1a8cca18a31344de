"""The layers stay as declared: the engine (render/, installed as ``trifit``) never imports the
desktop app (app/, ``trifit.app``), and pyproject.toml's import-linter contract names every
engine module (lint-imports, run by the test command, checks Qt and pyqtgraph through it)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONTRACTS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
APP_IMPORT = re.compile(r"^\s*(from\s+(\.+app|trifit\.app)\b|import\s+trifit\.app\b)", re.M)


def _engine_modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / "render").rglob("*.py")):
        parts = path.relative_to(ROOT / "render").with_suffix("").parts
        name = ".".join(("trifit",) + tuple(p for p in parts if p != "__init__"))
        out[name] = path
    return out


def test_the_engine_contract_names_every_engine_module():
    (engine,) = [c for c in CONTRACTS if c["name"].startswith("The engine never imports")]
    listed = set(engine["source_modules"])
    modules = set(_engine_modules())
    assert modules <= listed, f"engine modules missing from the contract: {sorted(modules - listed)}"
    assert engine.get("as_packages") is False  # so "trifit" is the package's __init__, not trifit.app too
    assert {"PySide6", "pyqtgraph", "shiboken6"} <= set(engine["forbidden_modules"])


def test_the_engine_never_imports_the_app():
    found = {name: APP_IMPORT.findall(path.read_text()) for name, path in _engine_modules().items()}
    found = {name: hits for name, hits in found.items() if hits}
    # the one exception: `trifit gui` opens the window, imported inside that command only
    assert found == {"trifit.cli": [(".app", ".app")]} or set(found) == {"trifit.cli"}, found
    cli = (ROOT / "render" / "cli.py").read_text()
    (line,) = [ln for ln in cli.splitlines() if APP_IMPORT.match(ln)]
    assert line.startswith("        from .app.main import run_gui"), line  # inside a function, lazily


def test_the_check_finds_an_app_import():
    assert APP_IMPORT.search("from .app.main import run_gui")
    assert APP_IMPORT.search("    import trifit.app.window")
    assert APP_IMPORT.search("from trifit.app import worker")
    assert not APP_IMPORT.search("from .apply import x")


def test_the_architecture_map_names_every_module_and_the_tools_readme_every_tool():
    """docs/ARCHITECTURE.md is where a newcomer finds each piece: every module of the engine, the
    app and the shaders has its line there (by file name), and every script in tools/ its row in
    tools/README.md; a file added without one fails here, and so does a name the map keeps for a
    file that is gone."""
    doc = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    code = [p for folder in ("render", "app", "shaders") for p in sorted((ROOT / folder).rglob("*"))
            if p.suffix in (".py", ".wgsl") and p.name != "__init__.py"]
    unnamed = [str(p.relative_to(ROOT)) for p in code if not re.search(rf"\b{re.escape(p.name)}\b", doc)]
    assert not unnamed, f"modules docs/ARCHITECTURE.md does not name: {unnamed}"
    names = {p.name for p in code} | {p.name for p in (ROOT / "tools").iterdir()}
    gone = sorted(n for n in set(re.findall(r"\b(\w+\.(?:py|wgsl))\b", doc)) if n not in names
                  and not (ROOT / "tests" / n).exists())
    assert not gone, f"files docs/ARCHITECTURE.md names that are gone: {gone}"
    readme = (ROOT / "tools" / "README.md").read_text()
    tools = sorted(p.name for p in (ROOT / "tools").iterdir() if p.suffix in (".py", ".sh"))
    assert [t for t in tools if t not in readme] == []
