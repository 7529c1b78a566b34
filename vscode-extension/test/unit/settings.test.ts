import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { answerConfigurationItem, DEFAULTS, SERVER_KEYS, toServerSettings } from '../../src/logic/settings';

const from = (o: Record<string, unknown>) => (k: string) => o[k];

test('defaults match docs/lsp.md', () => {
  assert.deepEqual(toServerSettings(from({}), true), {
    allowExecution: true,
    compileTrigger: 'onOpen',
    executors: null,
    benchmarkRepeats: 20,
    device: 'auto',
    timeoutSeconds: 60,
    inlayHints: true,
    debounceMs: 300,
    cacheFolder: null,
    cacheEntries: 100,
    targetGpu: 'H100',
  });
  assert.deepEqual(SERVER_KEYS.sort(), Object.keys(DEFAULTS).sort());
});

test('values are passed through', () => {
  const s = toServerSettings(
    from({ allowExecution: false, compileTrigger: 'manual', executors: ['triton', 'torch'], benchmarkRepeats: 5, device: 'cuda', timeoutSeconds: 12.5, inlayHints: false, debounceMs: 0, cacheFolder: '/c', cacheEntries: 7, targetGpu: 'L4', pythonPath: '/x' }),
    true,
  );
  assert.deepEqual(s, { allowExecution: false, compileTrigger: 'manual', executors: ['triton', 'torch'], benchmarkRepeats: 5, device: 'cuda', timeoutSeconds: 12.5, inlayHints: false, debounceMs: 0, cacheFolder: '/c', cacheEntries: 7, targetGpu: 'L4' });
  assert.ok(!('pythonPath' in s), 'pythonPath is the extension\'s, not the server\'s');
});

test('an untrusted workspace never allows execution', () => {
  assert.equal(toServerSettings(from({ allowExecution: true }), false).allowExecution, false);
  assert.equal(toServerSettings(from({}), false).allowExecution, false);
});

test('bad values fall back to defaults', () => {
  const s = toServerSettings(from({ compileTrigger: 'always', executors: [], benchmarkRepeats: -3, device: 'tpu', timeoutSeconds: 'x', inlayHints: 'yes' }), true);
  assert.equal(s.compileTrigger, 'onOpen');
  assert.equal(s.executors, null);
  assert.equal(s.benchmarkRepeats, 20);
  assert.equal(s.device, 'auto');
  assert.equal(s.timeoutSeconds, 60);
  assert.equal(s.inlayHints, true);
  assert.equal(toServerSettings(from({ targetGpu: 'TPU v5' }), true).targetGpu, 'H100');
  assert.equal(toServerSettings(from({ debounceMs: -5, cacheFolder: '  ' }), true).debounceMs, 300);
  assert.equal(toServerSettings(from({ cacheFolder: '  ' }), true).cacheFolder, null);
  assert.deepEqual(toServerSettings(from({ executors: [' triton ', 3, ''] }), true).executors, ['triton']);
  assert.equal(toServerSettings(from({ benchmarkRepeats: 2.6 }), true).benchmarkRepeats, 3);
  assert.equal(toServerSettings(from({ cacheEntries: 0 }), true).cacheEntries, 100);
  assert.equal(toServerSettings(from({ cacheEntries: 1e9 }), true).cacheEntries, 100_000);
});

test('workspace/configuration answers', () => {
  const s = toServerSettings(from({ device: 'cpu' }), true);
  assert.deepEqual(answerConfigurationItem('fusionlens', s), s);
  assert.equal(answerConfigurationItem('fusionlens.device', s), 'cpu');
  assert.equal(answerConfigurationItem('fusionlens.nope', s), null);
  assert.equal(answerConfigurationItem('python', s), undefined);
  assert.equal(answerConfigurationItem(undefined, s), undefined);
});
