// Extension settings -> the server's settings (docs/lsp.md "Settings"). No `vscode` import.

export type CompileTrigger = 'onOpen' | 'onSave' | 'manual';
export type Device = 'auto' | 'cpu' | 'cuda';

export interface ServerSettings {
  allowExecution: boolean;
  compileTrigger: CompileTrigger;
  executors: string[] | null;
  benchmarkRepeats: number;
  device: Device;
  timeoutSeconds: number;
  inlayHints: boolean;
  debounceMs: number;
  cacheFolder: string | null;
  cacheEntries: number;
  targetGpu: TargetGpu;
}

/** The GPUs of the roofline table (compiler/roofline.py, docs/roofline.md). */
export const TARGET_GPUS = ['A100 40GB', 'A100', 'H100 PCIe', 'H100', 'H200', 'L4', 'RTX 4090'] as const;
export type TargetGpu = (typeof TARGET_GPUS)[number];

export const DEFAULTS: ServerSettings = {
  allowExecution: true,
  compileTrigger: 'onOpen',
  executors: null,
  benchmarkRepeats: 20,
  device: 'auto',
  timeoutSeconds: 60,
  inlayHints: true,
  debounceMs: 300,
  cacheFolder: null,
  cacheEntries: 100,
  targetGpu: 'H100',
};

/** The keys of the `fusionlens` section that go to the server. */
export const SERVER_KEYS = Object.keys(DEFAULTS) as Array<keyof ServerSettings>;

/** Keys whose change needs a server restart rather than a didChangeConfiguration. */
export const RESTART_KEYS = ['pythonPath'];

function oneOf<T extends string>(v: unknown, allowed: readonly T[], dflt: T): T {
  return typeof v === 'string' && (allowed as readonly string[]).includes(v) ? (v as T) : dflt;
}

function positiveNumber(v: unknown, dflt: number, integer: boolean): number {
  if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) {
    return dflt;
  }
  return integer ? Math.max(1, Math.round(v)) : v;
}

/**
 * Build what the server receives. `get(key)` reads `fusionlens.<key>`. Untrusted workspaces
 * always send allowExecution false, whatever the setting says.
 */
export function toServerSettings(get: (key: string) => unknown, trusted: boolean): ServerSettings {
  const executorsRaw = get('executors');
  let executors: string[] | null = null;
  if (Array.isArray(executorsRaw)) {
    const names = executorsRaw.filter((e): e is string => typeof e === 'string' && e.trim() !== '').map((e) => e.trim());
    executors = names.length > 0 ? names : null;
  }
  const allow = get('allowExecution');
  const hints = get('inlayHints');
  const debounce = get('debounceMs');
  const cacheFolder = get('cacheFolder');
  return {
    allowExecution: trusted && (typeof allow === 'boolean' ? allow : DEFAULTS.allowExecution),
    compileTrigger: oneOf(get('compileTrigger'), ['onOpen', 'onSave', 'manual'] as const, DEFAULTS.compileTrigger),
    executors,
    benchmarkRepeats: positiveNumber(get('benchmarkRepeats'), DEFAULTS.benchmarkRepeats, true),
    device: oneOf(get('device'), ['auto', 'cpu', 'cuda'] as const, DEFAULTS.device),
    timeoutSeconds: positiveNumber(get('timeoutSeconds'), DEFAULTS.timeoutSeconds, false),
    inlayHints: typeof hints === 'boolean' ? hints : DEFAULTS.inlayHints,
    debounceMs: typeof debounce === 'number' && Number.isFinite(debounce) && debounce >= 0 ? Math.round(debounce) : DEFAULTS.debounceMs,
    cacheFolder: typeof cacheFolder === 'string' && cacheFolder.trim() ? cacheFolder.trim() : null,
    cacheEntries: Math.min(100_000, positiveNumber(get('cacheEntries'), DEFAULTS.cacheEntries, true)),
    targetGpu: oneOf(get('targetGpu'), TARGET_GPUS, DEFAULTS.targetGpu),
  };
}

/**
 * Answer a `workspace/configuration` item: section "fusionlens" gets the whole object,
 * "fusionlens.<key>" one value; anything else is not ours (undefined).
 */
export function answerConfigurationItem(section: string | undefined, settings: ServerSettings): unknown {
  if (section === 'fusionlens') {
    return settings;
  }
  if (section && section.startsWith('fusionlens.')) {
    const key = section.slice('fusionlens.'.length) as keyof ServerSettings;
    return key in settings ? settings[key] : null;
  }
  return undefined;
}
