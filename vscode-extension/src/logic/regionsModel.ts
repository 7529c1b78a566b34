// View model of the regions view, built from a `fusionlens/regions` result. No `vscode` import.
import type { CollectiveInfo, PreviewInfo, Program, RegionInfo, RegionsResult, TargetInfo } from './protocol';
import { formatBytes, formatLines, formatMs, formatSpeedup, timeBar, truncate } from './format';

export type Icon =
  | 'pass'
  | 'error'
  | 'loading~spin'
  | 'circle-outline'
  | 'shield'
  | 'zap'
  | 'flame'
  | 'circuit-board'
  | 'symbol-event'
  | 'radio-tower';

export interface RegionRow {
  kind: 'region';
  key: string;
  target: string;
  regionId: string;
  /** Forward, or the backward of a training target (its description says so). */
  program: Program;
  label: string;
  description: string;
  tooltip: string;
  icon: Icon;
  lines: number[];
  /** A region an executor that cannot run here would make (no kernel to show, nothing timed). */
  preview?: boolean;
}

/** A torch.distributed collective of the target (all_reduce, a DDP bucket...), at its line. */
export interface CollectiveRow {
  kind: 'collective';
  key: string;
  target: string;
  program: Program;
  label: string;
  description: string;
  tooltip: string;
  icon: Icon;
  /** Its 0-based line here, [] where it has none in this file (a DDP bucket's hook). */
  lines: number[];
}

export interface TargetRow {
  kind: 'target';
  key: string;
  target: string;
  label: string;
  description: string;
  tooltip: string;
  icon: Icon;
  line: number;
  children: Array<RegionRow | CollectiveRow>;
}

export interface ViewModel {
  rows: TargetRow[];
  /** Shown in place of rows when there is nothing to list. */
  message: string | undefined;
}

function boundaryText(b: unknown): string {
  if (!b) {
    return '';
  }
  if (typeof b === 'string') {
    return b;
  }
  if (typeof b === 'object') {
    const o = b as Record<string, unknown>;
    return [o.reason, o.detail].filter((x) => typeof x === 'string' && x).join(': ');
  }
  return '';
}

function targetIcon(status: string): Icon {
  switch (status) {
    case 'ok':
      return 'pass';
    case 'error':
      return 'error';
    case 'compiling':
      return 'loading~spin';
    case 'not allowed':
      return 'shield';
    default:
      return 'circle-outline';
  }
}

function executorIcon(executor: string): Icon {
  switch (executor) {
    case 'triton':
      return 'flame';
    case 'nvfuser':
      return 'zap';
    case 'torch':
      return 'circuit-board';
    default:
      return 'symbol-event';
  }
}

/** "est. 4.1 µs on H100" (the program ran elsewhere), "45% of peak", or "" without a roofline. */
export function rooflineText(r: RegionInfo): string {
  const line = r.roofline;
  if (!line || line.minMs === null) {
    return '';
  }
  if (line.estimate) {
    return `est. ${formatMs(line.minMs)} on ${line.device}`;
  }
  return line.pctOfPeak !== null ? `${line.pctOfPeak.toFixed(0)}% of peak` : `roofline ${formatMs(line.minMs)}`;
}

/**
 * Regions by what can be won (measured time minus the roofline minimum), most first; where
 * nothing was measured on that GPU (estimates), the largest roofline minimum first.
 */
export function byWhatCanBeWon(regions: RegionInfo[]): RegionInfo[] {
  const key = (r: RegionInfo): [number, number] =>
    r.headroomMs !== null ? [0, -r.headroomMs] : [1, -(r.roofline?.minMs ?? 0)];
  return [...regions].sort((a, b) => {
    const [ka, kb] = [key(a), key(b)];
    return ka[0] - kb[0] || ka[1] - kb[1];
  });
}

/** A backward row's description starts with "backward"; a forward row's is unchanged. */
function withProgram(program: Program, description: string): string {
  if (program !== 'backward') {
    return description;
  }
  return description ? `backward · ${description}` : 'backward';
}

