// Small text formatters shared by the status bar and the regions view. No `vscode` import.

export function formatMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) {
    return '–';
  }
  if (ms >= 100) {
    return `${ms.toFixed(0)} ms`;
  }
  if (ms >= 10) {
    return `${ms.toFixed(1)} ms`;
  }
  if (ms >= 0.1) {
    return `${ms.toFixed(2)} ms`;
  }
  const us = (ms * 1000).toFixed(1);
  return Number(us) === 0 ? '< 0.1 µs' : `${us} µs`; // as compiler/report.py's format_ms
}

export function formatSpeedup(x: number | null | undefined): string {
  if (x === null || x === undefined || !Number.isFinite(x)) {
    return '';
  }
  return x >= 10 ? `${x.toFixed(0)}x` : `${x.toFixed(2)}x`;
}

/** 0-based lines -> "L3–5, L9" (1-based, as the editor shows them). */
export function formatLines(lines: number[]): string {
  const sorted = [...new Set(lines)].sort((a, b) => a - b);
  const parts: string[] = [];
  let i = 0;
  while (i < sorted.length) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) {
      j++;
    }
    parts.push(i === j ? `L${sorted[i] + 1}` : `L${sorted[i] + 1}–${sorted[j] + 1}`);
    i = j + 1;
  }
  return parts.join(', ');
}

/** Contiguous blocks of 0-based lines: [[start, end], ...], end inclusive. */
export function lineBlocks(lines: number[]): Array<[number, number]> {
  const sorted = [...new Set(lines)].sort((a, b) => a - b);
  const blocks: Array<[number, number]> = [];
  for (const l of sorted) {
    const last = blocks[blocks.length - 1];
    if (last && l === last[1] + 1) {
      last[1] = l;
    } else {
      blocks.push([l, l]);
    }
  }
  return blocks;
}

/**
 * A text bar of a region's compiled time against its eager time. The longer of the two fills
 * `width` cells; the bar shows the compiled time, "┊" marks where eager time ends when the
 * compiled time is shorter, and "▸" marks a region slower than eager.
 */
export function timeBar(timeMs: number | null, eagerMs: number | null, width = 12): string {
  if (timeMs === null || eagerMs === null || !(eagerMs > 0) || !(timeMs >= 0)) {
    return '░'.repeat(width);
  }
  if (timeMs > eagerMs) {
    return '█'.repeat(width - 1) + '▸';
  }
  const filled = Math.max(timeMs > 0 ? 1 : 0, Math.round((timeMs / eagerMs) * width));
  return '█'.repeat(filled) + '░'.repeat(width - filled);
}

export function truncate(s: string, n: number): string {
  const one = s.replace(/\s+/g, ' ').trim();
  return one.length <= n ? one : one.slice(0, n - 1) + '…';
}

/** "1.5 MB", "512 B": as compiler/report.py's format_bytes (1 KB = 1024 B). */
export function formatBytes(n: number | null | undefined): string {
  if (n === null || n === undefined || !Number.isFinite(n) || n < 0) {
    return '–';
  }
  for (const [unit, scale] of [['GB', 2 ** 30], ['MB', 2 ** 20], ['KB', 2 ** 10]] as const) {
    if (n >= scale) {
      return `${(n / scale).toFixed(1)} ${unit}`;
    }
  }
  return `${n} B`;
}
