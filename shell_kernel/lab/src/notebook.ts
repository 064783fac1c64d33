/**
 * One notebook panel: follows its kernel connection's messages, keeps each
 * cell's record in cell.metadata.shell_kernel and shows it in the cell's
 * footer.
 */

import type { Cell, CodeCell, ICellModel, ICodeCellModel } from '@jupyterlab/cells';
import type { NotebookPanel } from '@jupyterlab/notebook';
import type { Kernel } from '@jupyterlab/services';

import {
  IStatusView,
  METADATA_KEY,
  asRecord,
  describeRecord,
  describeRunning,
  recordFromReply,
  sameJSON
} from './status';

/** kernel_info's implementation of the kernels this extension serves. */
export const IMPLEMENTATION = 'shell_kernel';
export const STATUS_CLASS = 'jp-ShellKernelStatus';
/** On a cell footer that shows a status (JupyterLab gives footers no height). */
const FOOTER_CLASS = 'jp-ShellKernelStatus-footer';
const TICK_MS = 250; // how often a running cell's elapsed time is redrawn
/** JupyterLab's classes of an input box (stdin), and of one that was answered. */
const STDIN_ITEM_CLASS = 'jp-OutputArea-stdin-item';
const STDIN_ANSWERED_CLASS = 'jp-OutputArea-stdin-hiding';

export class NotebookStatus {
  constructor(panel: NotebookPanel) {
    this._panel = panel;
    panel.sessionContext.kernelChanged.connect(this._onKernelChanged, this);
    panel.sessionContext.statusChanged.connect(this._onKernelStatus, this);
    this._onKernelChanged();
    void panel.context.ready.then(() => {
      if (panel.isDisposed || !panel.content.model) {
        return;
      }
      panel.content.model.cells.changed.connect(this._onCellsChanged, this);
      this._onCellsChanged();
    });
    panel.disposed.connect(this._dispose, this);
  }

  private _dispose(): void {
    this._kernel?.anyMessage.disconnect(this._onMessage, this);
    this._kernel = null;
    this._running.clear();
    this._updateTimer();
  }

  private _onKernelChanged(): void {
    this._kernel?.anyMessage.disconnect(this._onMessage, this);
    this._kernel = this._panel.sessionContext.session?.kernel ?? null;
    this._kernel?.anyMessage.connect(this._onMessage, this);
    this._requests.clear();
    this._stopRunning();
  }

  private _onKernelStatus(_: unknown, status: Kernel.Status): void {
    // No reply will come for what was running.
    if (status === 'restarting' || status === 'autorestarting' || status === 'dead') {
      this._requests.clear();
      this._stopRunning();
    }
  }

  private _onMessage(kernel: Kernel.IKernelConnection, args: Kernel.IAnyMessageArgs): void {
    const { msg, direction } = args;
    const type = msg.header.msg_type;
    if (direction === 'send') {
      // JupyterLab names the cell in the execute_request's metadata.
      const cellId = type === 'execute_request' ? msg.metadata?.cellId : undefined;
      const model = typeof cellId === 'string' ? this._cellById(cellId) : undefined;
      if (model) {
        this._requests.set(msg.header.msg_id, model);
      }
      return;
    }
    if (type !== 'execute_input' && type !== 'execute_reply') {
      return;
    }
    const parentId = (msg.parent_header as { msg_id?: string }).msg_id ?? '';
    const model = this._requests.get(parentId);
    if (!model) {
      return;
    }
    if (type === 'execute_reply') {
      this._requests.delete(parentId);
    }
    // The kernel_info reply the connection already has says whose kernel
    // this is; handled in order, since every message waits for the same promise.
    void kernel.info.then(info => {
      if (info.implementation !== IMPLEMENTATION || model.isDisposed) {
        return;
      }
      if (type === 'execute_input') {
        this._running.set(model, Date.now());
      } else {
        this._running.delete(model);
        const record = recordFromReply(msg.metadata);
        if (record && !sameJSON(model.getMetadata(METADATA_KEY), record)) {
          model.setMetadata(METADATA_KEY, record);
        }
        this._dropUnansweredInput(model);
        this._releaseInputGuard(kernel);
      }
      this._updateTimer();
      this._renderModel(model);
    });
  }

  private _onCellsChanged(): void {
    const cells = this._panel.content.model?.cells;
    if (!cells) {
      return;
    }
    for (let i = 0; i < cells.length; i++) {
      this._watch(cells.get(i));
    }
    for (const widget of this._panel.content.widgets) {
      void widget.ready.then(() => this._render(widget));
    }
  }

