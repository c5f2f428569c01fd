"""No test module imports another: what two of them share lives in tests/support, so running, moving
or deleting one test file never changes what another one collects."""

import ast

from tests.support.processes import ROOT


def _imported(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_no_test_module_imports_another():
    modules = {".".join(p.relative_to(ROOT).with_suffix("").parts): p for p in (ROOT / "tests").rglob("test_*.py")}
    tests = {name for name in modules if not name.startswith("tests.support.")}

    crossing = {name: sorted(_imported(path) & tests) for name, path in modules.items()}

    assert {name: found for name, found in crossing.items() if found} == {}
