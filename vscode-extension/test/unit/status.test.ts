import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { deviceLabel, statusView } from '../../src/logic/status';
import type { StatusParams } from '../../src/logic/protocol';

const st = (p: Partial<StatusParams>): StatusParams => ({ state: 'idle', device: 'cpu', message: '', speedup: null, uri: null, ...p });
const base = { server: 'running' as const, trusted: true, allowExecution: true };

test('device labels', () => {
  assert.equal(deviceLabel('cpu'), 'CPU');
  assert.equal(deviceLabel('CPU (x86_64, 2 threads)'), 'CPU');
  assert.equal(deviceLabel('NVIDIA H200'), 'H200');
  assert.equal(deviceLabel('cuda:0 (NVIDIA GeForce RTX 4090)'), 'RTX 4090');
  assert.equal(deviceLabel(''), '');
  assert.equal(deviceLabel('unknown'), '');
  assert.equal(deviceLabel(undefined), '');
});

test('idle shows device and last speedup', () => {
  const v = statusView({ ...base, last: st({ speedup: 1.834 }), lastSpeedup: 1.834 });
  assert.equal(v.text, '$(zap) FusionLens · CPU · 1.83x vs eager');
  assert.equal(v.kind, 'normal');
  assert.equal(v.action, 'showRegions');
});

test('the last speedup survives a compile that has none', () => {
  const v = statusView({ ...base, last: st({ state: 'idle', speedup: null, device: 'NVIDIA H200' }), lastSpeedup: 2.5 });
  assert.equal(v.text, '$(zap) FusionLens · H200 · 2.50x vs eager');
});

test('compiling shows a spinner and the progress message', () => {
  const v = statusView({ ...base, last: st({ state: 'compiling', message: 'gpt_block_example: tracing' }) });
  assert.match(v.text, /^\$\(sync~spin\) FusionLens · CPU · compiling: gpt_block_example: tracing$/);
  const again = statusView({ ...base, last: st({ state: 'compiling', message: 'compiling and benchmarking mlp_example' }) });
  assert.equal(again.text, '$(sync~spin) FusionLens · CPU · compiling and benchmarking mlp_example');
  const long = statusView({ ...base, last: st({ state: 'compiling', message: 'x'.repeat(200) }) });
  assert.ok(long.text.length < 100);
  assert.match(long.tooltip, /x{200}/);
});

test('failed is an error that opens the log', () => {
  const v = statusView({ ...base, last: st({ state: 'failed', message: 'boom' }) });
  assert.equal(v.text, '$(error) FusionLens · CPU · failed');
  assert.equal(v.kind, 'error');
  assert.equal(v.action, 'showLog');
  assert.match(v.tooltip, /boom/);
});

test('untrusted says restricted, whatever the server reports', () => {
  const v = statusView({ ...base, trusted: false, last: st({ state: 'idle', speedup: 3 }) });
  assert.match(v.text, /restricted/);
  assert.equal(v.kind, 'warning');
  assert.equal(v.action, 'manageTrust');
  assert.match(v.tooltip, /not trusted/);
});

test('execution turned off is said', () => {
  assert.match(statusView({ ...base, allowExecution: false }).text, /execution off/);
});

test('server states', () => {
  assert.match(statusView({ ...base, server: 'starting' }).text, /loading~spin/);
  assert.equal(statusView({ ...base, server: 'missing' }).kind, 'error');
  assert.equal(statusView({ ...base, server: 'missing' }).action, 'restart');
  assert.match(statusView({ ...base, server: 'stopped' }).text, /stopped/);
});
