"""The package's import graph, read from the code's own `import` statements (module level and
inside functions): no import circle, and the model and the calibration's derivation import no
device library, at any depth (the launch specs none but through the GPU's detection). The
layers: docs/structure.md."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DEVICE_LIBRARIES = ("jax", "jaxlib", "triton", "jax_triton", "torch")


def _module_path(name: str) -> Path | None:
    path = ROOT / name.replace(".", "/")
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def imports(module: str) -> set[str]:
    """Everything `module` (a dotted jtblas name) imports, anywhere in its file: jtblas modules by
    their dotted name (`from jtblas import profiles` is `jtblas.profiles`), others by theirs."""
    names = set()
    for node in ast.walk(ast.parse(_module_path(module).read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names}
            found = {name for name in submodules if _module_path(name) is not None}
            names.update(found)
            if found != submodules:  # names defined in the module itself
                names.add(node.module)
    return names


def jtblas_modules() -> list[str]:
    return sorted(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                  for path in (ROOT / "jtblas").rglob("*.py"))


def test_no_import_circle():
    graph = {module: {name for name in imports(module) if name.startswith("jtblas")} for module in jtblas_modules()}
    state: dict[str, str] = {}  # "open" while on the path, "done" after

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for imported in sorted(graph.get(module, ())):
            if state.get(imported) == "open":
                circle = path[path.index(imported):] + [imported]
                pytest.fail("import circle: " + " -> ".join(circle))
            if imported not in state:
                visit(imported, [*path, imported])
        state[module] = "done"

    for module in graph:
        if module not in state:
            visit(module, [module])


def walk_free_of_device_libraries(start) -> set[str]:
    """The jtblas modules `start` reaches through imports at any depth (itself included), each
    asserted to import neither JAX, Triton nor torch."""
    seen, todo = set(), sorted(start)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        for imported in imports(module):
            assert imported.split(".")[0] not in DEVICE_LIBRARIES, (module, imported)
            if imported.startswith("jtblas.") and imported not in seen:
                todo.append(imported)
    return seen


@pytest.mark.parametrize("root", ["jtblas.model", "jtblas.calibrate.derive", "jtblas.calibrate.report"])
def test_pure_modules_reach_no_device_library(root):
    """These modules, and every jtblas module they import at any depth (not counting the packages'
    `__init__` that Python runs on the way), import neither JAX, Triton nor torch."""
    seen = walk_free_of_device_libraries(m for m in jtblas_modules() if m == root or m.startswith(root + "."))
    assert {"jtblas.gpus", "jtblas.constants"} <= seen  # the walk follows jtblas's own imports


def test_launch_specs_reach_jax_only_to_detect_the_gpu():
    """`jtblas.launch_specs`, which the torch launcher shares, imports no device library and no
    kernel itself, nor the op or its argument checks; every jtblas module it reaches at any depth,
    but through `jtblas.hardware` (the GPU detected where no `hw` is given), is free of JAX, Triton
    and torch."""
    direct = imports("jtblas.launch_specs")
    assert not {name for name in direct if name.split(".")[0] in DEVICE_LIBRARIES}, direct
    assert not {name for name in direct if name.startswith("jtblas.kernels")}, direct
    assert not direct & {"jtblas.ops", "jtblas.operands", "jtblas.launch", "jtblas.partitioning"}, direct
    assert "jtblas.hardware" in direct
    seen = walk_free_of_device_libraries(
        name for name in direct if name.startswith("jtblas.") and name != "jtblas.hardware")
    assert {"jtblas.config", "jtblas.model.resources"} <= seen


def test_calibrate_does_not_import_the_benchmark():
    """Calibration measures with the shared timing and launch modules, not through the benchmark."""
    modules = [m for m in jtblas_modules() if m.startswith("jtblas.calibrate")]
    assert modules
    for module in modules:
        assert not {name for name in imports(module) if name.startswith("jtblas.bench")}, module
