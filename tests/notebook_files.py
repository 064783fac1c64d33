"""Writing small test notebooks."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_notebook


def write_notebook(path: Path, *cells, kernel: str | None = "shell", language: str = "bash") -> Path:
    """A notebook of code cells, each a source or (source, tags), with stable ids;
    kernel None leaves the kernelspec out of its metadata."""
    nb = new_notebook(metadata={"kernelspec": {"name": kernel, "display_name": kernel,
                                               "language": language}} if kernel else {})
    for index, cell in enumerate(cells):
        source, tags = (cell, []) if isinstance(cell, str) else cell
        code = new_code_cell(source)
        code.id = f"cell-{index}"
        if tags:
            code.metadata["tags"] = tags
        nb.cells.append(code)
    nbformat.write(nb, path)
    return path
