// End-to-end test: the packaged extension in a real VS Code (code-server) in a real browser
// (Debian chromium driven by playwright-core), against the real `python -m lsp_server`.
//
// Environment (ci.sh sets these):
//   E2E_NODE            node >= 24 that runs code-server            (required)
//   E2E_CODE_SERVER     folder holding node_modules/code-server       (required)
//   E2E_VSIX            the .vsix to install      (default: dist/fusionlens.vsix)
//   E2E_PYTHON          python with lsp_server importable (default: python3)
//   E2E_OUT             screenshots and logs      (default: test-output/e2e)
//   E2E_FAKE_COMPILER=1 use tests/lsp/fake_compile.py instead of the real compiler
//   E2E_TIMEOUT_S       compile wait              (default: 300)
//   E2E_CHROMIUM        chromium binary           (default: /usr/bin/chromium)
//   E2E_KEEP=1          keep the temp HOME/user-data/workspace folders
//   E2E_PHASES          comma list: trusted,untrusted,missing,pyext (default: all)
// Nothing asserts on wall time; waits are generous upper bounds.

import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const EXT_DIR = path.resolve(HERE, '..', '..');
const REPO = path.resolve(EXT_DIR, '..');
const NODE = process.env.E2E_NODE;
const CS_DIR = process.env.E2E_CODE_SERVER;
const VSIX = path.resolve(process.env.E2E_VSIX ?? path.join(EXT_DIR, 'dist', 'fusionlens.vsix'));
const PYTHON = process.env.E2E_PYTHON ?? 'python3';
const OUT = path.resolve(process.env.E2E_OUT ?? path.join(EXT_DIR, 'test-output', 'e2e'));
// E2E_FAKE_COMPILER=1 (or module:function): the server's stand-in compiler from tests/lsp.
const FAKE = (() => {
  const v = process.env.E2E_FAKE_COMPILER;
  if (!v || v === '0') {
    return null;
  }
  if (v.includes(':')) {
    return v;
  }
  const dir = path.join(REPO, 'tests', 'lsp');
  const file = fs.existsSync(dir) ? fs.readdirSync(dir).find((f) => /fake_compile\.py$/.test(f)) : undefined;
  return file ? `${file.replace(/\.py$/, '')}:compile_target` : null;
})();
const COMPILE_TIMEOUT = Number(process.env.E2E_TIMEOUT_S ?? 300) * 1000;
const CHROMIUM = process.env.E2E_CHROMIUM ?? '/usr/bin/chromium';
const PHASES = (process.env.E2E_PHASES ?? 'trusted,untrusted,missing,pyext').split(',').map((s) => s.trim());
const TARGET = 'gpt_block_example';
// Lines (1-based) of the example, read from the file so edits to it do not break the test.
const EXAMPLE_LINES = (() => {
  const src = fs.readFileSync(path.join(REPO, 'examples', 'gpt_block.py'), 'utf8').split('\n');
  const def = src.findIndex((l) => l.startsWith(`def ${TARGET}(`));
  if (def < 1) {
    throw new Error(`examples/gpt_block.py has no def ${TARGET}`);
  }
  return { decorator: def, body: def + 2 }; // 0-based def == 1-based decorator line
})();
// mlp.py: the report panel follows the editor to it; a line inside mlp_example (1-based).
const MLP_BODY = (() => {
  const src = fs.readFileSync(path.join(REPO, 'examples', 'mlp.py'), 'utf8').split('\n');
  const def = src.findIndex((l) => l.startsWith('def mlp_example('));
  if (def < 1) {
    throw new Error('examples/mlp.py has no def mlp_example');
  }
  return def + 2;
})();
// An inlay hint reads like "R3 · torch · 12 µs" or "R0+R20 · torch" (the editor renders
// spaces as no-break spaces, which \s matches).
const HINT = /\bR?\w*\d\S*\s·\s(torch|triton|nvfuser|mixed)\b/;

if (!NODE || !CS_DIR) {
  console.error('E2E_NODE and E2E_CODE_SERVER must be set (see vscode-extension/ci.sh)');
  process.exit(2);
}
const CS_ENTRY = path.join(CS_DIR, 'node_modules', 'code-server', 'out', 'node', 'entry.js');

fs.mkdirSync(OUT, { recursive: true });

// code-server process groups still running; stopped on exit, however the test ends.
const running = new Set();
function killAll() {
  for (const c of running) {
    try {
      process.kill(-c.pid, 'SIGKILL');
    } catch {
      // gone already
    }
  }
  running.clear();
}
process.on('exit', killAll);
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => {
    killAll();
    process.exit(130);
  });
}
const results = [];
let shot = 0;

function log(...a) {
  console.log(`[e2e ${new Date().toISOString().slice(11, 19)}]`, ...a);
}

async function screenshot(page, name) {
  const file = path.join(OUT, `${String(++shot).padStart(2, '0')}-${name}.png`);
  await page.screenshot({ path: file }).catch((e) => log(`screenshot ${name} failed: ${e.message}`));
  log(`screenshot ${path.relative(process.cwd(), file)}`);
}

class GateFailed extends Error {}

async function gate(page, name, fn) {
  await check(page, name, fn);
  if (!results[results.length - 1].ok) {
    throw new GateFailed(name);
  }
}

async function check(page, name, fn) {
  log(`CHECK ${name}`);
  try {
    await fn();
    results.push({ name, ok: true });
    log(`PASS  ${name}`);
    await screenshot(page, name.replace(/[^a-z0-9]+/gi, '-').toLowerCase());
  } catch (e) {
    results.push({ name, ok: false, error: e.message });
    log(`FAIL  ${name}: ${e.message}`);
    await screenshot(page, `FAILED-${name.replace(/[^a-z0-9]+/gi, '-').toLowerCase()}`);
  }
}

/** Thrown inside an `until` callback to stop waiting at once. */
class Fatal extends Error {}