export function regionRow(target: string, r: RegionInfo): RegionRow {
  const roof = rooflineText(r);
  const timing =
    (r.timeMs !== null
      ? `${timeBar(r.timeMs, r.eagerMs, 8)} ${formatMs(r.timeMs)}${r.eagerMs !== null ? ` / ${formatMs(r.eagerMs)} eager` : ''}`
      : 'not timed') + (roof ? ` · ${roof}` : '');
  const lines = formatLines(r.lines);
  const ratio = r.timeMs !== null && r.eagerMs !== null && r.timeMs > 0 ? formatSpeedup(r.eagerMs / r.timeMs) : '';
  const ops = r.ops.length ? r.ops.join(', ') : '(no ops)';
  const boundary = boundaryText(r.boundary);
  const tooltip = [
    `${r.program === 'backward' ? 'Backward region' : 'Region'} ${r.id} — ${r.executor}`,
    `Lines: ${lines || '(none in this file)'}`,
    `Time: ${formatMs(r.timeMs)} compiled, ${formatMs(r.eagerMs)} eager${ratio ? ` (${ratio})` : ''}`,
    `Ops (${r.ops.length}): ${truncate(ops, 400)}`,
    r.roofline?.text ? `Roofline: ${r.roofline.text}` : '',
    r.headroomMs !== null ? `Can be won: ${formatMs(r.headroomMs)} (measured minus the roofline minimum)` : '',
    boundary ? `Ends because: ${boundary}` : '',
  ]
    .filter((x) => x)
    .join('\n');
  return {
    kind: 'region',
    key: `${target}/${r.id}`,
    target,
    regionId: r.id,
    program: r.program,
    label: lines ? `${r.id} · ${r.executor} · ${lines}` : `${r.id} · ${r.executor}`,
    description: withProgram(r.program, timing),
    tooltip,
    icon: executorIcon(r.executor),
    lines: r.lines,
  };
}

export function previewRow(target: string, p: PreviewInfo): RegionRow {
  const lines = formatLines(p.lines);
  const est = p.estMs !== null ? `est. ${formatMs(p.estMs)}${p.device ? ` on ${p.device}` : ''}` : '';
  return {
    kind: 'region',
    key: `${target}/${p.executor}/${p.id}`,
    target,
    regionId: p.id,
    program: p.program,
    label: `${p.id} · ${p.executor} (preview)${lines ? ` · ${lines}` : ''}`,
    description: withProgram(p.program, est),
    tooltip: [
      `${p.id}: what ${p.executor} would fuse${p.program === 'backward' ? ' in the backward' : ''} where it can run (${p.ops} ops)`,
      p.text ? `Roofline: ${p.text}` : '',
    ]
      .filter((x) => x)
      .join('\n'),
    icon: executorIcon(p.executor),
    lines: p.lines,
    preview: true,
  };
}

function collectiveTime(c: CollectiveInfo): string {
  if (c.timeMs) {
    return `${formatMs(c.timeMs.max)} (slowest rank)`;
  }
  return c.estimate;
}

function overlapText(c: CollectiveInfo): string {
  return c.overlappedBy.length ? `overlapped by ${c.overlappedBy.join(', ')}` : 'not overlapped';
}

/** `all_reduce · 2.0 MB · L8`, described `0.31 ms (slowest rank) · overlapped by R1`. */
export function collectiveRow(target: string, c: CollectiveInfo, index: number): CollectiveRow {
  const lines = c.line !== null ? [c.line] : [];
  const where = c.line !== null ? formatLines(lines) : c.kind === 'ddp-bucket' ? 'DDP bucket' : '';
  const time = collectiveTime(c);
  const spread = c.timeMs
    ? `Time: ${formatMs(c.timeMs.min)} / ${formatMs(c.timeMs.median)} / ${formatMs(c.timeMs.max)} (fastest / median / slowest rank)`
    : '';
  const tooltip = [
    `${c.op} (${c.kind || 'collective'}) in the ${c.program} program${c.region ? `, region ${c.region}` : ''}`,
    `Bytes: ${formatBytes(c.bytes)} a rank${c.groupSize !== null ? ` over ${c.groupSize} ranks` : ''}`,
    spread,
    c.estimate ? `Model: ${c.estimate}${c.exposedMs !== null ? `, ${formatMs(c.exposedMs)} exposed` : ''}` : '',
    `Overlap: ${c.overlappedBy.length ? `regions ${c.overlappedBy.join(', ')} run between its issue and its wait` : 'none (it runs synchronously)'}`,
    c.line === null ? 'Line: none in this file (run by a hook, or another file\'s)' : '',
  ]
    .filter((x) => x)
    .join('\n');
  return {
    kind: 'collective',
    key: `${target}/collective/${index}`,
    target,
    program: c.program,
    label: [c.op, formatBytes(c.bytes), where].filter((x) => x).join(' · '),
    description: withProgram(c.program, [time, overlapText(c)].filter((x) => x).join(' · ')),
    tooltip,
    icon: 'radio-tower',
    lines,
  };
}

