// Types of the FusionLens custom messages (docs/lsp.md). No `vscode` import.

export interface StatusParams {
  state: 'idle' | 'compiling' | 'failed';
  device: string;
  message: string;
  speedup: number | null;
  uri: string | null;
}

export type TargetStatus = 'not compiled' | 'compiling' | 'ok' | 'error' | 'not allowed';

/**
 * Which of a target's programs a region belongs to (schema 4): a training target's backward
 * regions are B0, B1..., its backward previews PB0.... Servers before schema 4 send no field:
 * everything is forward.
 */
export type Program = 'forward' | 'backward';

export interface RegionInfo {
  id: string;
  program: Program;
  executor: string;
  ops: string[];
  lines: number[];
  timeMs: number | null;
  eagerMs: number | null;
  boundary?: unknown;
  /** The least time it can take on a GPU (docs/roofline.md); null when the report has none. */
  roofline: RooflineInfo | null;
  /** What can be won: measured time minus the roofline minimum; null for an estimate. */
  headroomMs: number | null;
}

export interface RooflineInfo {
  device: string;
  minMs: number | null;
  bound: string;
  pctOfPeak: number | null;
  /** True when the program did not run on that GPU (a CPU): every figure is "est.". */
  estimate: boolean;
  text: string;
}

/** A region a fusion executor that cannot run here would make (a CPU machine). */
export interface PreviewInfo {
  id: string;
  program: Program;
  executor: string;
  ops: number;
  lines: number[];
  estMs: number | null;
  device: string | null;
  text: string;
}

/** A torch.distributed collective of the report (schema 5: `collectives`), at its line. */
export interface CollectiveInfo {
  op: string;
  /** "traced" (at the user's line) or the engine's own ("ddp-bucket": DDP's reducer). */
  kind: string;
  program: Program;
  /** The region that runs it ("" where a hook does). */
  region: string;
  bytes: number | null;
  groupSize: number | null;
  /** 0-based line in this document, null for another file's or one with no line. */
  line: number | null;
  /** Measured over the ranks of a launch: fastest, median, slowest rank (ms). */
  timeMs: { min: number; median: number; max: number } | null;
  /** The cost model's words, e.g. "est 1.2 ms on 64x8xH100 (ring)"; "" without one. */
  estimate: string;
  estimateMs: number | null;
  exposedMs: number | null;
  /** Regions that run between its issue and its wait. */
  overlappedBy: string[];
}

export interface TargetInfo {
  name: string;
  line: number;
  status: TargetStatus | string;
  message?: string | null;
  speedup: number | null;
  compiledMs: number | null;
  eagerMs: number | null;
  regions: RegionInfo[];
  previews: PreviewInfo[];
  collectives: CollectiveInfo[];
}

export interface RegionsResult {
  uri: string;
  version: number | null;
  targets: TargetInfo[];
}

export interface CompileResult {
  targets: string[];
  ok: boolean;
  /** Why nothing ran or what failed, when ok is false. */
  message?: string;
}

export const METHOD_REGIONS = 'fusionlens/regions';
export const METHOD_STATUS = 'fusionlens/status';
export const CMD_COMPILE = 'fusionlens.compile';
export const CMD_SHOW_TRACE = 'fusionlens.showTrace';
export const CMD_SHOW_KERNEL = 'fusionlens.showKernel';
export const CMD_CLEAR_CACHE = 'fusionlens.clearCache';
export const CMD_EXPORT_REPRO = 'fusionlens.exportRepro';
export const CMD_REPORT_HTML = 'fusionlens.reportHtml';

/** The answer of fusionlens.reportHtml: the page, or why there is none. */
export interface ReportHtmlResult {
  html: string | null;
  message?: string;
  target?: string;
  file?: string;
  /** The number of the result the page shows. */
  version?: number;
  /** The files whose lines the page shows, as the report names them. */
  files?: string[];
  /** The document's targets (logic/reportFollow.ts normalizes them). */
  targets?: unknown;
}