async function until(what, fn, timeoutMs = 60000, intervalMs = 500) {
  const end = Date.now() + timeoutMs;
  let last;
  while (Date.now() < end) {
    try {
      const v = await fn();
      if (v) {
        return v;
      }
    } catch (e) {
      if (e instanceof Fatal) {
        throw e;
      }
      last = e;
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
  throw new Error(`timed out waiting for ${what}${last ? ` (${last.message})` : ''}`);
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

function sandbox(name) {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), `fusionlens-e2e-${name}-`));
  const dirs = {};
  for (const d of ['home', 'tmp', 'user-data', 'extensions', 'xdg-config', 'xdg-data', 'xdg-cache', 'xdg-runtime']) {
    dirs[d] = path.join(root, d);
    fs.mkdirSync(dirs[d], { recursive: true, mode: 0o700 });
  }
  // The workspace: a temp copy of examples/ (the files import `compiler` from the repo).
  dirs.ws = path.join(root, 'workspace');
  fs.cpSync(path.join(REPO, 'examples'), dirs.ws, { recursive: true, filter: (src) => !src.includes('__pycache__') });
  dirs.root = root;
  return dirs;
}

/** Keep the extension's log (and the extension host's) in OUT, then delete the sandbox. */
function finishSandbox(dirs, phase) {
  const logs = path.join(dirs['user-data'], 'logs');
  const walk = (d) => (fs.existsSync(d) ? fs.readdirSync(d, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(path.join(d, e.name)) : [path.join(d, e.name)])) : []);
  for (const f of walk(logs)) {
    const base = path.basename(f);
    if (base === 'FusionLens.log' || base === 'exthost.log' || base === 'remoteexthost.log') {
      fs.copyFileSync(f, path.join(OUT, `${phase}-${base}`));
    }
  }
  if (process.env.E2E_KEEP !== '1') {
    fs.rmSync(dirs.root, { recursive: true, force: true });
  }
}

function csEnv(dirs) {
  const pyPath = [REPO, FAKE ? path.join(REPO, 'tests', 'lsp') : null, process.env.PYTHONPATH].filter(Boolean).join(path.delimiter);
  const env = {
    PATH: process.env.PATH,
    LANG: 'C.UTF-8',
    HOME: dirs.home,
    TMPDIR: dirs.tmp,
    XDG_CONFIG_HOME: dirs['xdg-config'],
    XDG_DATA_HOME: dirs['xdg-data'],
    XDG_CACHE_HOME: dirs['xdg-cache'],
    XDG_RUNTIME_DIR: dirs['xdg-runtime'],
    PYTHONPATH: pyPath,
    PYTHONDONTWRITEBYTECODE: '1',
    VSCODE_TELEMETRY_OPTOUT: '1',
  };
  if (FAKE) {
    env.FUSIONLENS_WORKER_COMPILE = FAKE;
  }
  return env;
}

function writeSettings(dirs, extra) {
  const userDir = path.join(dirs['user-data'], 'User');
  fs.mkdirSync(userDir, { recursive: true });
  const settings = {
    'workbench.startupEditor': 'none',
    'workbench.tips.enabled': false,
    'workbench.welcomePage.walkthroughs.openOnInstall': false,
    'workbench.enableExperiments': false,
    'telemetry.telemetryLevel': 'off',
    'update.mode': 'none',
    'extensions.autoUpdate': false,
    'extensions.autoCheckUpdates': false,
    'extensions.ignoreRecommendations': true,
    'chat.disableAIFeatures': true,
    'git.enabled': false,
    'editor.inlayHints.enabled': 'on',
    'editor.codeLens': true,
    'editor.minimap.enabled': false,
    'editor.hover.delay': 300,
    'window.restoreWindows': 'none',
    'workbench.secondarySideBar.defaultVisibility': 'hidden',
    'files.hotExit': 'off',
    'fusionlens.pythonPath': PYTHON,
    'fusionlens.compileTrigger': 'manual',
    'fusionlens.benchmarkRepeats': 3,
    'fusionlens.device': 'cpu',
    'fusionlens.timeoutSeconds': 240,
    'fusionlens.trace.server': 'messages',
    ...extra,
  };
  fs.writeFileSync(path.join(userDir, 'settings.json'), JSON.stringify(settings, null, 2));
  // code-server is a remote window: machine-scoped settings (fusionlens.pythonPath) are read
  // from the Machine settings, not the User settings.
  const machineDir = path.join(dirs['user-data'], 'Machine');
  fs.mkdirSync(machineDir, { recursive: true });
  fs.writeFileSync(path.join(machineDir, 'settings.json'), JSON.stringify({ 'fusionlens.pythonPath': PYTHON }, null, 2));
}

function installVsix(dirs, vsix = VSIX) {
  const r = spawnSync(
    NODE,
    [CS_ENTRY, '--user-data-dir', dirs['user-data'], '--extensions-dir', dirs.extensions, '--install-extension', vsix, '--force'],
    { env: csEnv(dirs), encoding: 'utf8', timeout: 120000 },
  );
  log(`install-extension: rc=${r.status}\n${(r.stdout || '').trim()}\n${(r.stderr || '').trim()}`);
  if (r.status !== 0 || !/successfully installed|already installed/i.test(r.stdout + r.stderr)) {
    throw new Error(`code-server --install-extension ${vsix} failed`);
  }
}

async function startCodeServer(dirs, { trust, name }) {
  const port = await freePort();
  const args = [
    CS_ENTRY,
    '--bind-addr', `127.0.0.1:${port}`,
    '--auth', 'none',
    '--disable-telemetry',
    '--disable-update-check',
    '--disable-getting-started-override',
    '--user-data-dir', dirs['user-data'],
    '--extensions-dir', dirs.extensions,
  ];
  if (trust) {
    args.push('--disable-workspace-trust'); // otherwise code-server asks, like VS Code
  }
  const logFile = path.join(OUT, `${name}-code-server.log`);
  const fd = fs.openSync(logFile, 'w');
  // detached: the child calls setsid(), so the whole process group (extension host,
  // language server, compile worker) can be stopped with one kill(-pgid).
  const child = spawn(NODE, args, { env: csEnv(dirs), stdio: ['ignore', fd, fd], detached: true });
  fs.closeSync(fd);
  running.add(child);
  const stop = async () => {
    running.delete(child);
    for (const sig of ['SIGTERM', 'SIGKILL']) {
      try {
        process.kill(-child.pid, sig);
      } catch {
        return;
      }
      await new Promise((r) => setTimeout(r, sig === 'SIGTERM' ? 3000 : 500));
    }
  };
  await until('code-server to listen', async () => {
    if (child.exitCode !== null) {
      throw new Error(`code-server exited with ${child.exitCode}; see ${logFile}`);
    }
    const res = await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => null);
    return res && res.ok;
  }, 60000);
  log(`code-server on port ${port} (pid ${child.pid}), log ${logFile}`);
  return { port, stop, logFile };
}

