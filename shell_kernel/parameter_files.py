"""`run --parameters-yaml FILE`: parameters from a YAML mapping, with what
papermill's ``-y`` gives bash: a list becomes a bash array (each item a
string, quoted), a scalar the string papermill's BashTranslator makes of it
(true/false, numbers as written, null as empty). bash has no nested values,
and arrays of names (associative arrays) are not in bash 3.2: a mapping or a
list inside a value is refused.
"""

from __future__ import annotations

from pathlib import Path

from .notebook_job import RunError, check_parameter_name
from .runbook_files import EXTRA_RUNBOOKS


def read_parameters_yaml(path: Path) -> dict[str, str | list[str]]:
    """NAME -> value (a string, or a list of strings for an array)."""
    try:
        import yaml
    except ImportError:
        raise RunError(f"--parameters-yaml needs PyYAML: {EXTRA_RUNBOOKS}") from None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunError(f"--parameters-yaml {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise RunError(f"--parameters-yaml {path}: cannot read it ({err})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        at = f" (line {where.line + 1})" if where is not None else ""
        raise RunError(f"--parameters-yaml {path}: not valid YAML{at}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise RunError(f"--parameters-yaml {path}: give a mapping of names to values "
                       "(name: value, one a line), not a YAML list or scalar")
    values: dict[str, str | list[str]] = {}
    for name, value in data.items():
        try:
            check_parameter_name(str(name))
        except RunError as err:
            raise RunError(f"--parameters-yaml {path}: {str(err).removeprefix('-p ')}") from None
        if isinstance(value, dict):
            raise RunError(f"--parameters-yaml {path}: {name!r}: bash has no nested values "
                           "(give a string or a list)")
        if isinstance(value, list):
            if any(isinstance(item, (list, dict)) for item in value):
                raise RunError(f"--parameters-yaml {path}: {name!r}: bash arrays hold strings, "
                               "not lists or mappings")
            values[str(name)] = [_scalar(item) for item in value]
        else:
            values[str(name)] = _scalar(value)
    return values


def _scalar(value) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
