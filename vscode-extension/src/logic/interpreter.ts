// Which Python runs the FusionLens server. No `vscode` import: unit-tested under plain node.
import * as os from 'os';
import * as path from 'path';

export type InterpreterSource =
  | 'fusionlens.pythonPath'
  | 'Python extension'
  | 'python.defaultInterpreterPath'
  | 'default';

export interface InterpreterInputs {
  /** Whether the workspace is trusted. */
  trusted: boolean;
  /** `fusionlens.pythonPath` (VS Code already drops workspace values when untrusted). */
  fusionlensPythonPath?: string | null;
  /** Path of the environment selected in the Python extension, when it is installed. */
  pythonExtensionPath?: string | null;
  /** `python.defaultInterpreterPath`. */
  defaultInterpreterPath?: string | null;
  /** Workspace folder paths; the first one resolves `${workspaceFolder}` and relative paths. */
  workspaceFolders: string[];
  platform?: NodeJS.Platform;
  homeDir?: string;
}

export interface InterpreterChoice {
  command: string;
  source: InterpreterSource;
  /** Candidates skipped and why (for the log). */
  skipped: string[];
}

/** Expand `${workspaceFolder}`, `${userHome}`, `~` and make relative paths absolute. */
export function expandPath(p: string, workspaceFolders: string[], homeDir: string = os.homedir()): string {
  let s = p.trim();
  const ws = workspaceFolders[0];
  s = s.replace(/\$\{userHome\}/g, homeDir);
  if (ws !== undefined) {
    s = s.replace(/\$\{workspaceFolder\}/g, ws).replace(/\$\{workspaceRoot\}/g, ws);
  }
  if (s === '~' || s.startsWith('~/')) {
    s = path.join(homeDir, s.slice(1));
  }
  // A bare command name ("python3") is looked up on PATH; a relative path is relative to the workspace.
  if (ws !== undefined && !path.isAbsolute(s) && (s.includes('/') || s.includes('\\'))) {
    s = path.resolve(ws, s);
  }
  return s;
}

export function isInside(child: string, parent: string): boolean {
  const rel = path.relative(parent, child);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/**
 * Order: an explicit `fusionlens.pythonPath`; the Python extension's selected environment;
 * `python.defaultInterpreterPath` (its default "python" counts as unset); `python3`.
 * In an untrusted workspace an interpreter that lives inside the workspace (e.g. its .venv)
 * is never started: that would run code the workspace controls.
 */
export function chooseInterpreter(inp: InterpreterInputs): InterpreterChoice {
  const skipped: string[] = [];
  const home = inp.homeDir ?? os.homedir();
  const candidates: Array<[InterpreterSource, string | null | undefined]> = [
    ['fusionlens.pythonPath', inp.fusionlensPythonPath],
    ['Python extension', inp.pythonExtensionPath],
    ['python.defaultInterpreterPath', inp.defaultInterpreterPath === 'python' ? '' : inp.defaultInterpreterPath],
  ];
  for (const [source, raw] of candidates) {
    if (!raw || !raw.trim()) {
      continue;
    }
    const command = expandPath(raw, inp.workspaceFolders, home);
    if (!inp.trusted && path.isAbsolute(command) && inp.workspaceFolders.some((f) => isInside(command, f))) {
      skipped.push(`${source}: ${command} is inside the untrusted workspace`);
      continue;
    }
    return { command, source, skipped };
  }
  const platform = inp.platform ?? process.platform;
  return { command: platform === 'win32' ? 'python' : 'python3', source: 'default', skipped };
}

/**
 * Arguments that start the server. `-P` (Python 3.11+, which the probe checks first): `-m`
 * alone would put the server's working folder, the workspace, first on sys.path, where a
 * workspace's own `lsp_server.py`, `compiler/` or `torch.py` would replace FusionLens's.
 */
export const SERVER_ARGS = ['-P', '-m', 'lsp_server'];

/**
 * The environment of the server (and of the probe). With -P the working folder is no longer
 * importable, so a FusionLens checkout opened as a trusted workspace (`importRoot`) goes on
 * PYTHONPATH instead; an untrusted one never does. `safePath`: PYTHONSAFEPATH=1, which the
 * probe's `python -c` honours from 3.11 on (an older Python ignores it and says its version).
 */
export function serverEnv(base: NodeJS.ProcessEnv, importRoot: string | undefined, safePath = false): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...base, PYTHONUNBUFFERED: '1' };
  if (importRoot) {
    env.PYTHONPATH = [importRoot, base.PYTHONPATH].filter((p) => p).join(path.delimiter);
  }
  if (safePath) {
    env.PYTHONSAFEPATH = '1';
  }
  return env;
}