function num(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

function str(v: unknown): string {
  return typeof v === 'string' ? v : '';
}

function lineList(v: unknown): number[] {
  return Array.isArray(v) ? v.filter((l): l is number => typeof l === 'number' && l >= 0) : [];
}

/** Anything but "backward" (absent from an older server) is the forward program. */
function program(v: unknown): Program {
  return v === 'backward' ? 'backward' : 'forward';
}

function roofline(v: unknown): RooflineInfo | null {
  if (!v || typeof v !== 'object') {
    return null;
  }
  const o = v as Record<string, unknown>;
  return { device: str(o.device), minMs: num(o.minMs), bound: str(o.bound), pctOfPeak: num(o.pctOfPeak), estimate: o.estimate !== false, text: str(o.text) };
}

function preview(v: unknown): PreviewInfo {
  const o = (v && typeof v === 'object' ? v : {}) as Record<string, unknown>;
  return {
    id: String(o.id ?? '?'),
    program: program(o.program),
    executor: String(o.executor ?? '?'),
    ops: num(o.ops) ?? 0,
    lines: lineList(o.lines),
    estMs: num(o.estMs),
    device: typeof o.device === 'string' ? o.device : null,
    text: str(o.text),
  };
}

function spread(v: unknown): CollectiveInfo['timeMs'] {
  if (!v || typeof v !== 'object') {
    return null;
  }
  const o = v as Record<string, unknown>;
  const [min, median, max] = [num(o.min), num(o.median), num(o.max)];
  return min !== null && median !== null && max !== null ? { min, median, max } : null;
}

function collective(v: unknown): CollectiveInfo {
  const o = (v && typeof v === 'object' ? v : {}) as Record<string, unknown>;
  const line = num(o.line);
  return {
    op: str(o.op) || '?',
    kind: str(o.kind),
    program: program(o.program),
    region: str(o.region),
    bytes: num(o.bytes),
    groupSize: num(o.groupSize),
    line: line !== null && line >= 0 ? line : null,
    timeMs: spread(o.timeMs),
    estimate: str(o.estimate),
    estimateMs: num(o.estimateMs),
    exposedMs: num(o.exposedMs),
    overlappedBy: Array.isArray(o.overlappedBy) ? o.overlappedBy.filter((r): r is string => typeof r === 'string') : [],
  };
}

/** Accept what the server sends, tolerating missing or mistyped fields. */
export function normalizeRegions(raw: unknown, uri: string): RegionsResult {
  const r = (raw && typeof raw === 'object' ? raw : {}) as Record<string, unknown>;
  const targets = Array.isArray(r.targets) ? r.targets : [];
  return {
    uri: typeof r.uri === 'string' ? r.uri : uri,
    version: num(r.version),
    targets: targets.map((t0: unknown) => {
      const t = (t0 && typeof t0 === 'object' ? t0 : {}) as Record<string, unknown>;
      const regions = Array.isArray(t.regions) ? t.regions : [];
      return {
        name: String(t.name ?? '?'),
        line: num(t.line) ?? 0,
        status: typeof t.status === 'string' ? t.status : 'not compiled',
        message: typeof t.message === 'string' ? t.message : null,
        speedup: num(t.speedup),
        compiledMs: num(t.compiledMs),
        eagerMs: num(t.eagerMs),
        regions: regions.map((g0: unknown) => {
          const g = (g0 && typeof g0 === 'object' ? g0 : {}) as Record<string, unknown>;
          return {
            id: String(g.id ?? '?'),
            program: program(g.program),
            executor: String(g.executor ?? '?'),
            ops: Array.isArray(g.ops) ? g.ops.map((o) => (typeof o === 'string' ? o : JSON.stringify(o))) : [],
            lines: lineList(g.lines),
            timeMs: num(g.timeMs),
            eagerMs: num(g.eagerMs),
            boundary: g.boundary,
            roofline: roofline(g.roofline),
            headroomMs: num(g.headroomMs),
          };
        }),
        previews: Array.isArray(t.previews) ? t.previews.map(preview) : [],
        collectives: Array.isArray(t.collectives) ? t.collectives.map(collective) : [],
      };
    }),
  };
}
