"""shell_kernel.notebook_json writes a notebook byte for byte as nbformat does."""

import copy
import random
import string

import nbformat
import pytest
from nbformat.v4 import (new_code_cell, new_markdown_cell, new_notebook, new_output,
                         new_raw_cell, writes_json)

from shell_kernel import notebook_json


def same_as_nbformat(nb) -> str:
    expected = writes_json(nb)
    text = notebook_json.writes(copy.deepcopy(nb))
    assert text == expected
    return text


def host_notebook():
    """A notebook as a fleet host's looks when saved, with what is awkward to write."""
    nb = new_notebook(metadata={
        "kernelspec": {"name": "shell", "display_name": "Bash", "language": "bash"},
        "shell_kernel": {"host": "h1", "duration_s": 0.1234, "parameters": {}, "started": None,
                         "ratio": 1e-7, "big": 12345678901234567890.0, "count": 10**20,
                         "flags": [True, False, None], "empty": [], "tuple": (1, "two")},
        "orig_nbformat": 3, "signature": "sha256:..."})  # (transient: left out)
    nb.cells = [
        new_markdown_cell("# Title\n\nText with ünïcödé, \"quotes\", a tab\t, a \\ backslash"),
        new_raw_cell("raw\r\nwith CRLF\r\n"),
        new_code_cell("echo one\necho two\n", execution_count=1, metadata={
            "trusted": True, "tags": ["raises-exception"],
            "shell_kernel": {"exit_code": 0, "cwd": "/tmp/ä", "failed": ["", ""]}}, outputs=[
                new_output("stream", name="stdout", text="one\ntwo\n\x1b[31mred\x1b[0m\x00\x07"),
                new_output("stream", name="stderr", text="no newline at the end"),
                new_output("display_data", data={"text/plain": "line 1\nline 2",
                                                 "text/html": "<b>\u2603</b>\n",
                                                 "image/png": "iVBORw0KGgo=\n",
                                                 "application/json": {"a": [1, 2.5, {"b": None}]}},
                           metadata={"image/png": {"width": 10}}),
                new_output("error", ename="Exit", evalue="1", traceback=["line\n", "\U0001F600"]),
            ]),
        new_code_cell(""),
    ]
    nb.cells[1]["attachments"] = {"a.png": {"image/png": "abc\ndef"}}
    return nb


def test_a_host_notebook_is_written_as_nbformat_writes_it():
    text = same_as_nbformat(host_notebook())
    assert '"orig_nbformat"' not in text and '"trusted"' not in text
    assert nbformat.reads(text, as_version=4).cells[2].outputs[0].text.startswith("one\ntwo\n")


def test_scalars_keys_and_nesting_as_json_writes_them():
    nb = new_notebook()
    # (json sorts a dict's keys before it makes them strings: one type a dict)
    nb.metadata["odd"] = [{2: "int key", 1: "another"}, {2.5: "float key", 1e-9: "small"},
                          {False: "bool key"}, {None: "none key"},
                          {"z": float("nan"), "y": float("inf"), "x": float("-inf"),
                           "w": -0.0, "v": b"bytes", "deep": [[[]], [{}], [{"k": [1]}]]}]
    same_as_nbformat(nb)


@pytest.mark.parametrize("seed", range(20))
def test_random_metadata_is_written_as_nbformat_writes_it(seed):
    rng = random.Random(seed)
    alphabet = string.printable + "äé\u2603\U0001F600\x00\x1f\x7f"

    def value(depth):
        kind = rng.randrange(8 if depth < 4 else 5)
        if kind == 0:
            return "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
        if kind == 1:
            return rng.randrange(-10**6, 10**6)
        if kind == 2:
            return rng.uniform(-1e6, 1e6) * 10 ** rng.randrange(-10, 10)
        if kind == 3:
            return rng.choice([True, False, None])
        if kind == 4:
            return ""
        if kind in (5, 6):
            return {"".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 6))): value(depth + 1)
                    for _ in range(rng.randrange(4))}
        return [value(depth + 1) for _ in range(rng.randrange(4))]

    nb = new_notebook(metadata={"random": value(0)})
    source = "".join(rng.choice(alphabet + "\n" * 10) for _ in range(rng.randrange(40)))
    nb.cells = [new_code_cell(source, metadata={"m": value(1)})]
    same_as_nbformat(nb)


def test_what_json_cannot_write_is_refused_as_json_refuses_it():
    nb = new_notebook(metadata={"bad": object()})
    with pytest.raises(TypeError):
        writes_json(nb)
    with pytest.raises(TypeError):
        notebook_json.writes(copy.deepcopy(nb))