async function launchBrowser() {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run', '--disable-dev-shm-usage'],
  });
}

// ------------------------------------------------------------------ workbench helpers

async function runCommand(page, title) {
  await page.keyboard.press('F1');
  const input = page.locator('.quick-input-widget input');
  await input.waitFor({ state: 'visible', timeout: 15000 });
  await input.fill(`>${title}`);
  const row = page.locator('.quick-input-list .monaco-list-row').filter({ hasText: title }).first();
  await row.waitFor({ state: 'visible', timeout: 15000 });
  await page.keyboard.press('Enter');
}

async function openFile(page, name) {
  await page.keyboard.press('Control+P');
  const input = page.locator('.quick-input-widget input');
  await input.waitFor({ state: 'visible', timeout: 15000 });
  await input.fill(name);
  await page.locator('.quick-input-list .monaco-list-row').filter({ hasText: name }).first().waitFor({ timeout: 15000 });
  await page.keyboard.press('Enter');
  await page.locator(`.tabs-container .tab[data-resource-name="${name}"], .tabs-container .tab:has-text("${name}")`).first().waitFor({ timeout: 30000 });
  await page.locator('.editor-instance .monaco-editor .view-lines').first().waitFor({ timeout: 30000 });
}

async function goToLine(page, line1) {
  await page.locator('.editor-instance .monaco-editor .view-lines').first().click();
  await page.keyboard.press('Control+G');
  const input = page.locator('.quick-input-widget input');
  await input.waitFor({ state: 'visible', timeout: 10000 });
  await input.fill(`:${line1}`);
  await page.keyboard.press('Enter');
}

/** Code lens texts in the active editor. */
async function lensTexts(page) {
  return page.locator('.editor-instance .monaco-editor .codelens-decoration').allInnerTexts();
}

/** The "Compile & benchmark" link nearest above the given (1-based) line, or null. */
async function lensAbove(page, line1) {
  const num = page.locator('.editor-instance .monaco-editor .line-numbers', { hasText: new RegExp(`^${line1}$`) }).first();
  const box = await num.boundingBox().catch(() => null);
  if (!box) {
    return null;
  }
  const links = page.locator('.codelens-decoration a', { hasText: 'Compile & benchmark' });
  let best = null;
  for (let i = 0; i < (await links.count()); i++) {
    const b = await links.nth(i).boundingBox().catch(() => null);
    if (b && b.y < box.y && (!best || b.y > best.y)) {
      best = { y: b.y, link: links.nth(i) };
    }
  }
  return best;
}

async function statusBarText(page) {
  const items = await page.locator('.statusbar-item').allInnerTexts();
  return items.find((t) => t.includes('FusionLens')) ?? '';
}

async function dismissNotifications(page) {
  for (let i = 0; i < 3; i++) {
    const close = page.locator('.notification-toast .codicon-notifications-clear, .notification-toast .action-label.codicon-close').first();
    if (await close.isVisible().catch(() => false)) {
      await close.click().catch(() => undefined);
    }
  }
}

async function notificationsText(page) {
  return (await page.locator('.notification-toast, .notifications-center').allInnerTexts()).join('\n');
}

/** The regions view's rows (explorer pane "FusionLens Regions"). */
function regionsPane(page) {
  return page.locator('.pane').filter({ has: page.locator('.pane-header', { hasText: /FusionLens Regions/i }) }).first();
}

/** The report page inside its webview (code-server nests it: iframe.webview > iframe#active-frame). */
async function reportFrame(page) {
  for (const f of page.frames()) {
    if (await f.locator('#source [data-line]').count().catch(() => 0)) {
      return f;
    }
  }
  return null;
}

/** The editor's cursor line (1-based), from the status bar's "Ln 77, Col 1". */
async function cursorLine(page) {
  const t = await page.locator('.statusbar-item[id="status.editor.selection"]').innerText().catch(() => '');
  const m = /Ln (\d+)/.exec(t);
  return m ? Number(m[1]) : null;
}

/**
 * "FusionLens: Show Report" on gpt_block.py (compiled by the checks before): the page opens in a
 * webview with no error (a Content-Security-Policy violation is one), a click on a line of a
 * region in it moves the editor there, and moving the editor's cursor selects that line in the page.
 */
