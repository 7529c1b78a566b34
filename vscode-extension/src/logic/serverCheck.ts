// Diagnose why the server cannot start and say how to fix it. No `vscode` import.

export type ProbeOutcome =
  | { kind: 'ok'; version: string }
  | { kind: 'python-not-found'; detail: string }
  | { kind: 'not-installed'; detail: string }
  | { kind: 'dependency-missing'; module: string; detail: string }
  | { kind: 'python-too-old'; version: string }
  | { kind: 'import-failed'; detail: string }
  | { kind: 'timeout' };

/** The script the probe runs: prints "FUSIONLENS-OK <python version>" when lsp_server imports. */
export const PROBE_SCRIPT = [
  'import sys',
  'v = "%d.%d.%d" % sys.version_info[:3]',
  'if sys.version_info < (3, 11): print("FUSIONLENS-OLD " + v); sys.exit(3)',
  'import importlib.util',
  'import lsp_server',
  '# The server module pulls in pygls and lsprotocol; import it without starting anything.',
  'if importlib.util.find_spec("lsp_server.server") is not None: import lsp_server.server',
  'print("FUSIONLENS-OK " + v)',
].join('\n');

export interface RawProbe {
  /** Spawn error code, e.g. "ENOENT". */
  errorCode?: string;
  errorMessage?: string;
  exitCode: number | null;
  stdout: string;
  stderr: string;
  timedOut?: boolean;
}

export function classifyProbe(p: RawProbe): ProbeOutcome {
  if (p.timedOut) {
    return { kind: 'timeout' };
  }
  if (p.errorCode === 'ENOENT' || p.errorCode === 'EACCES') {
    return { kind: 'python-not-found', detail: p.errorMessage ?? p.errorCode };
  }
  if (p.errorCode) {
    return { kind: 'import-failed', detail: p.errorMessage ?? p.errorCode };
  }
  const ok = /FUSIONLENS-OK (\S+)/.exec(p.stdout);
  if (ok && p.exitCode === 0) {
    return { kind: 'ok', version: ok[1] };
  }
  const old = /FUSIONLENS-OLD (\S+)/.exec(p.stdout);
  if (old) {
    return { kind: 'python-too-old', version: old[1] };
  }
  const missing = /No module named '([^']+)'/.exec(p.stderr);
  if (missing) {
    const mod = missing[1];
    if (mod === 'lsp_server' || mod === 'fusionlens' || mod === 'compiler') {
      return { kind: 'not-installed', detail: lastLine(p.stderr) };
    }
    if (mod.startsWith('lsp_server')) {
      return { kind: 'import-failed', detail: lastLine(p.stderr) };
    }
    return { kind: 'dependency-missing', module: mod.split('.')[0], detail: lastLine(p.stderr) };
  }
  // A shell wrapper or pyenv shim that cannot find python.
  if (p.exitCode === 127) {
    return { kind: 'python-not-found', detail: lastLine(p.stderr) || 'exit code 127' };
  }
  return { kind: 'import-failed', detail: lastLine(p.stderr) || `exit code ${p.exitCode}` };
}

function lastLine(s: string): string {
  const lines = s.trim().split(/\r?\n/).filter((l) => l.trim());
  return lines.length ? lines[lines.length - 1].trim() : '';
}

function quote(p: string): string {
  return /^[\w./:@+-]+$/.test(p) ? p : `"${p.replace(/"/g, '\\"')}"`;
}

/** The install command for this interpreter; a checkout of the repo is installed editable. */
export function installCommand(python: string, repoRoot?: string): string {
  return repoRoot ? `${quote(python)} -m pip install -e ${quote(repoRoot)}` : `${quote(python)} -m pip install fusionlens`;
}

export interface ProblemReport {
  message: string;
  /** A command to run in a terminal, if installing fixes it. */
  install?: string;
}

export function describeProblem(o: ProbeOutcome, python: string, source: string, repoRoot?: string): ProblemReport | undefined {
  const who = `${python} (from ${source})`;
  switch (o.kind) {
    case 'ok':
      return undefined;
    case 'python-not-found':
      return {
        message: `FusionLens: cannot run Python "${python}" (from ${source}): ${o.detail}. Select an interpreter in the Python extension or set "fusionlens.pythonPath".`,
      };
    case 'python-too-old':
      return { message: `FusionLens needs Python 3.11 or newer; ${who} is ${o.version}. Select another interpreter or set "fusionlens.pythonPath".` };
    case 'not-installed': {
      const cmd = installCommand(python, repoRoot);
      return {
        message: `FusionLens: the language server is not installed for ${who}. Install it with: ${cmd}`,
        install: cmd,
      };
    }
    case 'dependency-missing': {
      const cmd = installCommand(python, repoRoot);
      return {
        message: `FusionLens: ${who} cannot import "${o.module}", which the server needs. Reinstall it with: ${cmd}`,
        install: cmd,
      };
    }
    case 'timeout':
      return { message: `FusionLens: ${who} did not answer within 30 seconds while checking for the server.` };
    case 'import-failed':
      return { message: `FusionLens: the server fails to import in ${who}: ${o.detail}. See the FusionLens log.` };
  }
}
