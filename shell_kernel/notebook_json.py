"""A notebook's text exactly as nbformat writes it (nbformat.v4.writes: keys
sorted, one space of indent, multi-line strings split into lists of lines),
for the notebooks `run --hosts` writes, one a host: nbformat deep-copies
the notebook first and indents through json's pure-Python encoder, which
takes 2-3x this module's time, for every host of a thousand. Strings go
through json's own (C) escaping, so the bytes are nbformat's.

Pure functions; any thread.
"""

from __future__ import annotations

import math
from json.encoder import encode_basestring  # ensure_ascii=False's, as nbformat's

from nbformat.v4.rwbase import split_lines, strip_transient

_INDENT = " "


def writes(nb) -> str:
    """nbformat.v4.writes(nb)'s text. nb is changed on the way (its
    multi-line strings split into lines, as nbformat does to its copy): give
    it a notebook nobody uses afterwards."""
    parts: list[str] = []
    _encode(strip_transient(split_lines(nb)), "", parts.append)
    return "".join(parts)


def _encode(value, indent: str, add) -> None:
    if isinstance(value, str):
        add(encode_basestring(value))
    elif isinstance(value, dict):
        _container(sorted(value.items()), "{", "}", indent, add, keyed=True)
    elif isinstance(value, (list, tuple)):
        _container(value, "[", "]", indent, add, keyed=False)
    else:
        add(_scalar(value))


def _container(items, opening: str, closing: str, indent: str, add, keyed: bool) -> None:
    if not items:
        add(opening + closing)
        return
    inner = indent + _INDENT
    separator = ",\n" + inner
    add(opening + "\n" + inner)
    for number, item in enumerate(items):
        if number:
            add(separator)
        if keyed:
            key, item = item
            add(_key(key) + ": ")
        _encode(item, inner, add)
    add("\n" + indent + closing)


def _key(key) -> str:
    if isinstance(key, str):
        return encode_basestring(key)
    if key is None or isinstance(key, (int, float)):  # (bool is an int)
        return encode_basestring(_scalar(key))
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _scalar(value) -> str:
    """As json.dumps says it (bytes as nbformat's BytesEncoder: ASCII text)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if math.isfinite(value):
            return float.__repr__(value)
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes):
        return encode_basestring(value.decode("ascii"))
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")