  private _watch(model: ICellModel): void {
    if (this._watched.has(model)) {
      return;
    }
    this._watched.add(model);
    model.metadataChanged.connect((_, change) => {
      if (change.key === METADATA_KEY) {
        this._renderModel(model);
      }
    });
    if (model.type !== 'code') {
      return;
    }
    const code = model as ICodeCellModel;
    code.outputs.changed.connect((_, change) => {
      // Clear Outputs of a cell that has no execution count (it never ran
      // here, or ran before its notebook was saved without one): the
      // execution count does not change, so this is how the clearing shows.
      if (change.type === 'clear' && code.executionCount === null) {
        this._forgetRecord(model);
      }
    });
    code.stateChanged.connect((_, change) => {
      // Typed as boolean changes (trusted, isDirty), but carries these too.
      const { name, newValue } = change as { name: string; newValue: unknown };
      if (name === 'executionCount' && newValue === null) {
        // Outputs cleared (or a new run begins): the stored status goes too.
        this._forgetRecord(model);
      } else if (name === 'executionState' && newValue === 'idle') {
        // Ended without a reply of ours (cancelled, kernel gone).
        if (this._running.delete(model)) {
          this._updateTimer();
          this._renderModel(model);
        }
      }
    });
  }

  private _forgetRecord(model: ICellModel): void {
    if (!this._running.has(model) && model.getMetadata(METADATA_KEY) !== undefined) {
      model.deleteMetadata(METADATA_KEY);
    }
  }

  /**
   * JupyterLab refuses to run any cell ("Cell not executed due to pending
   * input") from an input_request until the input is answered, the kernel
   * interrupted or restarted. A question the kernel gave up on (a `read -t`
   * that timed out, a cell that ended) is answered by nobody: once no input
   * box is open in the notebook, the guard goes with the boxes.
   */
  private _releaseInputGuard(kernel: Kernel.IKernelConnection): void {
    const guarded = kernel as { hasPendingInput?: boolean; removeInputGuard?: () => void };
    if (guarded.hasPendingInput && !this._panel.content.widgets.some(cell => openInputs(cell).length)) {
      guarded.removeInputGuard?.();
    }
  }

  /**
   * An input box still open when the cell's reply comes is one the kernel
   * gave up on (the read timed out, the cell was interrupted): an answer
   * typed there would reach nobody, so it goes.
   */
  private _dropUnansweredInput(model: ICellModel): void {
    const widget = this._panel.content.widgets.find(cell => cell.model === model);
    if (widget) {
      openInputs(widget).forEach(child => child.dispose());
    }
  }

  private _cellById(id: string): ICellModel | undefined {
    const cells = this._panel.content.model?.cells;
    for (let i = 0; cells && i < cells.length; i++) {
      if (cells.get(i).id === id) {
        return cells.get(i);
      }
    }
    return undefined;
  }

  private _stopRunning(): void {
    const stopped = [...this._running.keys()];
    this._running.clear();
    this._updateTimer();
    stopped.forEach(model => this._renderModel(model));
  }

  private _updateTimer(): void {
    if (this._running.size && this._timer === null) {
      this._timer = window.setInterval(() => {
        this._running.forEach((_, model) => this._renderModel(model));
      }, TICK_MS);
    } else if (!this._running.size && this._timer !== null) {
      window.clearInterval(this._timer);
      this._timer = null;
    }
  }

  private _view(model: ICellModel): IStatusView | null {
    const started = this._running.get(model);
    if (started !== undefined) {
      return describeRunning((Date.now() - started) / 1000);
    }
    const record = model.isDisposed ? null : asRecord(model.getMetadata(METADATA_KEY));
    return record ? describeRecord(record) : null;
  }

  private _renderModel(model: ICellModel): void {
    const widget = this._panel.content.widgets.find(cell => cell.model === model);
    if (widget) {
      this._render(widget);
    }
  }

  private _render(widget: Cell): void {
    const footer = widget.node.querySelector(':scope > .jp-Cell-footer');
    if (widget.isDisposed || !footer) {
      return;
    }
    let node = footer.querySelector<HTMLElement>(`:scope > .${STATUS_CLASS}`);
    const view = this._view(widget.model);
    footer.classList.toggle(FOOTER_CLASS, view !== null);
    if (!view) {
      node?.remove();
      return;
    }
    if (!node) {
      node = document.createElement('div');
      node.className = STATUS_CLASS;
      footer.appendChild(node);
    }
    node.textContent = view.text;
    node.title = view.title;
    node.dataset.kind = view.kind;
  }

  private readonly _panel: NotebookPanel;
  private _kernel: Kernel.IKernelConnection | null = null;
  /** execute_request msg_id -> the cell it runs */
  private readonly _requests = new Map<string, ICellModel>();
  /** cell -> Date.now() when its execute_input arrived */
  private readonly _running = new Map<ICellModel, number>();
  private readonly _watched = new WeakSet<ICellModel>();
  private _timer: number | null = null;
}

/** The input boxes of a cell that wait for an answer. */
function openInputs(cell: Cell): CodeCell['outputArea']['widgets'][number][] {
  if (cell.isDisposed || cell.model.type !== 'code') {
    return [];
  }
  return [...(cell as CodeCell).outputArea.widgets].filter(
    child => child.hasClass(STDIN_ITEM_CLASS) && !child.hasClass(STDIN_ANSWERED_CLASS)
  );
}