async function showReportAndClick(page, regionLines) {
  const errors = [];
  const messages = [];
  const onConsole = (m) => {
    if (/webview/.test(m.location().url ?? '')) {
      messages.push(`${m.type()}: ${m.text().slice(0, 200)}`);
      if (m.type() === 'error') {
        errors.push(m.text());
      }
    }
  };
  page.on('console', onConsole);
  try {
    await openFile(page, 'gpt_block.py');
    await goToLine(page, EXAMPLE_LINES.body);
    await runCommand(page, 'FusionLens: Show Report');
    await page.locator('.tabs-container .tab', { hasText: /FusionLens/ }).first().waitFor({ timeout: 30000 });
    const frame = await until('the report page in the webview', () => reportFrame(page), 90000, 1000);
    const rows = frame.locator('#source [data-file$="gpt_block.py"][data-line]');
    await until('the source lines in the page', async () => (await rows.count()) > EXAMPLE_LINES.body, 30000);
    // The page starts at the editor's cursor.
    await until(`the page to start at the cursor's line ${EXAMPLE_LINES.body}`, async () => (await frame.evaluate(() => window.fusionlens.selected()))?.line === EXAMPLE_LINES.body, 20000);
    // Lines of regions (as the regions view lists them), away from the cursor.
    const lines = regionLines.filter((n) => n !== EXAMPLE_LINES.body);
    if (lines.length < 2) {
      throw new Error(`the regions view listed too few lines: ${regionLines}`);
    }
    log(`report page: ${await rows.count()} source lines; clicking line ${lines[0]}`);
    await screenshot(page, 'report-webview');
    await frame.locator(`#source [data-file$="gpt_block.py"][data-line="${lines[0]}"]`).first().click();
    const atLine = async () => (await cursorLine(page)) === lines[0];
    try {
      await until(`the editor at line ${lines[0]}`, atLine, 10000);
    } catch (e) {
      // The status bar shows the cursor only while a text editor has focus; the click's own focus
      // can land in the webview after the reveal gave it to the editor (seen once in CI).
      log(`no cursor in the status bar after the click (${e.message}): focusing the editor group`);
      await runCommand(page, 'View: Focus First Editor Group');
      await until(`the editor at line ${lines[0]}`, atLine, 10000);
    }
    const selected = await page.locator('.editor-instance .monaco-editor .selected-text').count();
    if (!selected) {
      throw new Error('the revealed line is not selected');
    }
    await screenshot(page, 'report-click-revealed');
    // The page follows the cursor: another line of a region, moved to in the editor. The page
    // opens on the GPU preview, where a line of views only (a transpose, a reshape) has no region
    // of its own, so the line is one the page's plan shades as having regions.
    const shaded = await frame.evaluate((ns) => ns.filter((n) => document.querySelector(
      `#source .ln.has-ops[data-file$="gpt_block.py"][data-line="${n}"]`)), lines.slice(1));
    if (!shaded.length) {
      throw new Error(`no line of ${lines.slice(1)} has a region in the page's plan (${await frame.evaluate(() => window.fusionlens.plan())})`);
    }
    const other = shaded[shaded.length - 1];
    await goToLine(page, other);
    await until(`the page to select line ${other}`, async () => (await frame.evaluate(() => window.fusionlens.selected()))?.line === other, 20000);
    const sel = await frame.evaluate(() => window.fusionlens.selected());
    log(`page selection after the cursor moved: ${JSON.stringify(sel)}`);
    if (!sel.region) {
      throw new Error(`line ${other} has ops but the page selected no region`);
    }
    // The pictures drew under the webview's policy (no eval, scripts by nonce): graph.js's SVG
    // with its nodes, Plotly's charts.
    const pictures = ['fusion-graph', 'roofline', 'timeline'];
    const drawnNow = () => frame.evaluate((ids) => ids.filter((id) => document.querySelector(
      id === 'fusion-graph' ? '#fusion-graph svg.graph-svg .node' : `#${id} .main-svg`)), pictures);
    const drawn = await until('the pictures drawn', async () => ((await drawnNow()).length === pictures.length ? drawnNow() : null), 20000)
      .catch(drawnNow);
    log(`report page: drawn ${drawn.join(', ')}; ${messages.length} console messages from the webview (${messages.slice(0, 3).join(' | ')}), ${errors.length} errors`);
    if (drawn.length !== pictures.length) {
      throw new Error(`drawn: ${drawn.join(', ')} of ${pictures.join(', ')}`);
    }
    // Scroll the page's own document only (scrollIntoView would scroll the workbench around it too).
    await frame.evaluate(() => window.scrollTo(0, document.getElementById('fusion-graph').getBoundingClientRect().top + window.scrollY - 8));
    await screenshot(page, 'report-webview-graph');
    if (errors.length) {
      throw new Error(`errors in the webview: ${errors.slice(0, 5).join(' | ')}`);
    }
  } finally {
    page.off('console', onConsole);
  }
}

/** The report panel's tab text ("FusionLens: gpt_block_example", "FusionLens Report (mlp.py)"). */
async function reportTabTitle(page) {
  const tab = page.locator('.tabs-container .tab', { hasText: /FusionLens/ }).first();
  return (await tab.innerText().catch(() => '')).trim();
}

/** The frame of the panel's page without a report whose message matches `re`, or null. */
async function messageFrame(page, re) {
  for (const f of page.frames()) {
    const texts = await f.locator('#message').allInnerTexts().catch(() => []);
    if (texts.some((t) => re.test(t))) {
      return f;
    }
  }
  return null;
}

/** The frame of the report page showing lines of `file`, or null. */
async function reportFrameOf(page, file) {
  const f = await reportFrame(page);
  return f && (await f.locator(`#source [data-file$="/${file}"][data-line]`).count().catch(() => 0)) > 0 ? f : null;
}

/** The extension's log so far (every session's FusionLens.log in the sandbox). */
function extensionLog(dirs) {
  const walk = (d) => (fs.existsSync(d) ? fs.readdirSync(d, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(path.join(d, e.name)) : e.name === 'FusionLens.log' ? [path.join(d, e.name)] : [])) : []);
  return walk(path.join(dirs['user-data'], 'logs')).map((f) => fs.readFileSync(f, 'utf8')).join('\n');
}

/**
 * The report panel (open on gpt_block.py's report) follows the active editor: mlp.py, not
 * compiled, shows the page without a report, whose button compiles the target at the cursor
 * and shows its report; back on gpt_block.py, its page again, kept (not rendered again).
 */
async function reportFollowsTheEditor(page, dirs) {
  await openFile(page, 'mlp.py');
  const none = await until('the page saying mlp.py has no result', () => messageFrame(page, /Nothing in mlp\.py has a compile result yet/), 30000);
  await until('the panel titled for mlp.py', async () => /FusionLens Report \(mlp\.py\)/.test(await reportTabTitle(page)), 10000);
  await screenshot(page, 'report-follows-to-mlp');
  await goToLine(page, MLP_BODY); // inside mlp_example: the current target
  await none.locator('#compile').click();
  await until('the report of mlp.py in the panel', () => reportFrameOf(page, 'mlp.py'), COMPILE_TIMEOUT, 1000);
  await until('the panel titled mlp_example', async () => /FusionLens: mlp_example/.test(await reportTabTitle(page)), 20000);
  await screenshot(page, 'report-of-mlp');
  // Back to the other file by its tab, as one switches between open files (quick open, right
  // after the page's button had the focus, left mlp.py active in code-server).
  await page.locator('.tabs-container .tab[data-resource-name="gpt_block.py"]').first().click();
  await until('gpt_block.py active', async () => (await page.locator('.tabs-container .tab.active[data-resource-name="gpt_block.py"]').count()) > 0, 10000);
  await until('the report of gpt_block.py again', () => reportFrameOf(page, 'gpt_block.py'), 30000);
  await until(`the panel titled ${TARGET}`, async () => new RegExp(`FusionLens: ${TARGET}`).test(await reportTabTitle(page)), 20000);
  await until('the log to say the page was kept', async () => new RegExp(`report page of ${TARGET}: \\d+ characters \\(kept from before\\)`).test(extensionLog(dirs)), 10000);
  log(`report panel: ${await reportTabTitle(page)}`);
  await screenshot(page, 'report-follows-back');
}

