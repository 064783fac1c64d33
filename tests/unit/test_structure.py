"""The package's shape: no import cycles, backends/ in its layers, no module
or shell file over MAX_LINES, and the JupyterLab extension's cell record
matches the Python one. Pure reading of the source (ast, the TypeScript
text): no kernel, no shell."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

from shell_kernel.results import reply_metadata
from shell_kernel.session import CellRecord

PACKAGE = Path(__file__).resolve().parents[2] / "shell_kernel"
MAX_LINES = 600


def modules() -> dict[str, Path]:
    """Every Python module of shell_kernel by dotted name (the lab's build tree aside)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if "lab" in parts or "node_modules" in parts:
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The shell_kernel modules that module `name` imports, at module level, in
    a function or for type checking only (a cycle of types is a cycle of the
    design all the same), relative imports resolved; importing a.b.c imports
    a.b too, except a package that the module is in: that one was imported
    before the module began (a package importing its own submodules is no
    cycle), unless the module imports from it by name (`from . import x`)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
            continue
        if node.level:
            base = package.split(".")[: len(package.split(".")) - node.level + 1]
            origin = ".".join(base + ([node.module] if node.module else []))
        else:
            origin = node.module or ""
        targets.add(origin)
        targets.update(f"{origin}.{alias.name}" for alias in node.names)
    edges = set()
    for target in targets:
        parts = target.split(".")
        if target in known and target != name:
            edges.add(target)
        for end in range(1, len(parts)):  # the packages on the way are imported too
            prefix = ".".join(parts[:end])
            if prefix in known and not name.startswith(prefix + "."):
                edges.add(prefix)
    return edges


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, set(found)) for name, path in found.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path that returns to its start) per strongly connected
    component of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_in(graph, component) for component in components]


def _cycle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in sorted(graph[node] & component):
                if nxt == start:
                    return paths[node] + [start]
                if nxt not in paths:
                    paths[nxt] = paths[node] + [nxt]
                    following.append(nxt)
        frontier = following
    raise AssertionError(f"no cycle in component {component}")


def test_the_cycle_finder_names_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_relative_imports_are_resolved(tmp_path):
    module = tmp_path / "mod.py"
    module.write_text("from . import x\nfrom .y import z\nfrom ..w import v\n"
                      "def f():\n    from .q import r\n"
                      "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .t import u\n")
    known = {"p", "p.s", "p.s.x", "p.s.y", "p.w", "p.s.q", "p.s.t", "p.s.mod"}
    assert imports_of("p.s.mod", module, known) == {"p.s", "p.s.x", "p.s.y", "p.w", "p.s.q",
                                                    "p.s.t"}


def test_shell_kernel_has_no_import_cycle():
    graph = import_graph()
    assert "shell_kernel.kernel" in graph and graph["shell_kernel.kernel"]  # the graph is real
    found = cycles(graph)
    assert found == [], "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in found)


# backends/ in layers: the verbs (backends/__init__) under everything; the
# channel layer, which knows no transport; the local and SSH backends over it,
# which know nothing of each other. A backend knows nothing of cells, frames
# or Jupyter: no backends module imports the session or the kernel.
BACKEND_LAYERS = {
    "shell_kernel.backends.channel": set(),
    "shell_kernel.backends.local": {"shell_kernel.backends.channel"},
    "shell_kernel.backends.ssh": {"shell_kernel.backends.channel"},
}
ABOVE_THE_BACKENDS = ("shell_kernel.session", "shell_kernel.kernel", "shell_kernel.launch")


