// Which report the panel shows as the editor moves, its pure parts: the target a cursor
// position picks, the pages kept per (file, target, result version), and the state a
// reloaded window restores the panel from. No `vscode` import.

/** A target of a file as fusionlens.reportHtml lists it (docs/lsp.md). */
export interface ReportTarget {
  name: string;
  /** 0-based: the decorator's line to the function's last line, in the text as it is now. */
  line: number;
  endLine: number;
  /** The number of the result the server shows for it (larger is newer); null: none. */
  version: number | null;
}

/** The listed targets, tolerating missing or mistyped fields (an entry without a name is dropped). */
export function normalizeReportTargets(raw: unknown): ReportTarget[] {
  if (!Array.isArray(raw)) {
    return [];
  }
  const out: ReportTarget[] = [];
  for (const t of raw) {
    const o = (t && typeof t === 'object' ? t : {}) as Record<string, unknown>;
    const int = (v: unknown): number | null => (typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : null);
    const line = int(o.line);
    if (typeof o.name !== 'string' || !o.name || line === null) {
      continue;
    }
    out.push({ name: o.name, line, endLine: Math.max(line, int(o.endLine) ?? line), version: int(o.version) });
  }
  return out;
}

/** The target with a result whose function (decorator to last line) holds the 0-based line. */
export function targetContaining(targets: readonly ReportTarget[], line: number): ReportTarget | undefined {
  return targets.find((t) => t.version !== null && t.line <= line && line <= t.endLine);
}

/**
 * The target whose report to show, null where none has a result. A file with one result
 * shows it; with several, the one whose function holds the cursor, else `preferred` (what
 * was asked for, or shown last for this file) where it has a result, else the latest result.
 */
export function pickReportTarget(targets: readonly ReportTarget[], cursorLine: number | undefined, preferred: string | null | undefined): string | null {
  const compiled = targets.filter((t) => t.version !== null);
  if (compiled.length <= 1) {
    return compiled[0]?.name ?? null;
  }
  const at = cursorLine === undefined ? undefined : targetContaining(compiled, cursorLine);
  if (at) {
    return at.name;
  }
  const asked = compiled.find((t) => t.name === preferred);
  if (asked) {
    return asked.name;
  }
  return compiled.reduce((a, b) => ((b.version ?? 0) > (a.version ?? 0) ? b : a)).name;
}

/** The key of a rendered page: a page is the same while the result it shows is. */
export function pageKey(uri: string, target: string, version: number): string {
  return JSON.stringify([uri, target, version]); // no separator a name could contain
}

/** A page as the server rendered it: its scripts and styles carry `nonce`. */
export interface CachedPage {
  html: string;
  nonce: string;
  target: string;
  /** The files whose lines it shows (as the report names them). */
  files: string[];
}

/** The last few pages rendered, least recently used dropped first (a page holds Plotly: megabytes). */
export class PageCache {
  private readonly pages = new Map<string, CachedPage>();

  constructor(private readonly capacity = 6) {}

  get(key: string): CachedPage | undefined {
    const page = this.pages.get(key);
    if (page) {
      this.pages.delete(key);
      this.pages.set(key, page); // most recent last
    }
    return page;
  }

  put(key: string, page: CachedPage): void {
    this.pages.delete(key);
    this.pages.set(key, page);
    while (this.pages.size > this.capacity) {
      this.pages.delete(this.pages.keys().next().value as string);
    }
  }

  get size(): number {
    return this.pages.size;
  }

  clear(): void {
    this.pages.clear();
  }
}

/** What a reloaded window brings the panel back to: the file (a URI string) and its target. */
export interface RestoredState {
  uri: string;
  target: string | null;
}

/** The state saved for the panel, checked: a file: URI and a target name or null. */
export function parseRestoredState(raw: unknown): RestoredState | undefined {
  if (!raw || typeof raw !== 'object') {
    return undefined;
  }
  const o = raw as Record<string, unknown>;
  if (typeof o.uri !== 'string' || !/^file:\/\//.test(o.uri) || o.uri.length > 8192) {
    return undefined;
  }
  const target = typeof o.target === 'string' && /^[\p{L}_][\p{L}\p{N}_]*$/u.test(o.target) ? o.target : null;
  return { uri: o.uri, target };
}
