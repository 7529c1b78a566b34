import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as path from 'path';
import { chooseInterpreter, expandPath, SERVER_ARGS, serverEnv } from '../../src/logic/interpreter';

const ws = ['/home/u/proj'];
const home = '/home/u';

test('fusionlens.pythonPath wins over everything', () => {
  const c = chooseInterpreter({
    trusted: true,
    fusionlensPythonPath: '/opt/py/bin/python',
    pythonExtensionPath: '/usr/bin/python3.12',
    defaultInterpreterPath: '/usr/bin/python3.10',
    workspaceFolders: ws,
    homeDir: home,
  });
  assert.deepEqual([c.command, c.source], ['/opt/py/bin/python', 'fusionlens.pythonPath']);
});

test('the Python extension interpreter comes next', () => {
  const c = chooseInterpreter({ trusted: true, fusionlensPythonPath: '', pythonExtensionPath: '/home/u/proj/.venv/bin/python', workspaceFolders: ws, homeDir: home });
  assert.deepEqual([c.command, c.source], ['/home/u/proj/.venv/bin/python', 'Python extension']);
});

test('python.defaultInterpreterPath, but not its default "python"', () => {
  let c = chooseInterpreter({ trusted: true, defaultInterpreterPath: '${workspaceFolder}/.venv/bin/python', workspaceFolders: ws, homeDir: home });
  assert.deepEqual([c.command, c.source], ['/home/u/proj/.venv/bin/python', 'python.defaultInterpreterPath']);
  c = chooseInterpreter({ trusted: true, defaultInterpreterPath: 'python', workspaceFolders: ws, homeDir: home, platform: 'linux' });
  assert.deepEqual([c.command, c.source], ['python3', 'default']);
});

test('falls back to python3 (python on Windows)', () => {
  assert.equal(chooseInterpreter({ trusted: true, workspaceFolders: [], platform: 'linux' }).command, 'python3');
  assert.equal(chooseInterpreter({ trusted: true, workspaceFolders: [], platform: 'win32' }).command, 'python');
});

test('untrusted: an interpreter inside the workspace is never started', () => {
  const c = chooseInterpreter({
    trusted: false,
    pythonExtensionPath: '/home/u/proj/.venv/bin/python',
    defaultInterpreterPath: '/usr/local/bin/python3.11',
    workspaceFolders: ws,
    homeDir: home,
  });
  assert.deepEqual([c.command, c.source], ['/usr/local/bin/python3.11', 'python.defaultInterpreterPath']);
  assert.equal(c.skipped.length, 1);
  assert.match(c.skipped[0], /untrusted/);
  const d = chooseInterpreter({ trusted: false, fusionlensPythonPath: '.venv/bin/python', workspaceFolders: ws, homeDir: home, platform: 'linux' });
  assert.equal(d.command, 'python3');
});

test('untrusted: interpreters outside the workspace are fine', () => {
  const c = chooseInterpreter({ trusted: false, pythonExtensionPath: '/opt/conda/bin/python', workspaceFolders: ws, homeDir: home });
  assert.equal(c.command, '/opt/conda/bin/python');
});

test('expandPath: ~, ${userHome}, ${workspaceFolder}, relative paths, bare commands', () => {
  assert.equal(expandPath('~/venv/bin/python', ws, home), '/home/u/venv/bin/python');
  assert.equal(expandPath('${userHome}/py', ws, home), '/home/u/py');
  assert.equal(expandPath('${workspaceFolder}/.venv/bin/python', ws, home), '/home/u/proj/.venv/bin/python');
  assert.equal(expandPath('.venv/bin/python', ws, home), '/home/u/proj/.venv/bin/python');
  assert.equal(expandPath('python3.11', ws, home), 'python3.11');
  assert.equal(expandPath('  /usr/bin/python3 ', ws, home), '/usr/bin/python3');
});

test('the server starts with -P: the workspace it runs in never shadows its modules', () => {
  assert.deepEqual(SERVER_ARGS, ['-P', '-m', 'lsp_server']);
});

test('serverEnv: a trusted checkout goes on PYTHONPATH (not the cwd); the probe gets PYTHONSAFEPATH', () => {
  const base = { PATH: '/bin', PYTHONPATH: '/elsewhere' };
  const env = serverEnv(base, '/home/u/fusionlens');
  assert.equal(env.PYTHONPATH, ['/home/u/fusionlens', '/elsewhere'].join(path.delimiter));
  assert.equal(env.PYTHONUNBUFFERED, '1');
  assert.equal(env.PYTHONSAFEPATH, undefined);
  assert.equal(serverEnv(base, undefined).PYTHONPATH, '/elsewhere');
  assert.equal(serverEnv({ PATH: '/bin' }, undefined).PYTHONPATH, undefined);
  assert.equal(serverEnv(base, undefined, true).PYTHONSAFEPATH, '1');
  assert.equal(base.PYTHONPATH, '/elsewhere'); // not changed
});
