import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { buildViewModel, byWhatCanBeWon, CollectiveRow, regionsAtLine, RegionRow, targetAtLine } from '../../src/logic/regionsModel';
import { formatLines, formatMs, formatSpeedup, lineBlocks, timeBar } from '../../src/logic/format';
import { normalizeRegions } from '../../src/logic/protocol';

const raw = {
  uri: 'file:///w/gpt_block.py',
  version: 3,
  targets: [
    {
      name: 'gpt_block_example',
      line: 91,
      status: 'ok',
      message: '',
      speedup: 1.8,
      compiledMs: 0.5,
      eagerMs: 0.9,
      regions: [
        { id: 'R0', executor: 'triton', ops: ['layer_norm', 'add'], lines: [76, 77], timeMs: 0.01, eagerMs: 0.04, boundary: { reason: 'library call', detail: 'matmul' } },
        { id: 'R1', executor: 'torch', ops: ['linear'], lines: [34], timeMs: 0.2, eagerMs: 0.2, boundary: null },
      ],
    },
    { name: 'gpt_block_sdpa_example', line: 98, status: 'not compiled', message: null, speedup: null, compiledMs: null, eagerMs: null, regions: [] },
  ],
};

test('normalizeRegions keeps good data and repairs bad', () => {
  const r = normalizeRegions(raw, 'x');
  assert.equal(r.version, 3);
  assert.equal(r.targets[0].regions[0].lines.length, 2);
  const bad = normalizeRegions({ targets: [{ name: 't', regions: [{ id: 1, lines: [3, -1, 'x'], timeMs: 'fast' }] }] }, 'file:///a.py');
  assert.equal(bad.uri, 'file:///a.py');
  assert.deepEqual(bad.targets[0].regions[0].lines, [3]);
  assert.equal(bad.targets[0].regions[0].timeMs, null);
  assert.equal(bad.targets[0].regions[0].id, '1');
  assert.equal(bad.targets[0].status, 'not compiled');
  assert.deepEqual(normalizeRegions(null, 'u').targets, []);
});

test('view model: targets with their regions, executor, lines and a time bar', () => {
  const vm = buildViewModel(normalizeRegions(raw, ''));
  assert.equal(vm.message, undefined);
  assert.equal(vm.rows.length, 2);
  const [t0, t1] = vm.rows;
  assert.equal(t0.label, 'gpt_block_example');
  assert.equal(t0.description, '2 regions · 1.80x vs eager · 0.50 ms / 0.90 ms eager');
  assert.equal(t0.icon, 'pass');
  assert.equal(t0.children[0].label, 'R0 · triton · L77–78');
  assert.equal(t0.children[0].description, '██░░░░░░ 10.0 µs / 40.0 µs eager');
  assert.match(t0.children[0].tooltip, /Ends because: library call: matmul/);
  assert.match(t0.children[0].tooltip, /4\.00x/);
  assert.deepEqual(t0.children[0].lines, [76, 77]);
  assert.equal(t0.children[1].description, '████████ 0.20 ms / 0.20 ms eager');
  assert.equal(t1.description, 'not compiled');
  assert.equal(t1.children.length, 0);
});

test('view model messages', () => {
  assert.match(buildViewModel(null).message!, /Open a Python file/);
  assert.match(buildViewModel(null, 'server down').message!, /server down/);
  assert.match(buildViewModel({ uri: 'u', version: null, targets: [] }).message!, /@compiler.example/);
});

test('error and not-allowed targets', () => {
  const vm = buildViewModel(
    normalizeRegions({ targets: [{ name: 'a', line: 1, status: 'error', message: 'ZeroDivisionError: x' }, { name: 'b', line: 5, status: 'not allowed' }] }, 'u'),
  );
  assert.equal(vm.rows[0].description, 'failed: ZeroDivisionError: x');
  assert.equal(vm.rows[0].icon, 'error');
  assert.match(vm.rows[1].description, /not run/);
  assert.equal(vm.rows[1].icon, 'shield');
});

test('target and region at the cursor', () => {
  const r = normalizeRegions(raw, '');
  assert.equal(targetAtLine(r, 34)?.name, 'gpt_block_example'); // a line in its regions
  assert.equal(targetAtLine(r, 99)?.name, 'gpt_block_sdpa_example'); // inside the second def
  assert.equal(targetAtLine(r, 97)?.name, 'gpt_block_sdpa_example'); // on its decorator
  assert.equal(targetAtLine(r, 5), undefined); // above every target, in no region
  assert.equal(regionsAtLine(r, 77)[0].region.id, 'R0');
  assert.equal(regionsAtLine(r, 10).length, 0);
  assert.equal(targetAtLine({ uri: '', version: null, targets: [] }, 3), undefined);
});

