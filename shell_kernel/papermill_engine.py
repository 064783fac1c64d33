"""A papermill engine that records shell_kernel's per-cell results.

Registered under the ``papermill.engine`` entry point as ``shell_kernel``::

    papermill --engine shell_kernel in.ipynb out.ipynb -p name value

It is papermill's own nbclient engine (NBClientEngine, which drives
PapermillNotebookClient: per-cell papermill metadata, autosave, progress
bar, stop at the first failure), plus nbclient's ``on_cell_executed`` hook
that writes ``cell.metadata.shell_kernel`` for each executed cell: the
``shell_kernel`` metadata of the kernel's execute_reply (exit_code,
duration_s, cwd, ...) and ``host`` ("local", or the SSH host the kernelspec
names) -- the same record `python -m shell_kernel run` leaves.

Parameters need nothing from here: papermill picks its BashTranslator by the
notebook's language ("bash"), with or without this engine.
"""

from __future__ import annotations

from papermill.engines import NBClientEngine

from .notebook_job import CellRecorder, clear_records
from .runner import host_of


def _spec_host(kernel_name: str) -> str:
    from jupyter_client.kernelspec import KernelSpecManager
    return host_of(KernelSpecManager().get_kernel_spec(kernel_name))


class ShellKernelEngine(NBClientEngine):
    """NBClientEngine + cell.metadata.shell_kernel for every executed cell."""

    @classmethod
    def execute_managed_notebook(cls, nb_man, kernel_name, **kwargs):
        # Stale records from an earlier run of the same notebook would pass
        # for results of this one.
        clear_records(nb_man.nb)
        # A hook given through papermill's engine kwargs still runs, after ours.
        recorder = CellRecorder(lambda: _spec_host(kernel_name), then=kwargs.pop(
            "on_cell_executed", None))
        execute_hook = kwargs.pop("on_cell_execute", None)

        def on_cell_execute(cell, cell_index, **more):
            recorder.on_cell_execute(cell, cell_index)
            if execute_hook is not None:
                return execute_hook(cell=cell, cell_index=cell_index, **more)
            return None

        # NBClientEngine passes the remaining kwargs on to PapermillNotebookClient,
        # where they set nbclient's NotebookClient traits, hooks included.
        return super().execute_managed_notebook(
            nb_man, kernel_name, on_cell_executed=recorder.on_cell_executed,
            on_cell_execute=on_cell_execute, **kwargs)
