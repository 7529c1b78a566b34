import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { classifyProbe, describeProblem, installCommand, PROBE_SCRIPT } from '../../src/logic/serverCheck';

const raw = (p: Partial<Parameters<typeof classifyProbe>[0]>) => ({ exitCode: 1, stdout: '', stderr: '', ...p });

test('ok', () => {
  assert.deepEqual(classifyProbe(raw({ exitCode: 0, stdout: 'FUSIONLENS-OK 3.11.7\n' })), { kind: 'ok', version: '3.11.7' });
});

test('python missing', () => {
  const o = classifyProbe(raw({ errorCode: 'ENOENT', errorMessage: 'spawn python9 ENOENT', exitCode: null }));
  assert.equal(o.kind, 'python-not-found');
  const p = describeProblem(o, 'python9', 'fusionlens.pythonPath')!;
  assert.match(p.message, /cannot run Python "python9"/);
  assert.match(p.message, /fusionlens.pythonPath/);
  assert.equal(p.install, undefined);
});

test('lsp_server not installed: the message carries the install command', () => {
  const o = classifyProbe(raw({ stderr: "Traceback (most recent call last):\n  File \"<string>\", line 4\nModuleNotFoundError: No module named 'lsp_server'\n" }));
  assert.equal(o.kind, 'not-installed');
  const p = describeProblem(o, '/usr/bin/python3', 'default')!;
  assert.equal(p.install, '/usr/bin/python3 -m pip install fusionlens');
  assert.match(p.message, /not installed.*pip install fusionlens/);
  const repo = describeProblem(o, '/usr/bin/python3', 'default', '/home/u/fusion lens')!;
  assert.equal(repo.install, '/usr/bin/python3 -m pip install -e "/home/u/fusion lens"');
});

test('a missing dependency of the server', () => {
  const o = classifyProbe(raw({ stderr: "ModuleNotFoundError: No module named 'lsprotocol'" }));
  assert.deepEqual([o.kind, (o as { module: string }).module], ['dependency-missing', 'lsprotocol']);
  assert.match(describeProblem(o, 'python3', 'default')!.message, /cannot import "lsprotocol"/);
  assert.equal(classifyProbe(raw({ stderr: "No module named 'pygls.server'" })).kind, 'dependency-missing');
});

test('other failures', () => {
  const old = classifyProbe(raw({ stdout: 'FUSIONLENS-OLD 3.10.4', exitCode: 3 }));
  assert.equal(old.kind, 'python-too-old');
  assert.match(describeProblem(old, 'python3', 'default')!.message, /needs Python 3\.11 or newer.*3\.10\.4/);
  assert.equal(classifyProbe(raw({ timedOut: true })).kind, 'timeout');
  assert.equal(classifyProbe(raw({ exitCode: 127, stderr: 'pyenv: python3.9: command not found' })).kind, 'python-not-found');
  const o = classifyProbe(raw({ stderr: 'SyntaxError: invalid syntax' }));
  assert.equal(o.kind, 'import-failed');
  assert.match(describeProblem(o, 'python3', 'default')!.message, /SyntaxError/);
  assert.equal(describeProblem({ kind: 'ok', version: '3.11' }, 'p', 's'), undefined);
});

test('installCommand quotes what needs quoting', () => {
  assert.equal(installCommand('python3'), 'python3 -m pip install fusionlens');
  assert.equal(installCommand('C:\\Program Files\\Python\\python.exe'), '"C:\\Program Files\\Python\\python.exe" -m pip install fusionlens');
});

test('the probe script runs under a real python', (t) => {
  let out: string;
  try {
    out = execFileSync('python3', ['-c', PROBE_SCRIPT.replace(/lsp_server/g, 'json')], { encoding: 'utf8' });
  } catch (e) {
    t.skip('no python3');
    return;
  }
  assert.equal(classifyProbe(raw({ exitCode: 0, stdout: out })).kind, 'ok');
  let err = '';
  try {
    execFileSync('python3', ['-c', PROBE_SCRIPT.replace(/lsp_server/g, 'no_such_module_xyz')], { encoding: 'utf8', stdio: 'pipe' });
  } catch (e) {
    err = String((e as { stderr: string }).stderr);
  }
  assert.match(err, /No module named 'no_such_module_xyz'/);
});
