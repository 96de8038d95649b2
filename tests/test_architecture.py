"""The package's layers import downward only (every import, also those inside functions).

model (numpy kernels) < loader, testing < factors (gtsam adapters) < graphs (builders per
problem) < solvers (numeric, and blind to mechanics: nothing from model) < drivers and
estimation < benchmarking, io, plot < cli and the top-level package.
"""
from __future__ import annotations

import ast
from importlib import resources
from pathlib import Path

import pytest

import mbfg

RANK = {
    "errors": 0, "expressions": 0, "resources": 0, "progress": 0, "trajectories": 0,
    "results": 0, "data": 0, "yaml_document": 0,
    "model": 1,
    "loader": 2, "testing": 2,
    "factors": 3,
    "graphs": 4,
    "solvers": 5,
    "drivers": 6, "estimation": 6,
    "benchmarking": 7, "io": 7, "plot": 7, "studies": 7,
    "cli": 8, "__init__": 8, "__main__": 8,
}
"""Layer of each top-level module or subpackage of mbfg (lower layers never import higher)."""

NO_MODEL = {"solvers"}
"""Layers that must not import the mechanics (model) at all."""

ROOT = Path(str(resources.files(mbfg)))
MODULES = sorted(p for p in ROOT.rglob("*.py"))


def _layer(path: Path) -> str:
    rel = path.relative_to(ROOT).parts
    return rel[0] if len(rel) > 1 else Path(rel[0]).stem


def _imports(path: Path) -> list[tuple[str, int]]:
    """Every ``mbfg.X...`` module an import statement of ``path`` names, with its line."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "mbfg":  # from mbfg import x: x is a module or a name of mbfg
                out += [(f"mbfg.{a.name}" if a.name in RANK else "mbfg", node.lineno)
                        for a in node.names]
            else:
                out.append((node.module, node.lineno))
    return [(m, line) for m, line in out if m == "mbfg" or m.startswith("mbfg.")]


def test_every_module_has_a_layer():
    assert {_layer(p) for p in MODULES} <= set(RANK), \
        f"modules without a layer: {sorted({_layer(p) for p in MODULES} - set(RANK))}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_downward(path):
    own = _layer(path)
    bad = []
    for module, line in _imports(path):
        target = module.split(".")[1] if "." in module else "__init__"
        if target == own:
            continue
        if RANK[target] > RANK[own] or (own in NO_MODEL and target == "model"):
            bad.append(f"line {line}: {own} (layer {RANK[own]}) imports {module} "
                       f"(layer {RANK[target]})")
    assert not bad, "\n".join(bad)


def test_the_rule_catches_an_upward_import(tmp_path):
    """The checker itself: an upward import is reported."""
    bad = tmp_path / "x.py"
    bad.write_text("def f():\n    from mbfg.solvers.batch import optimize\n")
    assert _imports(bad) == [("mbfg.solvers.batch", 2)]


def _public_functions(path: Path):
    """(name, FunctionDef) of the functions in ``__all__`` and the public methods of the
    classes in ``__all__`` of one module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set = set()
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(getattr(t, "id", None) == "__all__" for t in targets) and node.value:
                names = set(ast.literal_eval(node.value))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name in names:
            yield node.name, node
        elif isinstance(node, ast.ClassDef) and node.name in names:
            for f in node.body:
                if isinstance(f, ast.FunctionDef) and not f.name.startswith("_"):
                    yield f"{node.name}.{f.name}", f


def test_every_module_declares_its_public_names():
    missing = [str(p.relative_to(ROOT)) for p in MODULES if p.name != "__main__.py"
               and "__all__" not in p.read_text(encoding="utf-8")]
    assert not missing, f"modules without __all__: {missing}"
    assert (ROOT / "py.typed").is_file()


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_public_functions_are_annotated(path):
    bad = []
    for name, f in _public_functions(path):
        args = f.args.posonlyargs + f.args.args + f.args.kwonlyargs
        args += [a for a in (f.args.vararg, f.args.kwarg) if a is not None]
        missing = [a.arg for a in args if a.annotation is None and a.arg not in ("self", "cls")]
        if missing or f.returns is None:
            bad.append(f"{name} (line {f.lineno}): parameters {missing}"
                       + ("" if f.returns else ", return"))
    assert not bad, "unannotated public functions:\n" + "\n".join(bad)
