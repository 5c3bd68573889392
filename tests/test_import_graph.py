"""The modules of derive, numeric and reports import each other without cycles.

Every import statement counts, at module level or inside a function: a function-level import
only postpones a cycle to the first call. A package's `__init__` is not counted as imported by its
submodules (Python loads it first, whatever the submodule imports).
"""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("derive", "numeric", "reports")  # each may import the ones before it
# Modules of a lower layer allowed to import a higher one, and why.
UPWARD = {
    "derive.all": "the command line runs every stage",
}


def modules(root, packages):
    """{dotted module name: file} for every .py file under the packages."""
    found = {}
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _known(name, mods):
    """The longest prefix of `name` that is one of our modules, or None."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def _imported(node, module, is_package, mods):
    """Our modules one import statement names."""
    if isinstance(node, ast.Import):
        return {_known(a.name, mods) for a in node.names}
    base = node.module or ""
    if node.level:
        package = module.split(".") if is_package else module.split(".")[:-1]
        anchor = package[: len(package) - node.level + 1]
        base = ".".join(anchor + ([node.module] if node.module else []))
    return {f"{base}.{a.name}" if f"{base}.{a.name}" in mods else _known(base, mods) for a in node.names}


def import_graph(root, packages):
    """{module: set of our modules it imports}, top-level and function-level imports alike."""
    mods = modules(root, packages)
    graph = {}
    for name, path in mods.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                targets |= _imported(node, name, path.name == "__init__.py", mods)
        graph[name] = targets - {None, name}
    return graph


def cycles(graph):
    """One cycle [a, b, ..., a] per strongly connected component that has one (Tarjan, then a path back)."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(_cycle_through(v, graph, component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _cycle_through(start, graph, component):
    """A shortest path start -> ... -> start inside the component."""
    paths = {w: [start, w] for w in sorted(graph[start]) if w in component}
    frontier = list(paths)
    while start not in paths:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w in component and w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return paths[start]


def _layer(module):
    return LAYERS.index(module.split(".")[0])


def test_no_import_cycles():
    graph = import_graph(ROOT, LAYERS)
    assert "derive.claims" in graph and "numeric.stage" in graph["derive.all"]  # function-level imports are seen
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join("  " + " -> ".join(c) for c in found)


def test_only_entry_points_import_a_higher_layer():
    graph = import_graph(ROOT, LAYERS)
    upward = sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets
                    if _layer(t) > _layer(m) and m not in UPWARD)
    assert not upward, "imports of a higher layer (" + " < ".join(LAYERS) + "):\n  " + "\n  ".join(upward)


def test_a_function_level_cycle_is_found(tmp_path):
    """Positive control: the checker sees imports inside functions and relative imports."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text("import os\n\n\ndef g():\n    import pkg.a\n")
    (pkg / "d.py").write_text("from pkg.a import name\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.d"] == {"pkg.a"} and graph["pkg"] == set()
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
