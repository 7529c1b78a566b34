import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { normalizeReportTargets, PageCache, pageKey, parseRestoredState, pickReportTarget, ReportTarget, targetContaining } from '../../src/logic/reportFollow';

// Two targets: model_example (decorator line 10 to line 13), other_example (20 to 25).
const MODEL: ReportTarget = { name: 'model_example', line: 10, endLine: 13, version: 4 };
const OTHER: ReportTarget = { name: 'other_example', line: 20, endLine: 25, version: 7 };

test('one target with a result is shown wherever the cursor is; none: null', () => {
  assert.equal(pickReportTarget([MODEL], 0, null), 'model_example');
  assert.equal(pickReportTarget([MODEL, { ...OTHER, version: null }], 22, null), 'model_example');
  assert.equal(pickReportTarget([{ ...MODEL, version: null }, { ...OTHER, version: null }], 11, 'model_example'), null);
  assert.equal(pickReportTarget([], 3, 'model_example'), null);
});

test('with several results: the function under the cursor, else the one preferred, else the latest', () => {
  const both = [MODEL, OTHER];
  for (const line of [10, 11, 13]) {
    assert.equal(pickReportTarget(both, line, 'other_example'), 'model_example', `line ${line}`);
  }
  assert.equal(pickReportTarget(both, 20, null), 'other_example'); // the decorator's line is the target's
  assert.equal(pickReportTarget(both, 25, 'model_example'), 'other_example');
  // outside both functions (the model's code above them): the one preferred (shown last here)
  assert.equal(pickReportTarget(both, 3, 'model_example'), 'model_example');
  assert.equal(pickReportTarget(both, 14, 'other_example'), 'other_example');
  // nothing preferred, or a preferred one without a result: the latest result
  assert.equal(pickReportTarget(both, 3, null), 'other_example');
  assert.equal(pickReportTarget([{ ...MODEL, version: 9 }, OTHER], undefined, 'gone_example'), 'model_example');
  // a cursor in a function without a result picks as outside
  assert.equal(pickReportTarget([MODEL, OTHER, { name: 'third', line: 30, endLine: 40, version: null }], 35, 'model_example'), 'model_example');
});

test('targetContaining: only a target with a result, by its whole span', () => {
  assert.equal(targetContaining([MODEL, OTHER], 12)?.name, 'model_example');
  assert.equal(targetContaining([MODEL, OTHER], 9), undefined);
  assert.equal(targetContaining([MODEL, OTHER], 26), undefined);
  assert.equal(targetContaining([{ ...MODEL, version: null }], 12), undefined);
});

test('the listed targets are checked', () => {
  assert.deepEqual(
    normalizeReportTargets([
      { name: 'a', line: 3, endLine: 5, version: 2 },
      { name: 'b', line: 8, endLine: 2, version: null }, // an end before the start: one line
      { name: 'c', line: 9 },
      { name: '', line: 1, endLine: 2, version: 1 },
      { name: 'd', line: -1, endLine: 2, version: 1 },
      { name: 'e', line: 1.5, endLine: 2, version: 1 },
      { name: 'f', line: 1, endLine: 2, version: '3' },
      null,
      'g',
    ]),
    [
      { name: 'a', line: 3, endLine: 5, version: 2 },
      { name: 'b', line: 8, endLine: 8, version: null },
      { name: 'c', line: 9, endLine: 9, version: null },
      { name: 'f', line: 1, endLine: 2, version: null },
    ],
  );
  assert.deepEqual(normalizeReportTargets(undefined), []);
  assert.deepEqual(normalizeReportTargets({ name: 'a' }), []);
});

test('a page is kept per file, target and result version', () => {
  const key = pageKey('file:///w/model.py', 'model_example', 4);
  assert.equal(key, pageKey('file:///w/model.py', 'model_example', 4));
  assert.notEqual(key, pageKey('file:///w/model.py', 'model_example', 5)); // a new result: rendered again
  assert.notEqual(key, pageKey('file:///w/model.py', 'other_example', 4));
  assert.notEqual(key, pageKey('file:///w/other.py', 'model_example', 4));
  // no separator makes two different triples one key
  assert.notEqual(pageKey('file:///w/a|b', 'c', 1), pageKey('file:///w/a', 'b|c', 1));
  assert.notEqual(pageKey('file:///w/a","b', 'c', 1), pageKey('file:///w/a', 'b","c', 1));
});

test('the page cache drops the least recently used first', () => {
  const cache = new PageCache(2);
  const page = (target: string) => ({ html: `<p>${target}</p>`, nonce: 'n'.repeat(32), target, files: [] });
  cache.put('a', page('a'));
  cache.put('b', page('b'));
  assert.equal(cache.get('a')?.target, 'a'); // a used: b is the oldest now
  cache.put('c', page('c'));
  assert.equal(cache.size, 2);
  assert.equal(cache.get('b'), undefined);
  assert.equal(cache.get('a')?.html, '<p>a</p>');
  assert.equal(cache.get('c')?.target, 'c');
  cache.put('c', page('c2')); // the same key again replaces it
  assert.equal(cache.size, 2);
  assert.equal(cache.get('c')?.target, 'c2');
  cache.clear();
  assert.equal(cache.size, 0);
});

test('the state a reload restores from is checked', () => {
  assert.deepEqual(parseRestoredState({ uri: 'file:///w/model.py', target: 'model_example' }), { uri: 'file:///w/model.py', target: 'model_example' });
  assert.deepEqual(parseRestoredState({ uri: 'file:///w/model.py', target: null }), { uri: 'file:///w/model.py', target: null });
  assert.deepEqual(parseRestoredState({ uri: 'file:///w/m.py', target: 'ünï_example2' }), { uri: 'file:///w/m.py', target: 'ünï_example2' });
  // a target that is no Python name is dropped (the file is still shown)
  assert.deepEqual(parseRestoredState({ uri: 'file:///w/model.py', target: 'a b' }), { uri: 'file:///w/model.py', target: null });
  assert.deepEqual(parseRestoredState({ uri: 'file:///w/model.py', target: 3 }), { uri: 'file:///w/model.py', target: null });
  for (const bad of [undefined, null, 'file:///w/model.py', { uri: 'https://example.com/x.py' }, { uri: 'untitled:Untitled-1' }, { uri: 7 }, { uri: `file:///${'a'.repeat(9000)}` }]) {
    assert.equal(parseRestoredState(bad), undefined, JSON.stringify(bad)?.slice(0, 60));
  }
});
