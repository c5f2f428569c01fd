"""Import-linter contract types: names of a module that only some modules may import, and calls
that only some modules may make.

import-linter's own contracts work on modules; `django.db.connection` is a name in the module
`django.db`, which every model and service imports for `transaction` or `models`. This contract
reads each direct import of the module (grimp's import details, then the importer's source for an
import spanning lines) and fails on any of `names` imported outside `allowed_importers` (and their
submodules).

    [[tool.importlinter.contracts]]
    type = "forbidden_names"
    module = "django.db"
    names = ["connection", "connections"]
    allowed_importers = ["runs.engine.store"]

Names are not the only door to SQL of one's own: a model's connection, a schema editor's, or a
queryset's compiled SQL reach a cursor without importing `connection`. ForbiddenCallsContract reads
every module of `containers` and fails on a call whose dotted tail is one of `calls` ("cursor"
matches `x.connection.cursor()`, "objects.raw" matches `TaskRun.objects.raw(...)`), outside
`allowed_importers` (a name, its submodules, or an fnmatch pattern such as "*.migrations.*").

    [[tool.importlinter.contracts]]
    type = "forbidden_calls"
    containers = ["runs", "tasks"]
    calls = ["cursor", "objects.raw", "extra", "sql_with_params", "RawSQL"]
    allowed_importers = ["runs.engine.store", "*.migrations.*"]
"""

import ast
from fnmatch import fnmatchcase
from pathlib import Path

from importlinter import Contract, ContractCheck, fields, output


class ForbiddenNamesContract(Contract):
    type_name = "forbidden_names"

    module = fields.StringField()
    names = fields.ListField(subfield=fields.StringField())
    allowed_importers = fields.ListField(subfield=fields.StringField(), required=False, default=[])

    def check(self, graph, verbose: bool) -> ContractCheck:
        allowed = list(self.allowed_importers)
        forbidden = set(self.names)
        found = []
        # An external package is one node of the graph (include_external_packages): its root.
        node = self.module if self.module in graph.modules else self.module.split(".")[0]
        for importer in sorted(graph.find_modules_that_directly_import(node)):
            if any(importer == a or importer.startswith(a + ".") for a in allowed):
                continue
            for detail in graph.get_import_details(importer=importer, imported=node):
                for name in _names_imported(importer, self.module, detail["line_number"]) & forbidden:
                    found.append((importer, detail["line_number"], name))
        return ContractCheck(kept=not found, metadata={"found": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for importer, line, name in check.metadata["found"]:
            output.print_error(f"{importer}:{line} imports {self.module}.{name}", bold=False)
            output.new_line()


class ForbiddenCallsContract(Contract):
    type_name = "forbidden_calls"

    containers = fields.ListField(subfield=fields.StringField())
    calls = fields.ListField(subfield=fields.StringField())
    allowed_importers = fields.ListField(subfield=fields.StringField(), required=False, default=[])

    def check(self, graph, verbose: bool) -> ContractCheck:
        allowed = list(self.allowed_importers)
        calls = list(self.calls)
        found = []
        for module in sorted(graph.modules):
            if not any(module == c or module.startswith(c + ".") for c in self.containers):
                continue
            if any(module == a or module.startswith(a + ".") or fnmatchcase(module, a) for a in allowed):
                continue
            for node in ast.walk(_tree(module)):
                if isinstance(node, ast.Call):
                    dotted = _dotted(node.func)
                    for call in calls:
                        if dotted == call or dotted.endswith("." + call):
                            found.append((module, node.lineno, dotted))
        return ContractCheck(kept=not found, metadata={"found": found})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for module, line, dotted in check.metadata["found"]:
            output.print_error(f"{module}:{line} calls {dotted}()", bold=False)
            output.new_line()


def _dotted(func: ast.expr) -> str:
    """`a.b.c` for a call of a.b.c(...); a part that is no name (a call, a subscript) is "?"."""
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    parts.append(func.id if isinstance(func, ast.Name) else "?")
    return ".".join(reversed(parts))


def _tree(module: str) -> ast.Module:
    # From the file, not importlib: finding a submodule's spec imports its package (and Django's).
    base = Path(*module.split("."))
    path = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
    return ast.parse(path.read_text(encoding="utf-8"))


def _names_imported(importer: str, module: str, line: int) -> set[str]:
    """The names an import statement at `line` of `importer` takes from `module`."""
    tree = _tree(importer)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.lineno == line and node.module == module:
            names |= {alias.name for alias in node.names}
    return names
