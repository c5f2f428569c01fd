"""An import-linter contract type: ORM writes to some models that only some modules may make.

import-linter checks imports; a write is a call. For each module that imports `models_module`
directly (grimp's graph), this reads its source and finds calls of a write method
(`update`, `delete`, `create`, `bulk_create`, ...) on a chain that starts at one of `models`'
managers (`TaskRun.objects.filter(...).update(...)`, under any alias). A write from a module outside
`allowed_importers` breaks the contract, unless `ignore` lists it as "module:Model" (work still to
move); an `ignore` entry that matches nothing breaks it too, so the list only shrinks.

    [[tool.importlinter.contracts]]
    type = "forbidden_writes"
    models_module = "runs.models"
    models = ["TaskRun", "Attempt"]
    allowed_importers = ["runs.engine.store"]

Not seen: a write through an instance (`run.save()`, `obj.delete()`): an instance's model is not
known without running the code. The run store's operations take instances' ids, not instances.
"""

import ast
from pathlib import Path

from importlinter import Contract, ContractCheck, fields, output

WRITES = frozenset(
    {"update", "delete", "create", "get_or_create", "update_or_create", "bulk_create", "bulk_update", "raw"}
)


class ForbiddenWritesContract(Contract):
    type_name = "forbidden_writes"

    models_module = fields.StringField()
    models = fields.ListField(subfield=fields.StringField())
    allowed_importers = fields.ListField(subfield=fields.StringField(), required=False, default=[])
    ignore = fields.ListField(subfield=fields.StringField(), required=False, default=[])

    def check(self, graph, verbose: bool) -> ContractCheck:
        allowed = list(self.allowed_importers)
        ignored = set(self.ignore)
        seen: set[str] = set()
        found = []
        for importer in sorted(graph.find_modules_that_directly_import(self.models_module)):
            if any(importer == a or importer.startswith(a + ".") for a in allowed):
                continue
            for line, model in writes(importer, self.models_module, set(self.models)):
                if f"{importer}:{model}" in ignored:
                    seen.add(f"{importer}:{model}")
                else:
                    found.append(f"{importer}:{line} writes {model}")
        stale = [f"ignored {entry}, which writes nothing now: drop it" for entry in sorted(ignored - seen)]
        return ContractCheck(kept=not found and not stale, metadata={"found": found + stale})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for line in check.metadata["found"]:
            output.print_error(line, bold=False)
            output.new_line()


def writes(module: str, models_module: str, models: set[str]) -> list[tuple[int, str]]:
    """(line, model) of each ORM write on one of `models` in `module`'s source."""
    base = Path(*module.split("."))
    path = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {}  # local name -> model
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == models_module:
            names.update({alias.asname or alias.name: alias.name for alias in node.names if alias.name in models})
    # A queryset kept in a variable (`runs = TaskRun.objects.filter(...)`; `runs.update(...)`):
    # the variable's name stands for its model anywhere in the module (names are seldom reused).
    querysets: dict[str, str] = {}
    for _ in range(3):  # a variable built from another one
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                model = _manager_of(node.value, names, querysets)
                if model is not None:
                    querysets[node.targets[0].id] = model
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in WRITES:
            model = _manager_of(node.func.value, names, querysets)
            if model is not None:
                found.append((node.lineno, model))
    return found


def _manager_of(expr: ast.expr, names: dict[str, str], querysets: dict[str, str]) -> str | None:
    """The model whose manager (`Model.objects`) a chain of calls and attributes starts from."""
    while True:
        if isinstance(expr, ast.Call):
            expr = expr.func
        elif isinstance(expr, ast.Attribute):
            if expr.attr == "objects" and isinstance(expr.value, ast.Name) and expr.value.id in names:
                return names[expr.value.id]
            expr = expr.value
        elif isinstance(expr, ast.Subscript):
            expr = expr.value
        elif isinstance(expr, ast.Name):
            return querysets.get(expr.id)
        else:
            return None
