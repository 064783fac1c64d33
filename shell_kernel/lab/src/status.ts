/**
 * What a shell_kernel cell's result is and how it reads: pure functions of
 * the execute_reply metadata, so they can be tested without JupyterLab.
 */

/** The key of the reply metadata, and of the cell metadata it is copied to. */
export const METADATA_KEY = 'shell_kernel';

/**
 * One cell's record: the `shell_kernel` metadata of its execute_reply, as
 * `python -m shell_kernel run` stores it in `cell.metadata.shell_kernel`
 * (exit_code, duration_s, cwd, host, and whatever else the reply carries).
 */
export interface ICellRecord {
  exit_code: number | null;
  duration_s?: number;
  cwd?: string;
  host?: string;
  interrupted?: boolean;
  shell_restarted?: boolean;
  /** The kernel left a named session while this cell ran there (it goes on). */
  detached?: boolean;
  session?: string;
  output_file?: string;
  /** The command that set the non-zero status, and its line in the cell. */
  command?: string;
  line?: number;
  [key: string]: unknown;
}

export type StatusKind =
  | 'ok'
  | 'failed'
  | 'interrupted'
  | 'restarted'
  | 'detached'
  | 'running';

export interface IStatusView {
  kind: StatusKind;
  /** The short line shown under the cell. */
  text: string;
  /** The details shown on hover. */
  title: string;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * A stored or received shell_kernel dict as a record (exit_code defaulting to
 * null, like runner.CellRecorder), or null when it is not a dict.
 */
export function asRecord(value: unknown): ICellRecord | null {
  if (!isObject(value)) {
    return null;
  }
  const record: ICellRecord = { exit_code: null, ...value } as ICellRecord;
  if (typeof record.exit_code !== 'number') {
    record.exit_code = null;
  }
  return record;
}

/**
 * The record to store for an execute_reply's metadata, or null when the
 * reply carries no shell_kernel metadata (another kernel's reply) or is for
 * a cell that never ran (aborted: queued behind a failed cell of Run All).
 */
export function recordFromReply(replyMetadata: unknown): ICellRecord | null {
  if (!isObject(replyMetadata) || replyMetadata.status === 'aborted') {
    return null;
  }
  return asRecord(replyMetadata[METADATA_KEY]);
}

/** Whether two JSON values are equal (so that an unchanged record is not rewritten). */
export function sameJSON(a: unknown, b: unknown): boolean {
  if (a === b) {
    return true;
  }
  if (Array.isArray(a) || Array.isArray(b)) {
    return (
      Array.isArray(a) &&
      Array.isArray(b) &&
      a.length === b.length &&
      a.every((item, i) => sameJSON(item, b[i]))
    );
  }
  if (!isObject(a) || !isObject(b)) {
    return false;
  }
  const keys = Object.keys(a);
  return (
    keys.length === Object.keys(b).length &&
    keys.every(key => key in b && sameJSON(a[key], b[key]))
  );
}

/** "0.02 s", "3.4 s", "12 s", "2 min 05 s", "1 h 02 min". */
export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) {
    return '';
  }
  if (seconds < 1) {
    return `${seconds.toFixed(2)} s`;
  }
  if (seconds < 10) {
    return `${seconds.toFixed(1)} s`;
  }
  if (seconds < 60) {
    return `${Math.floor(seconds)} s`;
  }
  const whole = Math.floor(seconds);
  if (whole < 3600) {
    const secs = String(whole % 60).padStart(2, '0');
    return `${Math.floor(whole / 60)} min ${secs} s`;
  }
  const mins = String(Math.floor((whole % 3600) / 60)).padStart(2, '0');
  return `${Math.floor(whole / 3600)} h ${mins} min`;
}

function remoteHost(host: unknown): string | null {
  return typeof host === 'string' && host && host !== 'local' ? host : null;
}

function joined(parts: (string | null | undefined)[]): string {
  return parts.filter(part => part).join(' · ');
}

/** How a finished cell's record reads. */
export function describeRecord(record: ICellRecord): IStatusView {
  const code = record.exit_code;
  const duration =
    typeof record.duration_s === 'number' ? formatDuration(record.duration_s) : '';
  const host = remoteHost(record.host);
  let kind: StatusKind;
  let label: string;
  const session = typeof record.session === 'string' ? record.session : 'its session';
  if (record.detached) {
    kind = 'detached';
    label = 'detached';
  } else if (record.shell_restarted) {
    kind = 'restarted';
    label = code === null ? 'shell restarted' : `shell restarted (exit ${code})`;
  } else if (record.interrupted) {
    kind = 'interrupted';
    label = code === null ? 'interrupted' : `interrupted (exit ${code})`;
  } else if (code === 0) {
    kind = 'ok';
    label = '0';
  } else {
    kind = 'failed';
    label = code === null ? 'no exit status' : `exit ${code}`;
  }
  const title: string[] = [];
  if (record.detached && record.interrupted) {
    // A restart interrupts, then shuts down: a named session's cell is
    // interrupted only when no shutdown follows within half a second.
    title.push(`The kernel detached from session ${session} while this cell ran, just ` +
      'after an interrupt, which reaches a named session\'s cell only when no shutdown ' +
      `follows at once: the cell may still be running in session ${session}. A kernel ` +
      `attached to ${session} shows the rest of its output and its exit status.`);
  } else if (record.detached) {
    title.push(`The kernel detached from session ${session} while this cell ran; the cell ` +
      `goes on running there. A kernel attached to ${session} shows the rest of its output ` +
      'and its exit status.');
  } else if (code === null) {
    title.push('The shell reported no exit status for this cell.');
  } else {
    title.push(`Exit status ${code}`);
  }
  if (typeof record.command === 'string' && record.command) {
    const where = typeof record.line === 'number' ? ` (line ${record.line})` : '';
    title.push(`set by: ${record.command}${where}`);
  }
  if (record.interrupted && !record.detached) {
    title.push('The cell was interrupted.');
  }
  if (record.shell_restarted) {
    title.push('The shell ended during this cell and a new one was started: ' +
      'cwd, variables and functions were reset.');
  }
  if (duration) {
    title.push(`duration: ${duration}`);
  }
  if (typeof record.cwd === 'string') {
    title.push(`cwd: ${record.cwd}`);
  }
  if (typeof record.host === 'string') {
    title.push(`host: ${record.host}`);
  }
  if (typeof record.output_file === 'string') {
    title.push(`full output saved to: ${record.output_file}`);
  }
  return { kind, text: joined([label, duration, host]), title: title.join('\n') };
}

/** How a running cell reads, elapsed_s after it started. */
export function describeRunning(elapsed_s: number): IStatusView {
  const elapsed = formatDuration(Math.max(0, elapsed_s));
  return {
    kind: 'running',
    text: joined(['running', elapsed]),
    title: `Running for ${elapsed}`
  };
}
