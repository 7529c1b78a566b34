// Types of the FusionLens custom messages (docs/lsp.md). No `vscode` import.

export interface StatusParams {
  state: 'idle' | 'compiling' | 'failed';
  device: string;
  message: string;
  speedup: number | null;
  uri: string | null;
}

export type TargetStatus = 'not compiled' | 'compiling' | 'ok' | 'error' | 'not allowed';

export interface RegionInfo {
  id: string;
  executor: string;
  ops: string[];
  lines: number[];
  timeMs: number | null;
  eagerMs: number | null;
  boundary?: unknown;
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

function num(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
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
            executor: String(g.executor ?? '?'),
            ops: Array.isArray(g.ops) ? g.ops.map((o) => (typeof o === 'string' ? o : JSON.stringify(o))) : [],
            lines: Array.isArray(g.lines) ? g.lines.filter((l): l is number => typeof l === 'number' && l >= 0) : [],
            timeMs: num(g.timeMs),
            eagerMs: num(g.eagerMs),
            boundary: g.boundary,
          };
        }),
      };
    }),
  };
}
