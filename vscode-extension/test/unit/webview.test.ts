import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { COMPILE_BUTTON, cursorMessage, makeNonce, messagePage, parsePageMessage, reportCsp, withCsp } from '../../src/logic/webview';

const SOURCE = 'https://*.vscode-cdn.net';

test('the policy VS Code asks of a webview: nothing by default, scripts by nonce only', () => {
  const csp = reportCsp(SOURCE, 'abcDEF0123456789_-xyz');
  assert.equal(
    csp,
    "default-src 'none'; script-src 'nonce-abcDEF0123456789_-xyz'; style-src 'nonce-abcDEF0123456789_-xyz' 'unsafe-inline'; img-src https://*.vscode-cdn.net data:",
  );
  assert.doesNotMatch(csp, /unsafe-eval|script-src[^;]*unsafe-inline/);
  assert.throws(() => reportCsp(SOURCE, "x' 'unsafe-eval"), /base64url/);
  assert.throws(() => reportCsp("x; script-src *", 'abc'), /cspSource/);
  assert.throws(() => reportCsp('', 'abc'), /cspSource/);
});

test('nonces are fresh and what the server accepts', () => {
  const a = makeNonce();
  assert.match(a, /^[A-Za-z0-9_-]{32}$/);
  assert.notEqual(a, makeNonce());
});

test('the policy is the first thing in <head>', () => {
  const csp = reportCsp(SOURCE, 'n0nce');
  const page = withCsp('<!DOCTYPE html><html lang="en"><head data-x="1"><script nonce="n0nce">1</script></head><body></body></html>', csp);
  assert.match(page, /^<!DOCTYPE html><html lang="en"><head data-x="1"><meta http-equiv="Content-Security-Policy" content="default-src 'none'; [^"]+"><script/);
  assert.equal((page.match(/Content-Security-Policy/g) ?? []).length, 1);
  assert.match(withCsp('<html><body>x</body></html>', csp), /^<html><head><meta http-equiv="Content-Security-Policy"[^>]+><\/head><body>/);
  assert.match(withCsp('<p>x</p>', csp), /^<head><meta [^>]+><\/head><p>x<\/p>$/);
  // <header> is not <head>
  assert.match(withCsp('<html><header>h</header></html>', csp), /^<html><head><meta /);
});

test('only a well-formed reveal from the page is acted on', () => {
  assert.deepEqual(parsePageMessage({ type: 'reveal', file: '/w/model.py', line: 7 }), { type: 'reveal', file: '/w/model.py', line: 7 });
  assert.deepEqual(parsePageMessage({ type: 'reveal', file: 'C:\\w\\model.py', line: 1, extra: 'ignored' }), { type: 'reveal', file: 'C:\\w\\model.py', line: 1 });
  for (const bad of [
    null,
    'reveal',
    { type: 'reveal', file: 'model.py', line: 7 }, // relative
    { type: 'reveal', file: '/w/model.py', line: 0 },
    { type: 'reveal', file: '/w/model.py', line: 2.5 },
    { type: 'reveal', file: '/w/model.py', line: '7' },
    { type: 'reveal', file: '/w/model.py', line: 1e9 },
    { type: 'reveal', file: '/w/a\0b.py', line: 3 },
    { type: 'reveal', file: 42, line: 3 },
    { type: 'cursor', file: '/w/model.py', line: 3 },
    { type: 'openExternal', url: 'https://example.com' },
    { type: 'Compile' },
    { type: ['compile'] },
    { kind: 'compile' },
  ]) {
    assert.equal(parsePageMessage(bad), undefined, JSON.stringify(bad));
  }
});

test('the cursor goes to the page as a 1-based line', () => {
  assert.deepEqual(cursorMessage('/w/model.py', 0), { type: 'cursor', file: '/w/model.py', line: 1 });
});

test('a page without a report says why, escaped', () => {
  const page = messagePage('gpt_block_example has no compile result yet; <compile> it first', 'n0nce');
  assert.match(page, /<style nonce="n0nce">/);
  assert.match(page, /&lt;compile&gt; it first/);
  assert.doesNotMatch(page, /<script/);
});

test('the no-result page asks to compile with nothing but its type: the extension knows the file', () => {
  assert.deepEqual(parsePageMessage({ type: 'compile' }), { type: 'compile' });
  // whatever else comes with it is dropped: no target, no file, no command is taken from the page
  assert.deepEqual(parsePageMessage({ type: 'compile', command: 'workbench.action.terminal.new', file: '/etc/passwd' }), { type: 'compile' });
});

test('the no-result page has the compile button only when asked, its script by nonce', () => {
  const page = messagePage('Nothing in mlp.py has a compile result yet; compile a target first.', 'n0nce', true);
  assert.match(page, new RegExp(`<button id="compile" type="button">${COMPILE_BUTTON}</button>`));
  const scripts = [...page.matchAll(/<script\b([^>]*)>/g)].map((m) => m[1]);
  assert.deepEqual(scripts, [' nonce="n0nce"']);
  assert.match(page, /postMessage\(\{ type: "compile" \}\)/);
  assert.equal(parsePageMessage({ type: 'compile' })?.type, 'compile'); // what the script posts is accepted
  assert.doesNotMatch(messagePage('x', 'n0nce'), /<button|<script/);
});