/** A reload brings the report panel back, on the file it showed (no result: the server is new). */
async function reportPanelRestored(page, dirs) {
  await openFile(page, 'gpt_block.py');
  await runCommand(page, 'FusionLens: Show Report'); // the active tab of its group: restored as the window loads
  await until('the panel saying gpt_block.py has no result', () => messageFrame(page, /Nothing in gpt_block\.py has a compile result yet/), 30000);
  // VS Code restores a webview when it first shows: the panel the active tab of its group
  // (another editor may have opened in that group), before and after the reload.
  const panelTab = page.locator('.tabs-container .tab', { hasText: /FusionLens/ }).first();
  await panelTab.click();
  await page.reload();
  await page.locator('.monaco-workbench').waitFor({ timeout: 90000 });
  await panelTab.waitFor({ timeout: 60000 });
  if (!/\bactive\b/.test((await panelTab.getAttribute('class')) ?? '')) {
    await panelTab.click();
  }
  await until('the restored panel saying gpt_block.py has no result', () => messageFrame(page, /Nothing in gpt_block\.py has a compile result yet/), 90000, 1000);
  await until('the restored panel titled for gpt_block.py', async () => /FusionLens Report \(gpt_block\.py\)/.test(await reportTabTitle(page)), 20000);
  if (!/Waiting for the FusionLens server/.test(extensionLog(dirs))) {
    throw new Error('the panel was not restored by the serializer (no "Waiting for the FusionLens server" in the log)');
  }
  await screenshot(page, 'report-restored-after-reload');
}