def backend_layer(module: str) -> str | None:
    for layer in BACKEND_LAYERS:
        if module == layer or module.startswith(layer + "."):
            return layer
    return None


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a backends module that its layer does not allow."""
    wrong = []
    for name, targets in sorted(graph.items()):
        if not (name == "shell_kernel.backends" or name.startswith("shell_kernel.backends.")):
            continue
        layer = backend_layer(name)
        for target in sorted(targets):
            above = any(target == top or target.startswith(top + ".") for top in ABOVE_THE_BACKENDS)
            other = backend_layer(target)
            if above or (other not in (None, layer)
                         and (layer is None or other not in BACKEND_LAYERS[layer])):
                wrong.append(f"{name} -> {target}")
    return wrong


def test_the_layer_check_names_a_wrong_import():
    graph = {"shell_kernel.backends.channel.shell": {"shell_kernel.backends.ssh.connect"},
             "shell_kernel.backends.local.backend": {"shell_kernel.backends.channel.durable",
                                                     "shell_kernel.backends.ssh.target"},
             "shell_kernel.backends.ssh.backend": {"shell_kernel.backends.channel",
                                                   "shell_kernel.backends"},
             "shell_kernel.backends": {"shell_kernel.backends.local"},
             "shell_kernel.backends.ssh.connect": {"shell_kernel.session.core"},
             "shell_kernel.config": {"shell_kernel.backends.ssh.backend"}}
    assert layer_violations(graph) == [
        "shell_kernel.backends -> shell_kernel.backends.local",
        "shell_kernel.backends.channel.shell -> shell_kernel.backends.ssh.connect",
        "shell_kernel.backends.local.backend -> shell_kernel.backends.ssh.target",
        "shell_kernel.backends.ssh.connect -> shell_kernel.session.core"]


def test_the_backends_layers_import_only_what_they_may():
    graph = import_graph()
    assert set(BACKEND_LAYERS) <= set(graph)  # the layers are packages the graph has
    assert "shell_kernel.backends.channel.channels" in graph["shell_kernel.backends.ssh.backend"]
    assert layer_violations(graph) == []


def over_the_limit(files: dict[str, Path]) -> dict[str, int]:
    """The files over MAX_LINES lines, with their counts."""
    counts = {name: len(path.read_text().splitlines()) for name, path in files.items()}
    return {name: lines for name, lines in counts.items() if lines > MAX_LINES}


def shell_files() -> dict[str, Path]:
    """Every shell file in shell_kernel/shell (the .sh and the .bash), by name."""
    return {path.name: path for path in sorted((PACKAGE / "shell").iterdir())
            if path.suffix in (".sh", ".bash")}


def test_the_line_limit_check_finds_a_file_over_it(tmp_path):
    at_limit, over = tmp_path / "at_limit.bash", tmp_path / "over.sh"
    at_limit.write_text("true\n" * MAX_LINES)
    over.write_text("true\n" * (MAX_LINES + 1))
    assert over_the_limit({"at_limit.bash": at_limit, "over.sh": over}) == {"over.sh": MAX_LINES + 1}


def test_no_module_is_over_the_line_limit():
    too_long = over_the_limit(modules())
    assert too_long == {}, f"modules over {MAX_LINES} lines: {too_long}"


def test_no_shell_file_is_over_the_line_limit():
    files = shell_files()
    assert {"session.bash", "prompts.bash", "launch.sh", "reap.sh"} <= set(files)  # both kinds read
    too_long = over_the_limit(files)
    assert too_long == {}, f"shell files over {MAX_LINES} lines: {too_long}"


# Keys that the kernel adds to reply_metadata's (kernel.py: finish_metadata's
# host, and the session of a cell that a named session runs on).
KERNEL_KEYS = {"host", "session"}


def typescript_interface_keys(source: str, interface: str) -> set[str]:
    body = re.search(r"interface\s+%s\s*\{(.*?)\n\}" % interface, source, re.S)
    assert body, f"no interface {interface}"
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", body.group(1), flags=re.S)
    return set(re.findall(r"^\s*(\w+)\??\s*:", text, re.M))


def every_field_set() -> CellRecord:
    """A CellRecord with each optional field given (a value of its type)."""
    values = {}
    for field in dataclasses.fields(CellRecord):
        kind = str(field.type)
        values[field.name] = (True if "bool" in kind else 3 if "int" in kind
                              else 1.5 if "float" in kind else "text")
    return CellRecord(**values)


def test_the_extensions_cell_record_has_the_keys_the_kernel_sends():
    ts = typescript_interface_keys((PACKAGE / "lab" / "src" / "status.ts").read_text(), "ICellRecord")
    assert "exit_code" in ts  # the parse works
    assert ts == set(reply_metadata(every_field_set())) | KERNEL_KEYS


def test_the_kernels_first_reply_needs_none_of_the_session():
    """Issue 21's start goal: what `python -m shell_kernel kernel` imports
    before its first kernel_info reply (the CLI, the launcher, the kernel
    class, ipykernel) leaves out the session, the protocol, the prompts and
    paramiko: those are imported on the launch thread after that reply, while
    bash already runs its startup files (launch.py)."""
    import subprocess
    import sys

    code = ("import sys; import shell_kernel.cli, shell_kernel.launch, shell_kernel.kernel; "
            "print('\\n'.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout.split())
    assert "shell_kernel.kernel" in loaded  # the check itself sees what was imported
    heavy = {"shell_kernel.session", "shell_kernel.protocol", "shell_kernel.prompts",
             "shell_kernel.output", "shell_kernel.backends.local.backend",
             "shell_kernel.backends.channel", "shell_kernel.backends.ssh", "paramiko"}
    assert loaded & heavy == set()


def test_the_local_spawn_imports_no_transport():
    """launch.py spawns the local shell with backends.local.spawn before
    ipykernel is imported: importing it (and so its packages) must not pull in
    the channel layer, the SSH backend or paramiko, whose import time would
    delay bash's start."""
    import subprocess
    import sys

    code = ("import sys; import shell_kernel.backends.local.spawn; "
            "print('\\n'.join(sorted(sys.modules)))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout.split())
    assert "shell_kernel.backends.local.spawn" in loaded
    assert {name for name in loaded if name.startswith("shell_kernel.")} <= {
        "shell_kernel.backends", "shell_kernel.backends.local", "shell_kernel.backends.local.spawn",
        "shell_kernel.shell"}
    assert "paramiko" not in loaded