/** One executor's previews (Triton's where there are): another's repeat the same regions. */
function shownPreviews(previews: PreviewInfo[]): PreviewInfo[] {
  const executor = previews.some((p) => p.executor === 'triton') ? 'triton' : previews[0]?.executor;
  return previews.filter((p) => p.executor === executor);
}

export function targetRow(t: TargetInfo): TargetRow {
  let description: string;
  switch (t.status) {
    case 'ok': {
      const sp = formatSpeedup(t.speedup);
      const n = t.regions.length;
      const backward = t.regions.filter((r) => r.program === 'backward').length;
      const nc = (t.collectives ?? []).length;
      description = [
        `${n} region${n === 1 ? '' : 's'}${backward ? ` (${backward} backward)` : ''}`,
        nc ? `${nc} collective${nc === 1 ? '' : 's'}` : '',
        sp ? `${sp} vs eager` : '',
        t.compiledMs !== null ? `${formatMs(t.compiledMs)} / ${formatMs(t.eagerMs)} eager` : '',
      ]
        .filter((x) => x)
        .join(' · ');
      break;
    }
    case 'error':
      description = `failed${t.message ? `: ${truncate(t.message, 60)}` : ''}`;
      break;
    case 'not allowed':
      description = 'not run (execution not allowed)';
      break;
    default:
      description = t.status;
  }
  return {
    kind: 'target',
    key: t.name,
    target: t.name,
    label: t.name,
    description,
    tooltip: `${t.name} (line ${t.line + 1}): ${t.status}${t.message ? `\n${t.message}` : ''}`,
    icon: targetIcon(t.status),
    line: t.line,
    children: [
      ...byWhatCanBeWon(t.regions).map((r) => regionRow(t.name, r)),
      ...(t.collectives ?? []).map((c, i) => collectiveRow(t.name, c, i)),
      ...shownPreviews(t.previews ?? []).map((p) => previewRow(t.name, p)),
    ],
  };
}

export function buildViewModel(result: RegionsResult | null | undefined, why?: string): ViewModel {
  if (!result) {
    return { rows: [], message: why ?? 'Open a Python file to see its FusionLens regions.' };
  }
  if (result.targets.length === 0) {
    return {
      rows: [],
      message: 'No compile targets in this file. Mark one with @compiler.example (a function returning (callable, args)).',
    };
  }
  return { rows: result.targets.map(targetRow), message: undefined };
}

/** The target the cursor is in: its regions cover the line, else the nearest `def` above it. */
export function targetAtLine(result: RegionsResult | null | undefined, line: number): TargetInfo | undefined {
  if (!result || result.targets.length === 0) {
    return undefined;
  }
  if (result.targets.length === 1) {
    return result.targets[0];
  }
  const covering = result.targets.filter((t) => t.regions.some((r) => r.lines.includes(line)));
  if (covering.length === 1) {
    return covering[0];
  }
  const sorted = [...result.targets].sort((a, b) => a.line - b.line);
  let best: TargetInfo | undefined;
  for (const t of sorted) {
    // The decorator sits one line above the def; count it as part of the target.
    if (t.line - 1 <= line) {
      best = t;
    }
  }
  return best;
}

/**
 * Regions (with their target) whose lines include `line`, best first: the forward program's
 * before the backward's (a backward region covers the same lines), then the smallest.
 */
export function regionsAtLine(result: RegionsResult | null | undefined, line: number): Array<{ target: TargetInfo; region: RegionInfo }> {
  if (!result) {
    return [];
  }
  const hits: Array<{ target: TargetInfo; region: RegionInfo }> = [];
  for (const t of result.targets) {
    for (const r of t.regions) {
      if (r.lines.includes(line)) {
        hits.push({ target: t, region: r });
      }
    }
  }
  const rank = (p: Program): number => (p === 'backward' ? 1 : 0);
  return hits.sort((a, b) => rank(a.region.program) - rank(b.region.program) || a.region.lines.length - b.region.lines.length);
}