async function openWorkbench(browser, port, ws) {
  const context = await browser.newContext({ viewport: { width: 1600, height: 1000 } });
  const page = await context.newPage();
  page.on('pageerror', (e) => log(`page error: ${e.message}`));
  await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(ws)}`);
  await page.locator('.monaco-workbench').waitFor({ timeout: 90000 });
  await page.locator('.part.statusbar').waitFor({ timeout: 60000 });
  // Widen the side bar (drag its sash) so the regions view's bars and times are readable.
  const side = await page.locator('.part.sidebar').boundingBox().catch(() => null);
  if (side) {
    const y = side.y + side.height / 2;
    await page.mouse.move(side.x + side.width + 1, y);
    await page.mouse.down();
    await page.mouse.move(side.x + side.width + 260, y, { steps: 8 });
    await page.mouse.up();
  }
  return { context, page };
}

// ------------------------------------------------------------------ phases

async function trustedPhase(browser) {
  const dirs = sandbox('trusted');
  writeSettings(dirs, {});
  installVsix(dirs);
  const cs = await startCodeServer(dirs, { trust: true, name: 'trusted' });
  const { context, page } = await openWorkbench(browser, cs.port, dirs.ws);
  try {
    await screenshot(page, 'workbench');
    await openFile(page, 'gpt_block.py');

    await check(page, 'status bar shows FusionLens', async () => {
      await until('a FusionLens status item', async () => /FusionLens/.test(await statusBarText(page)), 90000);
    });

    await gate(page, 'code lens offers Compile & benchmark', async () => {
      await goToLine(page, EXAMPLE_LINES.decorator);
      await until('the Compile & benchmark lens', async () => (await lensTexts(page)).some((t) => t.includes('Compile & benchmark')), 90000);
    });

    await gate(page, 'Compile and benchmark from the code lens updates the lens with timings', async () => {
      // The lens of gpt_block_example: the one just above its decorator line. Lenses render
      // after the editor scrolls and the server answers, so look until one is there.
      let best = null;
      let tries = 0;
      await until(`a lens above line ${EXAMPLE_LINES.decorator}`, async () => {
        best = await lensAbove(page, EXAMPLE_LINES.decorator);
        if (!best && ++tries % 5 === 0) {
          await goToLine(page, EXAMPLE_LINES.decorator).catch(() => undefined);
        }
        return best !== null;
      }, 60000, 1000);
      await best.link.click();
      const seen = new Set();
      await until(
        'a lens with regions and timings',
        async () => {
          seen.add((await statusBarText(page)).trim());
          const texts = await lensTexts(page);
          if (/failed/i.test(texts.join(' '))) {
            throw new Fatal(`lens says: ${texts.join(' | ')}`);
          }
          return texts.some((t) => /region/.test(t) && /(ms|µs|x vs eager)/.test(t));
        },
        COMPILE_TIMEOUT,
        1000,
      );
      log(`lenses: ${(await lensTexts(page)).join(' | ')}`);
      log(`status bar texts seen while compiling: ${[...seen].join(' | ')}`);
    });

    let regionLine = 0;
    let regionLines = []; // 1-based lines of gpt_block.py the regions view lists
    await check(page, 'regions view lists the regions of the file', async () => {
      await runCommand(page, 'FusionLens: Refresh Regions').catch(() => undefined);
      // Collapse the folder tree so the regions view gets the height of the side bar.
      const folders = page.locator('.pane-header', { hasText: /^workspace/i }).first();
      if ((await folders.getAttribute('aria-expanded').catch(() => null)) === 'true') {
        await folders.click();
      }
      const pane = regionsPane(page);
      await pane.waitFor({ timeout: 20000 });
      const header = pane.locator('.pane-header');
      if ((await header.getAttribute('aria-expanded')) === 'false') {
        await header.click();
      }
      const rows = pane.locator('.monaco-list-row');
      await until('region rows', async () => (await rows.allInnerTexts()).some((t) => /·/.test(t) && /L\d+/.test(t)), 60000);
      const texts = await rows.allInnerTexts();
      log(`regions view rows:\n  ${texts.join('\n  ')}`);
      if (!texts.some((t) => t.includes(TARGET))) {
        throw new Error(`no row for ${TARGET}`);
      }
      // Click the first region row with lines: the editor selects them.
      const regionRow = rows.filter({ hasText: /L\d+/ }).first();
      const m = /L(\d+)/.exec(await regionRow.innerText());
      regionLine = m ? Number(m[1]) : 0;
      regionLines = [...new Set(texts.flatMap((t) => [...t.matchAll(/\bL(\d+)/g)].map((x) => Number(x[1]))))];
      await regionRow.click();
      await until('the editor to select the region lines', async () => {
        const sel = await page.locator('.editor-instance .monaco-editor .selected-text').count();
        return sel > 0;
      }, 15000);
    });

    await check(page, 'inlay hints show region ids at the ends of compiled lines', async () => {
      if (regionLine) {
        await goToLine(page, regionLine);
      }
      await until(
        'inlay hints with region ids',
        async () => {
          const lines = await page.locator('.editor-instance .monaco-editor .view-lines .view-line').allInnerTexts();
          // A hint reads like "r0 · torch · 12 µs" at the end of a line.
          return lines.some((l) => HINT.test(l));
        },
        60000,
      );
      const lines = await page.locator('.editor-instance .monaco-editor .view-lines .view-line').allInnerTexts();
      log(`lines with hints:\n  ${lines.filter((l) => HINT.test(l)).slice(0, 5).join('\n  ')}`);
    });

    await check(page, 'hovering a compiled line shows its trace code', async () => {
      // Hover over the source text of the first visible line that carries a hint.
      const hinted = page.locator('.editor-instance .monaco-editor .view-lines .view-line').filter({ hasText: HINT }).first();
      const box = await hinted.boundingBox();
      if (!box) {
        throw new Error('no hinted line on screen');
      }
      // Hover over a word of the source text (not the hint, not the indentation).
      const word = hinted.locator('span span, span').filter({ hasText: /^\s*(self|x|return|[a-z_]+)\s*$/ }).first();
      const wbox = (await word.boundingBox().catch(() => null)) ?? { x: box.x + 120, y: box.y, width: 10, height: box.height };
      await page.mouse.move(wbox.x + 2, wbox.y + wbox.height / 2);
      await page.mouse.move(wbox.x + wbox.width / 2, wbox.y + wbox.height / 2, { steps: 4 });
      const hover = page.locator('.monaco-hover:not(.hidden)').filter({ hasText: 'FusionLens' }).first();
      await hover.waitFor({ state: 'visible', timeout: 20000 });
      const text = await hover.innerText();
      log(`hover:\n${text.slice(0, 800)}`);
      if (!/trace/i.test(text) || (await hover.locator('code').count()) === 0) {
        throw new Error('hover has no trace code');
      }
      if (!/t\d+\s*=|def |prims\.|torch\./.test(text)) {
        throw new Error('hover code does not look like trace code');
      }
      await screenshot(page, 'hover');
      await page.mouse.move(5, 5);
    });

    await check(page, 'a settings change reaches the server (fusionlens.inlayHints off and on)', async () => {
      // Workspace settings: the folder is watched (edits of the User settings file on disk are
      // not noticed by code-server).
      const file = path.join(dirs.ws, '.vscode', 'settings.json');
      fs.mkdirSync(path.dirname(file), { recursive: true });
      if (!fs.existsSync(file)) {
        fs.writeFileSync(file, '{}');
      }
      const hinted = async () => (await page.locator('.editor-instance .monaco-editor .view-lines .view-line').allInnerTexts()).some((l) => HINT.test(l));
      const set = (v) => {
        const cfg = JSON.parse(fs.readFileSync(file, 'utf8'));
        cfg['fusionlens.inlayHints'] = v;
        fs.writeFileSync(file, JSON.stringify(cfg, null, 2));
      };
      set(false);
      await until('the hints to go', async () => !(await hinted()), 30000);
      await screenshot(page, 'inlay-hints-off');
      set(true);
      await until('the hints to come back', hinted, 30000);
    });

    await check(page, 'status bar shows device and speedup after compiling', async () => {
      await until('status with device and speedup', async () => {
        const t = await statusBarText(page);
        return /CPU/.test(t) && /\dx/.test(t);
      }, 30000);
      log(`status bar: ${await statusBarText(page)}`);
    });

    await check(page, 'Show Report opens the report beside the editor; a click on a line in it reveals that line', async () => {
      await showReportAndClick(page, regionLines);
    });

    await check(page, 'the report panel follows the active editor: mlp.py (compiled from its page), then gpt_block.py again', async () => {
      await reportFollowsTheEditor(page, dirs);
    });

    await check(page, 'Show Generated Trace opens a read-only Python document', async () => {
      await goToLine(page, EXAMPLE_LINES.body);
      await runCommand(page, 'FusionLens: Show Generated Trace');
      const tab = page.locator('.tabs-container .tab', { hasText: /\.py/ }).filter({ hasText: TARGET }).first();
      await tab.waitFor({ timeout: 30000 });
      const editor = page.locator('.editor-instance .monaco-editor').filter({ hasText: 'FusionLens trace' }).first();
      await editor.waitFor({ timeout: 20000 });
      // Typing into a read-only editor shows "Cannot edit in read-only editor".
      await editor.locator('.view-lines').click();
      await page.keyboard.type('x');
      await until('the read-only message', async () => (await page.locator('.monaco-editor-overlaymessage').allInnerTexts()).some((t) => /read-only/i.test(t)), 10000);
      const lang = await page.locator('.statusbar-item[id="status.editor.mode"]').innerText().catch(() => '');
      log(`language of the trace editor: ${lang}`);
      if (lang && !/python/i.test(lang)) {
        throw new Error(`language is ${lang}, not Python`);
      }
    });

    await check(page, 'Clear Cache puts the lens back to Compile & benchmark', async () => {
      await openFile(page, 'gpt_block.py');
      await runCommand(page, 'FusionLens: Clear Cache');
      await goToLine(page, EXAMPLE_LINES.decorator);
      // Every lens plain again (the other target's lens was plain all along).
      await until('the plain lenses again', async () => {
        const t = await lensTexts(page);
        return t.some((x) => x.includes('Compile & benchmark')) && !t.some((x) => /region/.test(x));
      }, 30000);
      // The report page, still open, says there is no result now.
      await until('the report page to say there is no result', async () => {
        const texts = await Promise.all(page.frames().map((fr) => fr.locator('#message').allInnerTexts().catch(() => [])));
        return texts.flat().some((t) => /compile result yet/.test(t));
      }, 30000);
    });

    await check(page, 'palette: Compile and Benchmark Current Target, then Show Kernel Code at the cursor', async () => {
      await goToLine(page, EXAMPLE_LINES.body); // inside gpt_block_example
      await runCommand(page, 'FusionLens: Compile and Benchmark Current Target');
      await until('the lens with timings again', async () => (await lensTexts(page)).some((t) => /region/.test(t) && /x vs eager|ms/.test(t)), COMPILE_TIMEOUT, 1000);
      await until('the open report page to show the new result', () => reportFrame(page), 30000);
      await goToLine(page, regionLine || 1); // a line of the first region in the view: compiled
      await runCommand(page, 'FusionLens: Show Kernel Code');
      const editor = page.locator('.editor-instance .monaco-editor').filter({ hasText: 'FusionLens region' }).first();
      await editor.waitFor({ timeout: 30000 });
      const tabs = await page.locator('.tabs-container .tab').allInnerTexts();
      log(`tabs: ${tabs.join(' | ')}`);
    });

    await check(page, 'Restart Server starts a fresh server', async () => {
      await openFile(page, 'gpt_block.py');
      await runCommand(page, 'FusionLens: Restart Server');
      await goToLine(page, EXAMPLE_LINES.decorator);
      // A fresh server has no results: the lens offers to compile again.
      await until('the plain lens from the new server', async () => (await lensTexts(page)).some((t) => t.includes('Compile & benchmark')) && !(await lensTexts(page)).some((t) => /region/.test(t)), 60000);
      const notes = await notificationsText(page);
      if (/failed to start|already exists/.test(notes)) {
        throw new Error(`restart reported: ${notes}`);
      }
      if (/server missing|stopped/.test(await statusBarText(page))) {
        throw new Error(`status after restart: ${await statusBarText(page)}`);
      }
    });

    await check(page, 'after a window reload the report panel comes back on the file it showed', async () => {
      await reportPanelRestored(page, dirs);
    });
  } catch (e) {
    if (!(e instanceof GateFailed)) {
      throw e;
    }
    log(`stopping this phase: ${e.message} failed`);
  } finally {
    await screenshot(page, 'trusted-end');
    await context.close();
    await cs.stop();
    finishSandbox(dirs, 'trusted');
  }
}

async function untrustedPhase(browser) {
  const dirs = sandbox('untrusted');
  writeSettings(dirs, { 'fusionlens.compileTrigger': 'onOpen', 'security.workspace.trust.startupPrompt': 'never', 'security.workspace.trust.untrustedFiles': 'open' });
  installVsix(dirs);
  const cs = await startCodeServer(dirs, { trust: false, name: 'untrusted' });
  const { context, page } = await openWorkbench(browser, cs.port, dirs.ws);
  try {
    await screenshot(page, 'untrusted-workbench');
    // A trust dialog may appear: answer "No, I don't trust the authors".
    const noTrust = page.locator('.monaco-dialog-box .monaco-button', { hasText: /don.t trust/i }).first();
    if (await noTrust.isVisible({ timeout: 10000 }).catch(() => false)) {
      await noTrust.click();
    }
    await openFile(page, 'gpt_block.py');
    await check(page, 'untrusted workspace: status bar says restricted and nothing runs', async () => {
      await until('restricted status', async () => /restricted/i.test(await statusBarText(page)), 90000);
      await goToLine(page, EXAMPLE_LINES.decorator);
      await until('lenses that say execution is off', async () => {
        const t = await lensTexts(page);
        return t.some((x) => /Not compiled.*not trusted/i.test(x));
      }, 60000);
      const t = await lensTexts(page);
      if (t.some((x) => /vs eager|Compiling/.test(x))) {
        throw new Error(`something compiled in an untrusted workspace: ${t.join(' | ')}`);
      }
      log(`untrusted lenses: ${t.join(' | ')}; status: ${await statusBarText(page)}`);
    });

    await check(page, 'trusting the workspace restarts the server and compiles', async () => {
      // The status item opens the workspace trust editor.
      await page.locator('.statusbar-item', { hasText: 'FusionLens' }).first().click();
      const trust = page.locator('.workspace-trust-editor .monaco-button', { hasText: /^Trust/ }).first();
      await trust.waitFor({ timeout: 20000 });
      await trust.click();
      // The trust editor may open as a modal editor over the workbench: close it.
      await page.keyboard.press('Escape');
      const modalClose = page.locator('.modal-editor-part .codicon-close, .modal-editor-container .codicon-close').first();
      if (await modalClose.isVisible().catch(() => false)) {
        await modalClose.click();
      }
      await openFile(page, 'gpt_block.py');
      await until('the restricted status to go', async () => !/restricted/.test(await statusBarText(page)), 60000);
      await goToLine(page, EXAMPLE_LINES.decorator);
      // compileTrigger is onOpen in this phase: the trusted server compiles by itself.
      await until('a compiled lens', async () => (await lensTexts(page)).some((t) => /region/.test(t) && /x vs eager|ms/.test(t)), COMPILE_TIMEOUT, 1000);
      log(`after trust: ${(await lensTexts(page)).join(' | ')}; status: ${await statusBarText(page)}`);
    });
  } finally {
    await context.close();
    await cs.stop();
    finishSandbox(dirs, 'untrusted');
  }
}

async function missingServerPhase(browser) {
  const dirs = sandbox('missing');
  // An interpreter that cannot see any installed package (-S: no site-packages, -I: no
  // PYTHONPATH, no current folder): the server is "not installed" for it.
  const wrapper = path.join(dirs.root, 'bare-python');
  fs.writeFileSync(wrapper, `#!/bin/sh\nexec "${PYTHON}" -I -S "$@"\n`, { mode: 0o755 });
  writeSettings(dirs, { 'fusionlens.pythonPath': wrapper });
  fs.writeFileSync(path.join(dirs['user-data'], 'Machine', 'settings.json'), JSON.stringify({ 'fusionlens.pythonPath': wrapper }));
  installVsix(dirs);
  const cs = await startCodeServer(dirs, { trust: true, name: 'missing' });
  const { context, page } = await openWorkbench(browser, cs.port, dirs.ws);
  try {
    await openFile(page, 'mlp.py');
    await check(page, 'a missing server is reported with the install command', async () => {
      const toast = page.locator('.notification-toast', { hasText: /not installed/ }).first();
      await toast.waitFor({ timeout: 60000 });
      const text = await toast.innerText();
      log(`notification: ${text.replace(/\s+/g, ' ')}`);
      if (!/pip install (-e |fusionlens)/.test(text)) {
        throw new Error('no install command in the message');
      }
      if (!/\bInstall\b/.test(text.replace(/Install it with/, ''))) {
        throw new Error('no "Install" button');
      }
      await until('status bar: server missing', async () => /server missing/.test(await statusBarText(page)), 10000);
    });
  } finally {
    await context.close();
    await cs.stop();
    finishSandbox(dirs, 'missing');
  }
}

