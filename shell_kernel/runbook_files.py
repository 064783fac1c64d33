"""Notebooks in any format `run` takes: .ipynb (nbformat), or a text notebook
that jupytext reads (a percent script such as deploy.sh, Markdown such as
deploy.md, and the other formats jupytext knows), with jupytext's cells:
``# %%`` markers in scripts, code fences in Markdown.

A text notebook whose header names no kernel runs on the ``shell`` kernel,
and Markdown's fences are read as bash ones: a ```` ```sh ```` fence is a cell
as a ```` ```bash ```` one is (jupytext marks it ``%%sh``, an IPython magic,
which is dropped here: to bash it would be a command). Cells get ids made
from their source, so that two reads of one file give the same notebook
(jupytext makes random ones) and two runs of it can be compared.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .jobs import RunError

#: How to get what text notebooks and --parameters-yaml need (jupytext, PyYAML).
EXTRA_RUNBOOKS = "pip install 'shell_kernel[runbooks]'"
DEFAULT_KERNELSPEC = {"name": "shell", "display_name": "Bash (shell_kernel)", "language": "bash"}
_BASH_MAGICS = ("%%bash", "%%sh")
_MARKDOWN = (".md", ".markdown")


def text_suffixes() -> tuple[str, ...]:
    """The suffixes of the text notebooks jupytext reads; () without jupytext."""
    try:
        from jupytext.formats import NOTEBOOK_EXTENSIONS
    except ImportError:
        return ()
    return tuple(ext for ext in NOTEBOOK_EXTENSIONS if ext != ".ipynb")


def read_runbook(path: Path):
    """The notebook a text file holds, ready to run; RunError if it is not one."""
    suffix = path.suffix
    try:
        import jupytext
    except ImportError:
        raise RunError(f"{path}: reading a text notebook (not .ipynb) needs jupytext: "
                       f"{EXTRA_RUNBOOKS}") from None
    if suffix not in text_suffixes():
        shown = "none" if not suffix else repr(suffix)
        raise RunError(f"{path}: unknown notebook format {shown}; give a .ipynb notebook or "
                       "a text notebook jupytext reads (.sh, .md, ...)")
    try:
        text = path.read_text(encoding="utf-8")
        if suffix in _MARKDOWN:
            text = _with_default_kernel(text)
        nb = jupytext.reads(text, fmt=suffix[1:], as_version=4)
    except Exception as err:  # noqa: BLE001 - unreadable or malformed, said plainly
        raise RunError(f"{path} is not a readable {suffix} notebook: "
                       f"{str(err).strip().splitlines()[0] if str(err).strip() else err!r}") from None
    nb.metadata.setdefault("kernelspec", dict(DEFAULT_KERNELSPEC))
    language = nb.metadata.kernelspec.get("language", "")
    for cell in nb.cells:
        first, _, rest = cell.source.partition("\n")
        if cell.cell_type == "code" and language == "bash" and first.strip() in _BASH_MAGICS:
            cell.source = rest
    if not any(cell.cell_type == "code" and cell.source.strip() for cell in nb.cells):
        raise RunError(f"{path} has no code cell: jupytext makes cells of '# %%' markers in a "
                       "script and of ```bash fences in Markdown")
    _stable_ids(nb)
    return nb


def _with_default_kernel(text: str) -> str:
    """Markdown whose YAML header names no kernelspec, with the default one:
    jupytext reads fences in the language the header's kernelspec names, and
    otherwise guesses it from the fences (python where one is python)."""
    import yaml

    lines = text.splitlines(keepends=True)
    header: dict = {}
    body = text
    if lines and lines[0].rstrip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].rstrip() == "---"), None)
        if end is not None:
            try:
                loaded = yaml.safe_load("".join(lines[1:end]))
            except yaml.YAMLError:
                loaded = None
            if not isinstance(loaded, dict):
                return text  # not a header jupytext reads either
            header, body = loaded, "".join(lines[end + 1:])
    jupyter = header.get("jupyter")
    if isinstance(jupyter, dict) and "kernelspec" in jupyter:
        return text
    header["jupyter"] = {**(jupyter if isinstance(jupyter, dict) else {}),
                         "kernelspec": dict(DEFAULT_KERNELSPEC)}
    return "---\n" + yaml.safe_dump(header, sort_keys=False) + "---\n" + body


def _stable_ids(nb) -> None:
    seen: dict[str, int] = {}
    for cell in nb.cells:
        digest = hashlib.sha1(f"{cell.cell_type}\n{cell.source}".encode()).hexdigest()[:12]
        seen[digest] = seen.get(digest, 0) + 1
        cell.id = digest if seen[digest] == 1 else f"{digest}-{seen[digest]}"
