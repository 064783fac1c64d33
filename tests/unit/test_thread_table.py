"""The thread table (shell_kernel/threads.py) holds every thread the code
starts, each thread the code starts has a name, and docs/architecture.md shows
the table as threads.py renders it. (tests/test_threads.py checks the table
against the threads each kind of session really starts.)"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from shell_kernel import threads

PACKAGE = Path(threads.__file__).parent
DOC = PACKAGE.parent / "docs" / "architecture.md"


def _text(node: ast.AST | None) -> str | None:
    """A name given as a literal or an f-string (its fields as N)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "N"
                       for part in node.values)
    return None


def thread_names_in(tree: ast.AST) -> tuple[set[str], list[int]]:
    """The thread names a module gives, and the lines of Thread and Timer
    calls that give none (a Timer may get its name on the next line)."""
    names, unnamed = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target, value in _pairs(node):
                if (isinstance(target, ast.Attribute) and target.attr == "name") or \
                        (isinstance(target, ast.Name) and target.id == "reader_name"):
                    if _text(value):
                        names.add(_text(value))
        if not isinstance(node, ast.Call):
            continue
        called = ast.unparse(node.func)
        if called.endswith("start_reader") and node.args and _text(node.args[0]):
            names.add(_text(node.args[0]))
        if called.split(".")[-1] in ("Thread", "Timer"):
            given = next((kw.value for kw in node.keywords if kw.arg == "name"), None)
            if given is not None:
                if _text(given):
                    names.add(_text(given))
            else:
                unnamed.append(node.lineno)
    return names, sorted(unnamed)


def _pairs(node: ast.Assign):
    for target in node.targets:
        if isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
            yield from zip(target.elts, node.value.elts)
        else:
            yield target, node.value


def _timers_named_after(tree: ast.AST) -> set[int]:
    """Lines of `timer = threading.Timer(...)` whose variable then gets a .name."""
    lines = set()
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        named = {ast.unparse(target.value) for node in ast.walk(function)
                 if isinstance(node, ast.Assign) for target, _ in _pairs(node)
                 if isinstance(target, ast.Attribute) and target.attr == "name"}
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                    ast.unparse(node.value.func).endswith("Timer") and \
                    any(ast.unparse(target) in named for target in node.targets):
                lines.add(node.value.lineno)
    return lines


def test_every_thread_the_code_starts_is_named_and_in_the_table():
    registered = {kind.name for kind in threads.THREADS}
    found, unnamed = set(), []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "lab" in path.relative_to(PACKAGE).parts or path.parent.name == "testing":
            continue
        tree = ast.parse(path.read_text())
        names, lines = thread_names_in(tree)
        found |= names
        unnamed += [f"{path.relative_to(PACKAGE)}:{line}" for line in lines
                    if line not in _timers_named_after(tree)]
    assert not unnamed, f"threads started without a name: {unnamed}"
    assert found - registered == set(), "threads missing from shell_kernel/threads.py"
    assert registered - found == set(), "threads.py lists threads the code never starts"


def test_the_scan_sees_a_thread_it_does_not_know():
    tree = ast.parse("import threading\n"
                     "threading.Thread(target=f, name='shell-kernel-new').start()\n"
                     "threading.Thread(target=g).start()\n"
                     "def h():\n    t = threading.Timer(1, f)\n    t.name = 'shell-kernel-t'\n")
    names, unnamed = thread_names_in(tree)
    assert names == {"shell-kernel-new", "shell-kernel-t"}
    assert unnamed == [3, 5] and _timers_named_after(tree) == {5}


def test_by_name_reads_numbered_workers():
    assert threads.by_name("shell-kernel-fleet-12").name == "shell-kernel-fleet-N"
    assert threads.by_name("shell-kernel-fleet-x") is None
    assert threads.by_name("shell-kernel-pump").name == "shell-kernel-pump"


def test_the_architecture_document_shows_the_table_as_rendered():
    text = DOC.read_text()
    match = re.search(r"<!-- BEGIN THREADS.*?-->\n(.*?)<!-- END THREADS -->", text, re.S)
    assert match, "docs/architecture.md has no generated thread table"
    assert match.group(1) == threads.markdown_table(), (
        "docs/architecture.md's thread table is out of date: "
        "render it with `python -m shell_kernel.threads`")