/**
 * A stand-in for the Python extension (ms-python.python), which cannot be downloaded here:
 * it exposes the part of its API FusionLens uses, `environments.getActiveEnvironmentPath`,
 * answering with E2E_PYTHON.
 */
function buildFakePythonExtension(root) {
  const dir = path.join(root, 'fake-ms-python');
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(
    path.join(dir, 'package.json'),
    JSON.stringify({
      name: 'python',
      publisher: 'ms-python',
      displayName: 'Python (test stand-in)',
      description: 'Test stand-in for the Python extension API used by FusionLens.',
      version: '0.0.1',
      license: 'Apache-2.0',
      engines: { vscode: '^1.91.0' },
      main: './extension.js',
      activationEvents: [],
    }),
  );
  fs.writeFileSync(
    path.join(dir, 'extension.js'),
    `exports.activate = () => ({
  environments: {
    getActiveEnvironmentPath: () => ({ id: 'e2e', path: ${JSON.stringify(PYTHON)} }),
    onDidChangeActiveEnvironmentPath: () => ({ dispose() {} }),
  },
});
exports.deactivate = () => {};
`,
  );
  fs.writeFileSync(path.join(dir, 'README.md'), '# Python API stand-in for the FusionLens end-to-end test\n');
  const vsix = path.join(root, 'fake-ms-python.vsix');
  const r = spawnSync(
    process.execPath,
    [path.join(EXT_DIR, 'node_modules', '@vscode', 'vsce', 'vsce'), 'package', '--no-dependencies', '--skip-license', '--allow-missing-repository', '--out', vsix],
    { cwd: dir, encoding: 'utf8', timeout: 60000 },
  );
  if (r.status !== 0) {
    throw new Error(`packaging the Python extension stand-in failed: ${r.stdout}${r.stderr}`);
  }
  return vsix;
}

