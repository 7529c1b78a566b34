// normalizeRegions: the `program` of each region and preview (schema 4, docs/lsp.md).
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import { normalizeRegions } from '../../src/logic/protocol';

const region = (id: string, program?: unknown) => ({ id, executor: 'triton', ops: ['add'], lines: [3], timeMs: 0.01, eagerMs: 0.02, ...(program === undefined ? {} : { program }) });
const preview = (id: string, program?: unknown) => ({ id, executor: 'triton', ops: 2, lines: [3], estMs: 0.001, device: 'H100', text: '', ...(program === undefined ? {} : { program }) });

test('program is parsed for regions and previews of a schema 4 server', () => {
  const r = normalizeRegions(
    {
      targets: [
        {
          name: 'train_step',
          status: 'ok',
          regions: [region('R0', 'forward'), region('B0', 'backward'), region('B1', 'backward')],
          previews: [preview('P0', 'forward'), preview('PB0', 'backward')],
        },
      ],
    },
    'u',
  );
  const t = r.targets[0];
  assert.deepEqual(t.regions.map((g) => [g.id, g.program]), [['R0', 'forward'], ['B0', 'backward'], ['B1', 'backward']]);
  assert.deepEqual(t.previews.map((p) => [p.id, p.program]), [['P0', 'forward'], ['PB0', 'backward']]);
});

test('an older server sends no program: every region and preview is forward', () => {
  const r = normalizeRegions({ targets: [{ name: 't', status: 'ok', regions: [region('R0'), region('R1')], previews: [preview('P0')] }] }, 'u');
  assert.deepEqual(r.targets[0].regions.map((g) => g.program), ['forward', 'forward']);
  assert.equal(r.targets[0].previews[0].program, 'forward');
});

test('a mistyped program is read as forward, not passed on', () => {
  const r = normalizeRegions({ targets: [{ name: 't', regions: [region('R0', 7), region('R1', null), region('R2', 'Backward')], previews: [preview('P0', {})] }] }, 'u');
  assert.deepEqual(r.targets[0].regions.map((g) => g.program), ['forward', 'forward', 'forward']);
  assert.equal(r.targets[0].previews[0].program, 'forward');
});
