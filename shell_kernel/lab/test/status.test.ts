import { describe, expect, it } from 'vitest';

import {
  asRecord,
  describeRecord,
  describeRunning,
  formatDuration,
  recordFromReply,
  sameJSON
} from '../src/status';

describe('recordFromReply', () => {
  it('copies the shell_kernel dict of the reply metadata', () => {
    const meta = {
      started: '2026-01-01T00:00:00Z',
      shell_kernel: { exit_code: 2, duration_s: 0.25, cwd: '/srv', host: 'db1', line: 3 }
    };
    const record = recordFromReply(meta);
    expect(record).toEqual({ exit_code: 2, duration_s: 0.25, cwd: '/srv', host: 'db1', line: 3 });
    expect(record).not.toBe(meta.shell_kernel);
  });

  it('is null for replies of other kernels', () => {
    expect(recordFromReply({ started: 'x' })).toBeNull();
    expect(recordFromReply({ shell_kernel: 'x' })).toBeNull();
    expect(recordFromReply(undefined)).toBeNull();
    expect(recordFromReply(null)).toBeNull();
  });

  it('is null for a cell that never ran (aborted by Run All after a failure)', () => {
    // ipykernel's abort reply: status "aborted", and whatever finish_metadata added.
    expect(recordFromReply({ status: 'aborted', shell_kernel: { host: 'local' } })).toBeNull();
    expect(recordFromReply({ status: 'aborted' })).toBeNull();
  });

  it('gives a missing or malformed exit_code as null, as run does', () => {
    expect(recordFromReply({ shell_kernel: { duration_s: 1 } })).toEqual({
      exit_code: null,
      duration_s: 1
    });
    expect(asRecord({ exit_code: '1' })?.exit_code).toBeNull();
    expect(asRecord([1])).toBeNull();
  });
});

describe('sameJSON', () => {
  it('compares by value, whatever the key order', () => {
    expect(sameJSON({ a: 1, b: [1, { c: 2 }] }, { b: [1, { c: 2 }], a: 1 })).toBe(true);
    expect(sameJSON({ a: 1 }, { a: 1, b: undefined })).toBe(false);
    expect(sameJSON({ a: 1 }, { a: 2 })).toBe(false);
    expect(sameJSON([1, 2], [2, 1])).toBe(false);
    expect(sameJSON(undefined, { a: 1 })).toBe(false);
    expect(sameJSON(null, null)).toBe(true);
  });
});

describe('formatDuration', () => {
  it.each([
    [0, '0.00 s'],
    [0.0234, '0.02 s'],
    [3.45, '3.5 s'],
    [42.9, '42 s'],
    [125, '2 min 05 s'],
    [3725, '1 h 02 min']
  ])('%s s reads %s', (seconds, text) => {
    expect(formatDuration(seconds)).toBe(text);
  });

  it('is empty for what is not a duration', () => {
    expect(formatDuration(-1)).toBe('');
    expect(formatDuration(NaN)).toBe('');
  });
});

describe('describeRecord', () => {
  it('is quiet for success on this machine', () => {
    const view = describeRecord({ exit_code: 0, duration_s: 0.02, cwd: '/tmp', host: 'local' });
    expect(view.kind).toBe('ok');
    expect(view.text).toBe('0 · 0.02 s');
    expect(view.title).toContain('cwd: /tmp');
  });

  it('names the host of an SSH kernel', () => {
    const view = describeRecord({ exit_code: 0, duration_s: 1.5, host: 'me@db1:2222' });
    expect(view.text).toBe('0 · 1.5 s · me@db1:2222');
  });

  it('marks a non-zero status and names the failing command on hover', () => {
    const view = describeRecord({
      exit_code: 2,
      duration_s: 0.01,
      host: 'local',
      command: 'ls /nope',
      line: 2
    });
    expect(view.kind).toBe('failed');
    expect(view.text).toBe('exit 2 · 0.01 s');
    expect(view.title).toContain('Exit status 2');
    expect(view.title).toContain('set by: ls /nope (line 2)');
  });

  it('marks an interruption', () => {
    const view = describeRecord({ exit_code: 130, duration_s: 2, interrupted: true });
    expect(view.kind).toBe('interrupted');
    expect(view.text).toBe('interrupted (exit 130) · 2.0 s');
  });

  it('marks a restarted shell above everything else', () => {
    const view = describeRecord({
      exit_code: 137,
      duration_s: 0.5,
      interrupted: true,
      shell_restarted: true
    });
    expect(view.kind).toBe('restarted');
    expect(view.text).toBe('shell restarted (exit 137) · 0.50 s');
    expect(view.title).toContain('a new one was started');
  });

  it('says that the kernel detached from a named session that runs the cell on', () => {
    const view = describeRecord({
      exit_code: null,
      duration_s: 3,
      detached: true,
      session: 'migrate',
      shell_restarted: false
    });
    expect(view.kind).toBe('detached');
    expect(view.text).toBe('detached · 3.0 s');
    expect(view.title).toContain('detached from session migrate');
    expect(view.title).not.toContain('no exit status');
  });

  it('tells a coherent story of a detached cell that an interrupt was sent to', () => {
    // A restart sends an interrupt, then the shutdown that detaches the kernel.
    const view = describeRecord({
      exit_code: null,
      duration_s: 3,
      detached: true,
      interrupted: true,
      session: 'migrate'
    });
    expect(view.kind).toBe('detached');
    expect(view.title).not.toContain('The cell was interrupted');
    expect(view.title).not.toContain('goes on running there');
    expect(view.title).toContain('may still be running in session migrate');
    expect(view.title).toContain('shows the rest of its output and its exit status');
  });

  it('says when there is no status at all', () => {
    const view = describeRecord({ exit_code: null, duration_s: 0.1 });
    expect(view.kind).toBe('failed');
    expect(view.text).toBe('no exit status · 0.10 s');
  });

  it('points to a spilled output file', () => {
    const view = describeRecord({ exit_code: 0, output_file: '/w/out.txt' });
    expect(view.title).toContain('/w/out.txt');
  });
});

describe('describeRunning', () => {
  it('shows the elapsed time', () => {
    expect(describeRunning(3.21)).toMatchObject({ kind: 'running', text: 'running · 3.2 s' });
    expect(describeRunning(-0.1).text).toBe('running · 0.00 s');
  });
});
