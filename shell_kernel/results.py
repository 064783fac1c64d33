"""A cell's result and its displays as Jupyter records them: the kernel
sends these, `run --hosts` writes them into each host's notebook, and both
must say the same thing."""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING

from .output import sniff_mime

if TYPE_CHECKING:
    from .session import CellRecord


def reply_metadata(result: CellRecord) -> dict:
    """The execute_reply's shell_kernel metadata for a cell that ran."""
    meta = {"exit_code": result.exit_code, "duration_s": round(result.duration_s, 6)}
    if result.cwd is not None:
        meta["cwd"] = result.cwd
    if result.interrupted:
        meta["interrupted"] = True
    if result.shell_lost:
        meta["shell_restarted"] = True
    if result.detached:
        meta["detached"] = True
    if result.spill_path:
        meta["output_file"] = result.spill_path
    if result.command is not None:
        meta["command"] = result.command
    if result.line is not None:
        meta["line"] = result.line
    return meta


def error_content(ename: str, evalue: str, summary: str | None = None) -> dict:
    """An error message's content (and an error output's fields); the
    traceback is the one line "ename: summary" (summary defaults to evalue)."""
    return {"ename": ename, "evalue": evalue,
            "traceback": [f"{ename}: {summary if summary else evalue}"]}


class UnknownDisplay(ValueError):
    """Display bytes whose type was neither given nor recognisable; the
    message is for the cell's stderr."""


def display_bundle(mime: str, data: bytes) -> dict:
    """The MIME bundle for display bytes (mime "" means: sniff the type).
    Raises UnknownDisplay when the type cannot be told."""
    mime = mime or sniff_mime(data) or ""
    if not mime:
        raise UnknownDisplay(f"display: cannot tell the type of these {len(data)} bytes "
                             "(not PNG, JPEG, GIF, SVG, HTML or text); give --mime TYPE\n")
    bundle = {"text/plain": f"<{mime}, {len(data)} bytes>"}
    if mime.startswith("image/") and mime != "image/svg+xml":
        bundle[mime] = base64.b64encode(data).decode("ascii")
    elif mime == "application/json" or mime.endswith("+json"):
        try:
            bundle[mime] = json.loads(data)
        except ValueError as err:
            bundle = {"text/plain": f"display: the data is not valid JSON ({err})"}
    else:
        bundle[mime] = data.decode("utf-8", "replace")
    return bundle
