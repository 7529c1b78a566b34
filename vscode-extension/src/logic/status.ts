// Status bar text from server state and `fusionlens/status`. No `vscode` import.
import type { StatusParams } from './protocol';
import { formatSpeedup, truncate } from './format';

export type ServerState = 'starting' | 'running' | 'stopped' | 'missing';

export interface StatusInputs {
  server: ServerState;
  trusted: boolean;
  allowExecution: boolean;
  /** Last `fusionlens/status` notification, if any. */
  last?: StatusParams | null;
  /** Last whole-program speedup that was not null (kept across compiles). */
  lastSpeedup?: number | null;
}

export interface StatusView {
  text: string;
  tooltip: string;
  kind: 'normal' | 'warning' | 'error';
  /** What clicking does. */
  action: 'showRegions' | 'showLog' | 'restart' | 'manageTrust';
}

export function deviceLabel(device: string | undefined | null): string {
  if (!device) {
    return '';
  }
  const d = device.trim();
  if (/^(unknown|none|auto)$/i.test(d)) {
    return '';
  }
  if (/^cpu\b/i.test(d)) {
    return 'CPU';
  }
  // "cuda:0 (NVIDIA H200)" or "NVIDIA H200": keep the GPU name, without vendor noise.
  const inParens = /\(([^)]+)\)/.exec(d);
  const name = inParens ? inParens[1] : d;
  return name.replace(/^NVIDIA\s+/i, '').replace(/^GeForce\s+/i, '');
}

export function statusView(s: StatusInputs): StatusView {
  const dev = deviceLabel(s.last?.device);
  const sp = formatSpeedup(s.lastSpeedup ?? s.last?.speedup ?? null);
  const speed = sp ? `${sp} vs eager` : '';
  const parts = (head: string, ...rest: string[]) => [head, ...rest.filter((p) => p)].join(' · ');

  if (s.server === 'missing') {
    return {
      text: '$(error) FusionLens: server missing',
      tooltip: 'The FusionLens language server could not be started. Click for details.',
      kind: 'error',
      action: 'restart',
    };
  }
  if (s.server === 'stopped') {
    return {
      text: '$(debug-disconnect) FusionLens: stopped',
      tooltip: 'The FusionLens server is not running. Click to restart it.',
      kind: 'error',
      action: 'restart',
    };
  }
  if (s.server === 'starting') {
    return { text: '$(loading~spin) FusionLens', tooltip: 'Starting the FusionLens server…', kind: 'normal', action: 'showLog' };
  }
  if (!s.trusted) {
    return {
      text: parts('$(shield) FusionLens', dev, 'restricted'),
      tooltip:
        'Restricted mode: this workspace is not trusted, so FusionLens lists targets but does not run your code. Trust the workspace to compile and benchmark.',
      kind: 'warning',
      action: 'manageTrust',
    };
  }
  if (!s.allowExecution) {
    return {
      text: parts('$(circle-slash) FusionLens', dev, 'execution off'),
      tooltip: 'fusionlens.allowExecution is off: targets are listed, not compiled.',
      kind: 'warning',
      action: 'showRegions',
    };
  }
  const last = s.last;
  const msg = last?.message ? truncate(last.message, 48) : '';
  if (last?.state === 'compiling') {
    return {
      text: parts('$(sync~spin) FusionLens', dev, msg ? (/^compil/i.test(msg) ? msg : `compiling: ${msg}`) : 'compiling…'),
      tooltip: `Compiling${last.message ? `: ${last.message}` : '…'}${dev ? `\nDevice: ${dev}` : ''}`,
      kind: 'normal',
      action: 'showRegions',
    };
  }
  if (last?.state === 'failed') {
    return {
      text: parts('$(error) FusionLens', dev, 'failed'),
      tooltip: `Compile failed${last.message ? `: ${last.message}` : ''}. Click for the log.`,
      kind: 'error',
      action: 'showLog',
    };
  }
  const tipSpeed = sp ? `\nLast whole-program speedup vs eager: ${sp}` : '';
  return {
    text: parts('$(zap) FusionLens', dev, speed),
    tooltip: `FusionLens${dev ? ` on ${dev}` : ''}: idle${last?.message ? ` (${last.message})` : ''}${tipSpeed}\nClick to show the regions of this file.`,
    kind: 'normal',
    action: 'showRegions',
  };
}