test('formatting', () => {
  assert.equal(formatLines([5, 3, 4, 9, 9]), 'L4–6, L10');
  assert.equal(formatLines([]), '');
  assert.deepEqual(lineBlocks([7, 1, 2, 3]), [[1, 3], [7, 7]]);
  assert.equal(formatMs(null), '–');
  assert.equal(formatMs(0.0123), '12.3 µs');
  assert.equal(formatMs(0.00001), '< 0.1 µs');
  assert.equal(formatMs(1.5), '1.50 ms');
  assert.equal(formatMs(42.42), '42.4 ms');
  assert.equal(formatMs(1234), '1234 ms');
  assert.equal(formatSpeedup(1.234), '1.23x');
  assert.equal(formatSpeedup(12.3), '12x');
  assert.equal(formatSpeedup(null), '');
  assert.equal(timeBar(1, 2, 10), '█████░░░░░');
  assert.equal(timeBar(3, 2, 4), '███▸');
  assert.equal(timeBar(null, 2, 4), '░░░░');
  assert.equal(timeBar(0.001, 100, 4), '█░░░');
});

const roof = (minMs: number, estimate: boolean, pctOfPeak: number | null) => ({ device: 'H100', minMs, bound: 'memory', pctOfPeak, estimate, text: '' });

test('regions sort by what can be won; estimates after, largest roofline first', () => {
  const r = normalizeRegions(
    {
      targets: [
        {
          name: 't',
          status: 'ok',
          regions: [
            { id: 'R0', executor: 'triton', ops: [], lines: [], timeMs: 0.01, eagerMs: 0.02, roofline: roof(0.009, false, 90), headroomMs: 0.001 },
            { id: 'R1', executor: 'torch', ops: [], lines: [], timeMs: 0.5, eagerMs: 0.5, roofline: roof(0.1, false, 20), headroomMs: 0.4 },
            { id: 'R2', executor: 'torch', ops: [], lines: [], timeMs: null, eagerMs: null, roofline: roof(0.002, true, null), headroomMs: null },
            { id: 'R3', executor: 'torch', ops: [], lines: [], timeMs: null, eagerMs: null, roofline: roof(0.2, true, null), headroomMs: null },
          ],
          previews: [
            { id: 'P0', executor: 'nvfuser', ops: 4, lines: [9], estMs: 0.003, device: 'H100', text: '' },
            { id: 'P0', executor: 'triton', ops: 4, lines: [9], estMs: 0.003, device: 'H100', text: 'est. 3.0 µs on H100' },
          ],
        },
      ],
    },
    'u',
  );
  assert.deepEqual(byWhatCanBeWon(r.targets[0].regions).map((x) => x.id), ['R1', 'R0', 'R3', 'R2']);
  const rows = buildViewModel(r).rows[0].children as RegionRow[];
  assert.deepEqual(rows.map((x) => x.regionId), ['R1', 'R0', 'R3', 'R2', 'P0']);
  assert.match(rows[0].description, /20% of peak$/);
  assert.match(rows[0].tooltip, /Can be won: 0\.40 ms/);
  assert.match(rows[2].description, /est\. 0\.20 ms on H100$/);
  assert.equal(rows[4].label, 'P0 · triton (preview) · L10');
  assert.equal(rows[4].description, 'est. 3.0 µs on H100');
  assert.ok(rows[4].preview);
});

test('a training target: backward regions and previews are labelled as such', () => {
  const r = normalizeRegions(
    {
      targets: [
        {
          name: 'train_step',
          line: 10,
          status: 'ok',
          speedup: 1.5,
          compiledMs: 1,
          eagerMs: 1.5,
          regions: [
            { id: 'R0', program: 'forward', executor: 'triton', ops: ['mul', 'add'], lines: [4, 5], timeMs: 0.02, eagerMs: 0.04, headroomMs: 0.01 },
            { id: 'B0', program: 'backward', executor: 'triton', ops: ['mul'], lines: [4, 5], timeMs: 0.03, eagerMs: 0.05, headroomMs: 0.02 },
          ],
          previews: [
            { id: 'P0', program: 'forward', executor: 'triton', ops: 2, lines: [4], estMs: 0.002, device: 'H100', text: '' },
            { id: 'PB0', program: 'backward', executor: 'triton', ops: 3, lines: [4], estMs: 0.004, device: 'H100', text: '' },
            { id: 'PB1', program: 'backward', executor: 'triton', ops: 1, lines: [5], estMs: null, device: null, text: '' },
          ],
        },
      ],
    },
    'u',
  );
  const t = buildViewModel(r).rows[0];
  assert.equal(t.description, '2 regions (1 backward) · 1.50x vs eager · 1.00 ms / 1.50 ms eager');
  const byId = new Map((t.children as RegionRow[]).map((c) => [c.key, c]));
  const b0 = byId.get('train_step/B0')!;
  assert.equal(b0.program, 'backward');
  assert.equal(b0.label, 'B0 · triton · L5–6');
  assert.match(b0.description, /^backward · .* 30\.0 µs \/ 50\.0 µs eager$/);
  assert.match(b0.tooltip, /^Backward region B0 — triton/);
  const r0 = byId.get('train_step/R0')!;
  assert.equal(r0.program, 'forward');
  assert.doesNotMatch(r0.description, /backward/);
  assert.match(r0.tooltip, /^Region R0 — triton/);
  const pb0 = byId.get('train_step/triton/PB0')!;
  assert.equal(pb0.description, 'backward · est. 4.0 µs on H100');
  assert.match(pb0.tooltip, /in the backward/);
  assert.ok(pb0.preview);
  assert.equal(byId.get('train_step/triton/PB1')!.description, 'backward'); // no estimate
  assert.equal(byId.get('train_step/triton/P0')!.description, 'est. 2.0 µs on H100');
  // At the cursor the forward region comes first, though the backward one covers the line too.
  assert.deepEqual(regionsAtLine(r, 4).map((h) => h.region.id), ['R0', 'B0']);
});

