/**
 * JupyterLab side of shell_kernel: every cell run on a shell_kernel kernel
 * shows its exit status, duration and (over SSH) host in its footer, and
 * keeps them in cell.metadata.shell_kernel, the schema that
 * `python -m shell_kernel run` writes.
 *
 * It sends nothing to the kernel: it watches the messages of the notebook's
 * own kernel connection (the execute_request that names the cell, the
 * execute_input that starts it, the execute_reply that ends it).
 */

import { JupyterFrontEnd, JupyterFrontEndPlugin } from '@jupyterlab/application';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';

import { NotebookStatus } from './notebook';

const plugin: JupyterFrontEndPlugin<void> = {
  id: 'shell-kernel-lab:cell-status',
  description: "Shows and saves each shell_kernel cell's exit status.",
  autoStart: true,
  requires: [INotebookTracker],
  activate: (app: JupyterFrontEnd, tracker: INotebookTracker) => {
    tracker.widgetAdded.connect((_, panel: NotebookPanel) => {
      new NotebookStatus(panel);
    });
  }
};

export default plugin;