async function pythonExtensionPhase(browser) {
  const dirs = sandbox('pyext');
  writeSettings(dirs, { 'fusionlens.pythonPath': '' });
  fs.writeFileSync(path.join(dirs['user-data'], 'Machine', 'settings.json'), '{}');
  installVsix(dirs, buildFakePythonExtension(dirs.root));
  installVsix(dirs);
  const cs = await startCodeServer(dirs, { trust: true, name: 'pyext' });
  const { context, page } = await openWorkbench(browser, cs.port, dirs.ws);
  try {
    await openFile(page, 'gpt_block.py');
    await check(page, 'the server runs with the interpreter the Python extension selected', async () => {
      await goToLine(page, EXAMPLE_LINES.decorator);
      await until('the Compile & benchmark lens', async () => (await lensTexts(page)).some((t) => t.includes('Compile & benchmark')), 90000);
      const logs = path.join(dirs['user-data'], 'logs');
      const find = (d) => fs.readdirSync(d, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? find(path.join(d, e.name)) : e.name === 'FusionLens.log' ? [path.join(d, e.name)] : []));
      const text = find(logs).map((f) => fs.readFileSync(f, 'utf8')).join('\n');
      const line = text.split('\n').find((l) => l.includes('Python: '));
      log(`log: ${line}`);
      if (!line || !line.includes('(from Python extension)') || !line.includes(PYTHON)) {
        throw new Error(`the server did not use the Python extension's interpreter: ${line}`);
      }
    });
  } finally {
    await context.close();
    await cs.stop();
    finishSandbox(dirs, 'pyext');
  }
}

async function main() {
  log(`vsix ${VSIX}; python ${PYTHON}; fake compiler: ${FAKE}; output ${OUT}`);
  if (!fs.existsSync(VSIX)) {
    throw new Error(`${VSIX} does not exist: build it first (npm run package)`);
  }
  const browser = await launchBrowser();
  try {
    if (PHASES.includes('trusted')) {
      await trustedPhase(browser);
    }
    if (PHASES.includes('untrusted')) {
      await untrustedPhase(browser);
    }
    if (PHASES.includes('missing')) {
      await missingServerPhase(browser);
    }
    if (PHASES.includes('pyext')) {
      await pythonExtensionPhase(browser);
    }
  } finally {
    await browser.close();
  }
  const failed = results.filter((r) => !r.ok);
  console.log('\n' + results.map((r) => `${r.ok ? 'PASS' : 'FAIL'}  ${r.name}${r.ok ? '' : `: ${r.error}`}`).join('\n'));
  fs.writeFileSync(path.join(OUT, 'results.json'), JSON.stringify(results, null, 2));
  if (failed.length || results.length === 0) {
    console.log(`\n${failed.length} of ${results.length} e2e checks failed; screenshots in ${OUT}`);
    process.exit(1);
  }
  console.log(`\nall ${results.length} e2e checks passed; screenshots in ${OUT}`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