test('collectives are listed beside the regions, each at its line', () => {
  const r = normalizeRegions(
    {
      targets: [
        {
          name: 'ddp_step',
          line: 20,
          status: 'ok',
          speedup: 1.2,
          compiledMs: 2,
          eagerMs: 2.4,
          regions: [{ id: 'R0', executor: 'torch', ops: ['mul'], lines: [6], timeMs: 0.1, eagerMs: 0.1, headroomMs: null }],
          collectives: [
            {
              op: 'all_reduce', kind: 'traced', program: 'forward', region: 'R1', bytes: 2 * 2 ** 20, groupSize: 2, line: 7,
              timeMs: { min: 0.2, median: 0.25, max: 0.31 }, estimate: 'est 1.2 ms on 64x8xH100 (ring)', estimateMs: 1.2,
              exposedMs: 0.3, overlappedBy: ['R2', 'R3'],
            },
            { op: 'all_reduce', kind: 'ddp-bucket', program: 'backward', region: '', bytes: 512, groupSize: 2, line: null, timeMs: null, estimate: '', overlappedBy: [] },
            { op: 7, line: -3, timeMs: { min: 'x' }, overlappedBy: ['R1', 2] },
          ],
        },
      ],
    },
    'u',
  );
  const c = r.targets[0].collectives;
  assert.equal(c.length, 3);
  assert.deepEqual(c[2], {
    op: '?', kind: '', program: 'forward', region: '', bytes: null, groupSize: null, line: null, timeMs: null,
    estimate: '', estimateMs: null, exposedMs: null, overlappedBy: ['R1'],
  });
  assert.deepEqual(normalizeRegions({ targets: [{ name: 'old server' }] }, 'u').targets[0].collectives, []);

  const t = buildViewModel(r).rows[0];
  assert.equal(t.description, '1 region · 3 collectives · 1.20x vs eager · 2.00 ms / 2.40 ms eager');
  assert.deepEqual(t.children.map((x) => x.kind), ['region', 'collective', 'collective', 'collective']);
  const [traced, bucket] = t.children.slice(1) as CollectiveRow[];
  assert.equal(traced.label, 'all_reduce · 2.0 MB · L8');
  assert.equal(traced.description, '0.31 ms (slowest rank) · overlapped by R2, R3');
  assert.deepEqual(traced.lines, [7]);
  assert.equal(traced.icon, 'radio-tower');
  assert.match(traced.tooltip, /^all_reduce \(traced\) in the forward program, region R1$/m);
  assert.match(traced.tooltip, /Bytes: 2\.0 MB a rank over 2 ranks/);
  assert.match(traced.tooltip, /0\.20 ms \/ 0\.25 ms \/ 0\.31 ms \(fastest \/ median \/ slowest rank\)/);
  assert.match(traced.tooltip, /Model: est 1\.2 ms on 64x8xH100 \(ring\), 0\.30 ms exposed/);
  assert.equal(bucket.label, 'all_reduce · 512 B · DDP bucket');
  assert.equal(bucket.description, 'backward · not overlapped');
  assert.deepEqual(bucket.lines, []);
  assert.match(bucket.tooltip, /Line: none in this file/);
  assert.notEqual(traced.key, bucket.key);
  // An estimate only (no launch measured it): the model's words.
  const est = buildViewModel(normalizeRegions({ targets: [{ name: 'x', status: 'ok', collectives: [{ op: 'broadcast', bytes: 4, line: 1, estimate: 'est 3.0 µs on 8xH100 (tree)' }] }] }, 'u'));
  assert.equal(est.rows[0].children[0].description, 'est 3.0 µs on 8xH100 (tree) · not overlapped');
});
