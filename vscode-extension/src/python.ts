// Which Python runs the server (the Python extension's choice, the settings) and whether
// `lsp_server` imports under it. The choice itself is logic/interpreter.ts.
import * as cp from 'child_process';
import * as vscode from 'vscode';
import { chooseInterpreter, InterpreterChoice } from './logic/interpreter';
import { PROBE_SCRIPT, RawProbe } from './logic/serverCheck';
import { workspaceFolderPaths } from './config';

export class PythonInterpreters implements vscode.Disposable {
  private readonly changed = new vscode.EventEmitter<void>();
  /** The Python extension's active environment changed (the interpreter may have too). */
  readonly onDidChange = this.changed.event;
  private pythonApiListener: vscode.Disposable | undefined;

  constructor(private readonly log: vscode.LogOutputChannel) {}

  async resolve(): Promise<InterpreterChoice> {
    const trusted = vscode.workspace.isTrusted;
    const fl = vscode.workspace.getConfiguration('fusionlens').get<string>('pythonPath');
    const pyCfg = vscode.workspace.getConfiguration('python').inspect<string>('defaultInterpreterPath');
    const defaultInterpreterPath = trusted
      ? (pyCfg?.workspaceFolderValue ?? pyCfg?.workspaceValue ?? pyCfg?.globalValue)
      : pyCfg?.globalValue;
    return chooseInterpreter({
      trusted,
      fusionlensPythonPath: fl,
      pythonExtensionPath: await this.pythonExtensionPath(),
      defaultInterpreterPath,
      workspaceFolders: workspaceFolderPaths(),
    });
  }

  private async pythonExtensionPath(): Promise<string | undefined> {
    const pyExt = vscode.extensions.getExtension('ms-python.python');
    if (!pyExt) {
      return undefined;
    }
    try {
      const api: any = pyExt.isActive
        ? pyExt.exports
        : await Promise.race([pyExt.activate(), new Promise((r) => setTimeout(() => r(undefined), 15000))]);
      const envs = api?.environments;
      if (!envs?.getActiveEnvironmentPath) {
        return undefined;
      }
      if (!this.pythonApiListener && envs.onDidChangeActiveEnvironmentPath) {
        this.pythonApiListener = envs.onDidChangeActiveEnvironmentPath(() => this.changed.fire()) as vscode.Disposable;
      }
      const folder = vscode.workspace.workspaceFolders?.[0];
      const env = envs.getActiveEnvironmentPath(folder?.uri);
      return typeof env?.path === 'string' ? env.path : undefined;
    } catch (e) {
      this.log.warn(`Python extension API failed: ${(e as Error).message}`);
      return undefined;
    }
  }

  dispose(): void {
    this.pythonApiListener?.dispose();
    this.changed.dispose();
  }
}

/** Run the import probe under `python` (logic/serverCheck.ts reads what it says). */
export function probe(python: string, cwd: string | undefined, env: NodeJS.ProcessEnv): Promise<RawProbe> {
  return new Promise((resolve) => {
    let done = false;
    const child = cp.execFile(
      python,
      ['-c', PROBE_SCRIPT],
      { cwd, timeout: 30000, env: { ...env, PYTHONDONTWRITEBYTECODE: '1' }, windowsHide: true },
      (err, stdout, stderr) => {
        if (done) {
          return;
        }
        done = true;
        const e = err as (NodeJS.ErrnoException & { killed?: boolean; code?: string | number }) | null;
        resolve({
          errorCode: e && typeof e.code === 'string' ? e.code : undefined,
          errorMessage: e?.message,
          exitCode: e ? (typeof e.code === 'number' ? e.code : child.exitCode) : 0,
          stdout: String(stdout),
          stderr: String(stderr),
          timedOut: !!e?.killed,
        });
      },
    );
  });
}
