// package.json must agree with the code and with docs/lsp.md.
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { DEFAULTS, SERVER_KEYS } from '../../src/logic/settings';

// Compiled to out/test/unit/: the extension folder is three levels up.
const EXT = path.resolve(__dirname, '..', '..', '..');
const pkg = JSON.parse(fs.readFileSync(path.join(EXT, 'package.json'), 'utf8'));
const props: Record<string, { default?: unknown; enum?: unknown[] }> = pkg.contributes.configuration.properties;

test('every server setting is contributed with the server default', () => {
  for (const key of SERVER_KEYS) {
    const p = props[`fusionlens.${key}`];
    assert.ok(p, `fusionlens.${key} missing from package.json`);
    assert.deepEqual(p.default, DEFAULTS[key], `default of fusionlens.${key}`);
  }
  assert.ok(props['fusionlens.pythonPath']);
  assert.deepEqual(props['fusionlens.compileTrigger'].enum, ['onOpen', 'onSave', 'manual']);
  assert.deepEqual(props['fusionlens.device'].enum, ['auto', 'cpu', 'cuda']);
});

test('engines.vscode matches @types/vscode and vscode-languageclient', () => {
  const lock = JSON.parse(fs.readFileSync(path.join(EXT, 'package-lock.json'), 'utf8'));
  const engine: string = pkg.engines.vscode;
  const types: string = lock.packages['node_modules/@types/vscode'].version;
  const lc = JSON.parse(fs.readFileSync(path.join(EXT, 'node_modules', 'vscode-languageclient', 'package.json'), 'utf8'));
  const mm = (v: string) => v.replace(/^[\^~]/, '').split('.').slice(0, 2).join('.');
  assert.equal(mm(types), mm(engine), '@types/vscode must not be newer than engines.vscode');
  assert.ok(mm(lc.engines.vscode) <= mm(engine), `vscode-languageclient needs ${lc.engines.vscode}`);
});

test('limited support in untrusted workspaces; interpreter settings are restricted', () => {
  const u = pkg.capabilities.untrustedWorkspaces;
  assert.equal(u.supported, 'limited');
  assert.ok(u.restrictedConfigurations.includes('fusionlens.pythonPath'));
  assert.ok(u.restrictedConfigurations.includes('fusionlens.allowExecution'));
  assert.ok(u.restrictedConfigurations.includes('fusionlens.cacheFolder'));
});

test('activates on Python files, and to restore the report panel after a reload', () => {
  assert.ok(pkg.activationEvents.includes('onLanguage:python'));
  const panel = fs.readFileSync(path.join(EXT, 'src', 'reportPanel.ts'), 'utf8');
  const viewType = /REPORT_VIEW_TYPE = '([\w.]+)'/.exec(panel)?.[1];
  assert.ok(viewType, 'no REPORT_VIEW_TYPE in reportPanel.ts');
  assert.ok(pkg.activationEvents.includes(`onWebviewPanel:${viewType}`), `onWebviewPanel:${viewType} missing`);
  const extension = fs.readFileSync(path.join(EXT, 'src', 'extension.ts'), 'utf8');
  assert.match(extension, /registerWebviewPanelSerializer\(REPORT_VIEW_TYPE/);
});

test('every command the code registers is contributed, and every menu entry exists', () => {
  // Commands are registered with reg('...') in the vscode-facing modules (src/*.ts).
  const srcDir = path.join(EXT, 'src');
  const src = fs.readdirSync(srcDir).filter((f) => f.endsWith('.ts')).map((f) => fs.readFileSync(path.join(srcDir, f), 'utf8')).join('\n');
  const registered = [...src.matchAll(/reg\('([\w.]+)'/g)].map((m) => m[1]).filter((c) => c !== 'fusionlens.statusClicked');
  const contributed = new Set(pkg.contributes.commands.map((c: { command: string }) => c.command));
  assert.ok(registered.length >= 8);
  for (const c of registered) {
    assert.ok(contributed.has(c), `${c} is registered but not contributed`);
  }
  for (const c of contributed) {
    assert.ok(registered.includes(c as string), `${c} is contributed but not registered`);
  }
  // The server's own command ids must stay free: vscode-languageclient registers them.
  for (const c of ['fusionlens.compile', 'fusionlens.showTrace', 'fusionlens.showKernel', 'fusionlens.clearCache', 'fusionlens.exportRepro', 'fusionlens.reportHtml']) {
    assert.ok(!contributed.has(c) && !registered.includes(c), `${c} belongs to the server`);
  }
  for (const entries of Object.values(pkg.contributes.menus) as Array<Array<{ command: string }>>) {
    for (const e of entries) {
      assert.ok(contributed.has(e.command), `menu entry ${e.command} is not a command`);
    }
  }
});

test('Show Report is in the command palette and the editor title of Python files', () => {
  const cmd = pkg.contributes.commands.find((c: { command: string }) => c.command === 'fusionlens.showReport');
  assert.equal(`${cmd.category}: ${cmd.title}`, 'FusionLens: Show Report');
  assert.ok(cmd.icon, 'an editor title button needs an icon');
  const palette = pkg.contributes.menus.commandPalette.find((e: { command: string }) => e.command === 'fusionlens.showReport');
  assert.equal(palette.when, 'editorLangId == python');
  const title = pkg.contributes.menus['editor/title'].find((e: { command: string }) => e.command === 'fusionlens.showReport');
  assert.match(title.when, /editorLangId == python/);
  assert.match(title.group, /^navigation/);
});
