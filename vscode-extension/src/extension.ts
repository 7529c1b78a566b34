// FusionLens VS Code extension: starts `python -m lsp_server`, adds commands, the status bar
// item, the regions view and read-only generated code. The protocol is docs/lsp.md.
import * as cp from 'child_process';
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import {
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  ResponseError,
  RevealOutputChannelOn,
  ServerOptions,
  State,
  DidChangeConfigurationNotification,
} from 'vscode-languageclient/node';
import { chooseInterpreter, InterpreterChoice, SERVER_ARGS } from './logic/interpreter';
import { answerConfigurationItem, toServerSettings, ServerSettings } from './logic/settings';
import { ServerState, statusView } from './logic/status';
import { regionsAtLine, targetAtLine, RegionRow, TargetRow } from './logic/regionsModel';
import { lineBlocks, formatLines } from './logic/format';
import {
  CMD_CLEAR_CACHE,
  CMD_COMPILE,
  CMD_EXPORT_REPRO,
  CMD_SHOW_KERNEL,
  CMD_SHOW_TRACE,
  CompileResult,
  METHOD_REGIONS,
  METHOD_STATUS,
  normalizeRegions,
  RegionsResult,
  StatusParams,
} from './logic/protocol';
import { classifyProbe, describeProblem, installCommand, PROBE_SCRIPT, ProblemReport, RawProbe } from './logic/serverCheck';
import { GeneratedDocuments, GENERATED_SCHEME } from './generated';
import { RegionsView } from './regionsView';

let ext: FusionLens | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  ext = new FusionLens(context);
  context.subscriptions.push(ext);
  await ext.activate();
}

export async function deactivate(): Promise<void> {
  await ext?.stopClient();
  ext = undefined;
}

function workspaceFolderPaths(): string[] {
  return (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === 'file').map((f) => f.uri.fsPath);
}

/** A workspace folder that is a FusionLens checkout (install it editable rather than from PyPI). */
function findRepoRoot(): string | undefined {
  for (const f of workspaceFolderPaths()) {
    if (fs.existsSync(path.join(f, 'lsp_server')) && fs.existsSync(path.join(f, 'pyproject.toml'))) {
      return f;
    }
  }
  return undefined;
}

class FusionLens implements vscode.Disposable {
  private readonly log: vscode.LogOutputChannel;
  private readonly statusItem: vscode.StatusBarItem;
  private readonly regions: RegionsView;
  private readonly generated = new GeneratedDocuments();
  private readonly disposables: vscode.Disposable[] = [];
  private client: LanguageClient | undefined;
  private clientReady: Promise<LanguageClient | undefined> = Promise.resolve(undefined);
  private serverState: ServerState = 'starting';
  private problem: ProblemReport | undefined;
  private interpreter: InterpreterChoice | undefined;
  private lastStatus: StatusParams | null = null;
  private lastSpeedup: number | null = null;
  private refreshTimer: NodeJS.Timeout | undefined;
  private refreshSeq = 0;
  private recentlyShown = new Map<string, number>();
  private starting: Promise<void> | undefined;
  private pythonApiListener: vscode.Disposable | undefined;

  constructor(private readonly context: vscode.ExtensionContext) {
    this.log = vscode.window.createOutputChannel('FusionLens', { log: true });
    this.statusItem = vscode.window.createStatusBarItem('fusionlens.status', vscode.StatusBarAlignment.Left, 10);
    this.statusItem.name = 'FusionLens';
    this.regions = new RegionsView();
  }

  async activate(): Promise<void> {
    const reg = (id: string, fn: (...args: any[]) => unknown) =>
      this.disposables.push(
        vscode.commands.registerCommand(id, async (...args: any[]) => {
          try {
            return await fn(...args);
          } catch (e) {
            this.reportError(id, e);
          }
        }),
      );
    reg('fusionlens.compileTarget', (row?: TargetRow | RegionRow) => this.compile(row, false));
    reg('fusionlens.compileFile', () => this.compile(undefined, true));
    reg('fusionlens.openTrace', (row?: TargetRow | RegionRow) => this.showTrace(row));
    reg('fusionlens.openKernel', (row?: RegionRow) => this.showKernel(row));
    reg('fusionlens.exportReproScript', (row?: RegionRow) => this.exportRepro(row));
    reg('fusionlens.resetCache', () => this.clearCache());
    reg('fusionlens.restartServer', () => this.restart('restart command'));
    reg('fusionlens.showLog', () => this.log.show());
    reg('fusionlens.refreshRegions', () => this.refreshRegions(0));
    reg('fusionlens.revealRegion', (uri: string, lines: number[]) => this.reveal(uri, lines));
    reg('fusionlens.statusClicked', () => this.statusClicked());

    this.disposables.push(
      this.log,
      this.statusItem,
      this.regions,
      this.generated,
      vscode.workspace.registerTextDocumentContentProvider(GENERATED_SCHEME, this.generated),
      vscode.window.onDidChangeActiveTextEditor(() => this.refreshRegions(50)),
      vscode.workspace.onDidSaveTextDocument((d) => d.languageId === 'python' && this.refreshRegions(300)),
      vscode.workspace.onDidChangeConfiguration((e) => this.configurationChanged(e)),
      vscode.workspace.onDidGrantWorkspaceTrust(() => this.restart('workspace trusted')),
      this.regions.view.onDidChangeVisibility((e) => e.visible && this.refreshRegions(0)),
    );
    this.statusItem.command = 'fusionlens.statusClicked';
    this.updateStatus();
    this.statusItem.show();
    // Do not hold up activation on the server: it reports through the status item.
    this.starting = this.startClient();
  }

  // ---------------------------------------------------------------- settings and interpreter

  private settings(): ServerSettings {
    const cfg = vscode.workspace.getConfiguration('fusionlens');
    return toServerSettings((k) => cfg.get(k), vscode.workspace.isTrusted);
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
        this.pythonApiListener = envs.onDidChangeActiveEnvironmentPath(() => this.interpreterMayHaveChanged());
        this.disposables.push(this.pythonApiListener!);
      }
      const folder = vscode.workspace.workspaceFolders?.[0];
      const env = envs.getActiveEnvironmentPath(folder?.uri);
      return typeof env?.path === 'string' ? env.path : undefined;
    } catch (e) {
      this.log.warn(`Python extension API failed: ${(e as Error).message}`);
      return undefined;
    }
  }

  private async resolveInterpreter(): Promise<InterpreterChoice> {
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

  private async interpreterMayHaveChanged(): Promise<void> {
    const next = await this.resolveInterpreter();
    if (next.command !== this.interpreter?.command) {
      await this.restart(`interpreter changed to ${next.command}`);
    }
  }

  private serverCwd(): string | undefined {
    // In a trusted workspace run from the first folder, so a FusionLens checkout opened as the
    // workspace is importable without installing. Untrusted: never let the workspace shadow modules.
    const folders = workspaceFolderPaths();
    return vscode.workspace.isTrusted && folders.length ? folders[0] : this.context.extensionPath;
  }

  private probe(python: string, cwd: string | undefined): Promise<RawProbe> {
    return new Promise((resolve) => {
      let done = false;
      const child = cp.execFile(
        python,
        ['-c', PROBE_SCRIPT],
        { cwd, timeout: 30000, env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1' }, windowsHide: true },
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

  // ---------------------------------------------------------------- server lifecycle

  private async startClient(): Promise<void> {
    this.serverState = 'starting';
    this.problem = undefined;
    this.updateStatus();
    let resolveReady!: (c: LanguageClient | undefined) => void;
    this.clientReady = new Promise((r) => (resolveReady = r));
    try {
      const choice = await this.resolveInterpreter();
      this.interpreter = choice;
      for (const s of choice.skipped) {
        this.log.info(`Skipped interpreter: ${s}`);
      }
      const cwd = this.serverCwd();
      this.log.info(`Python: ${choice.command} (from ${choice.source}); server: ${choice.command} ${SERVER_ARGS.join(' ')} in ${cwd}`);
      const raw = await this.probe(choice.command, cwd);
      const outcome = classifyProbe(raw);
      if (outcome.kind !== 'ok') {
        if (raw.stderr.trim()) {
          this.log.error(raw.stderr.trim());
        }
        this.fail(describeProblem(outcome, choice.command, choice.source, findRepoRoot())!);
        resolveReady(undefined);
        return;
      }
      this.log.info(`lsp_server imports under Python ${outcome.version}`);
      const client = this.createClient(choice.command, cwd);
      this.client = client;
      await client.start();
      this.serverState = 'running';
      this.updateStatus();
      resolveReady(client);
      this.refreshRegions(0);
    } catch (e) {
      const failed = this.client;
      this.client = undefined;
      void failed?.dispose(1000).catch(() => undefined);
      const why = this.stderrTail.filter((l) => /Error|error:/.test(l)).pop() ?? (e as Error).message ?? String(e);
      this.log.error(`Server failed to start: ${(e as Error).message ?? e}`);
      this.fail({
        message: `FusionLens: the server (${this.interpreter?.command ?? 'python'} -m lsp_server) failed to start: ${why}. See the FusionLens log.`,
        install: /ModuleNotFoundError|ImportError/.test(why) ? installCommand(this.interpreter?.command ?? 'python3', findRepoRoot()) : undefined,
      });
      resolveReady(undefined);
    }
  }

  private fail(p: ProblemReport): void {
    this.serverState = 'missing';
    this.problem = p;
    this.updateStatus();
    this.log.error(p.message);
    this.regions.show(undefined, null, 'The FusionLens server is not running. Click the status bar item for details.');
    void this.showProblem();
  }

  private async showProblem(): Promise<void> {
    const p = this.problem;
    if (!p) {
      return;
    }
    const actions = p.install ? ['Install', 'Copy Command', 'Settings', 'Log'] : ['Settings', 'Log', 'Retry'];
    const pick = await vscode.window.showErrorMessage(p.message, ...actions);
    if (pick === 'Install' && p.install) {
      const term = vscode.window.createTerminal({ name: 'FusionLens install' });
      term.show();
      term.sendText(p.install);
      const again = await vscode.window.showInformationMessage('When the install has finished, restart the FusionLens server.', 'Restart Server');
      if (again) {
        await this.restart('after install');
      }
    } else if (pick === 'Copy Command' && p.install) {
      await vscode.env.clipboard.writeText(p.install);
    } else if (pick === 'Settings') {
      await vscode.commands.executeCommand('workbench.action.openSettings', 'fusionlens.pythonPath');
    } else if (pick === 'Log') {
      this.log.show();
    } else if (pick === 'Retry') {
      await this.restart('retry');
    }
  }

  /** Last lines the server wrote to stderr (for the message when it dies at startup). */
  private stderrTail: string[] = [];

  private createClient(python: string, cwd: string | undefined): LanguageClient {
    // Spawn the process ourselves so its stderr can also be kept for error messages;
    // vscode-languageclient still copies it to the log channel.
    const serverOptions: ServerOptions = async () => {
      this.stderrTail = [];
      const child = cp.spawn(python, SERVER_ARGS, {
        cwd,
        env: { ...process.env, PYTHONUNBUFFERED: '1' },
        stdio: 'pipe',
        windowsHide: true,
      });
      child.stderr.setEncoding('utf8');
      child.stderr.on('data', (d: string) => {
        this.stderrTail.push(...d.split(/\r?\n/).filter((l) => l.trim()));
        this.stderrTail.splice(0, Math.max(0, this.stderrTail.length - 30));
      });
      child.on('exit', (code, signal) => {
        if (code !== 0 && code !== null) {
          this.log.warn(`Server process exited with code ${code}`);
        } else if (signal) {
          this.log.warn(`Server process killed by ${signal}`);
        }
      });
      return child;
    };
    const clientOptions: LanguageClientOptions = {
      // untitled buffers too: the server compiles a buffer's own text
      documentSelector: [{ scheme: 'file', language: 'python' }, { scheme: 'untitled', language: 'python' }],
      outputChannel: this.log,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: this.startSettings(),
      middleware: {
        workspace: {
          configuration: async (params, token, next) => {
            const theirs = params.items.some((i) => answerConfigurationItem(i.section, this.settings()) === undefined)
              ? await next(params, token)
              : [];
            if (theirs instanceof ResponseError) {
              return theirs;
            }
            const settings = this.settings();
            return params.items.map((item, i) => {
              const ours = answerConfigurationItem(item.section, settings);
              return ours !== undefined ? ours : Array.isArray(theirs) ? theirs[i] : null;
            });
          },
        },
        window: {
          showDocument: async (params, token, next) => {
            const uri = vscode.Uri.parse(params.uri);
            if (!params.external && GeneratedDocuments.isGenerated(uri, this.settings().cacheFolder)) {
              this.recentlyShown.set(uri.toString(), Date.now());
              const sel = params.selection
                ? new vscode.Range(params.selection.start.line, params.selection.start.character, params.selection.end.line, params.selection.end.character)
                : undefined;
              await this.generated.open(uri, sel, params.takeFocus);
              return { success: true };
            }
            return next(params, token);
          },
        },
        provideCodeLenses: async (document, token, next) => {
          const lenses = await next(document, token);
          if (!lenses || vscode.workspace.isTrusted) {
            return lenses;
          }
          // The server only knows execution is off; say why, and offer to trust the folder.
          for (const lens of lenses) {
            if (lens.command && /^Not compiled/.test(lens.command.title)) {
              lens.command = { title: 'Not compiled: this workspace is not trusted (Restricted Mode) · Manage Trust', command: 'workbench.trust.manage' };
            }
          }
          return lenses;
        },
        executeCommand: async (command, args, next) => {
          // Code lenses and code actions from the server land here.
          const result = await next(command, args);
          if (command === CMD_COMPILE || command === CMD_CLEAR_CACHE) {
            this.refreshRegions(0);
          }
          return result;
        },
      },
    };
    const client = new LanguageClient('fusionlens', 'FusionLens', serverOptions, clientOptions);
    client.onNotification(METHOD_STATUS, (params: StatusParams) => this.onStatus(params));
    client.onDidChangeState((e) => {
      if (client !== this.client) {
        return;
      }
      if (e.newState === State.Stopped) {
        this.serverState = this.serverState === 'missing' ? 'missing' : 'stopped';
      } else if (e.newState === State.Running) {
        this.serverState = 'running';
      } else {
        this.serverState = 'starting';
      }
      this.updateStatus();
    });
    return client;
  }

  async stopClient(): Promise<void> {
    const c = this.client;
    this.client = undefined;
    if (c) {
      try {
        await c.stop(3000);
      } catch (e) {
        this.log.warn(`Stopping the server: ${(e as Error).message}`);
      }
      try {
        await c.dispose(1000);
      } catch {
        // already stopped
      }
    }
  }

  private executionWasOff = false; // this server was told allowExecution false
  private restartQueue: Promise<void> = Promise.resolve();
  private restartPending = false;

  /**
   * Restarts run one at a time, and requests that arrive while one is waiting share it (trust
   * being granted also changes the effective interpreter settings: one restart, not two
   * clients registering the same server commands).
   */
  restart(why: string): Promise<void> {
    this.log.info(`Restart requested (${why})`);
    if (this.restartPending) {
      return this.restartQueue;
    }
    this.restartPending = true;
    this.restartQueue = this.restartQueue
      .catch(() => undefined)
      .then(async () => {
        this.restartPending = false;
        await this.starting?.catch(() => undefined);
        await this.stopClient();
        this.lastStatus = null;
        this.starting = this.startClient();
        await this.starting;
      });
    return this.restartQueue;
  }

  private async requireClient(): Promise<LanguageClient> {
    await this.starting;
    const c = await this.clientReady;
    if (!c || !c.isRunning()) {
      if (this.problem) {
        void this.showProblem();
        throw new Quiet();
      }
      throw new Error('The FusionLens server is not running. Run "FusionLens: Restart Server".');
    }
    return c;
  }

  /** The settings a server starts with; remembers whether it started with execution off. */
  private startSettings(): ServerSettings {
    const settings = this.settings();
    this.executionWasOff = !settings.allowExecution;
    return settings;
  }

  private configurationChanged(e: vscode.ConfigurationChangeEvent): void {
    if (e.affectsConfiguration('fusionlens.pythonPath') || e.affectsConfiguration('python.defaultInterpreterPath')) {
      void this.restart('interpreter setting changed');
      return;
    }
    if (e.affectsConfiguration('fusionlens')) {
      const settings = this.settings();
      if (settings.allowExecution && this.executionWasOff) {
        // the server keeps execution off once told so, until it restarts (docs/lsp.md)
        void this.restart('execution allowed');
        return;
      }
      this.executionWasOff ||= !settings.allowExecution;
      this.log.info(`Settings changed: ${JSON.stringify(settings)}`);
      if (this.client?.isRunning()) {
        void this.client.sendNotification(DidChangeConfigurationNotification.type, { settings: { fusionlens: settings } });
      }
      this.updateStatus();
      this.refreshRegions(500);
    }
  }

  // ---------------------------------------------------------------- status

  private onStatus(params: StatusParams): void {
    this.lastStatus = params;
    if (typeof params.speedup === 'number') {
      this.lastSpeedup = params.speedup;
    }
    this.updateStatus();
    const active = vscode.window.activeTextEditor?.document.uri.toString();
    if (!params.uri || params.uri === active) {
      this.refreshRegions(params.state === 'compiling' ? 200 : 0);
    }
  }

  private updateStatus(): void {
    const view = statusView({
      server: this.serverState,
      trusted: vscode.workspace.isTrusted,
      allowExecution: this.settings().allowExecution,
      last: this.lastStatus,
      lastSpeedup: this.lastSpeedup,
    });
    this.statusItem.text = view.text;
    this.statusItem.tooltip = view.tooltip;
    this.statusItem.backgroundColor =
      view.kind === 'error'
        ? new vscode.ThemeColor('statusBarItem.errorBackground')
        : view.kind === 'warning'
          ? new vscode.ThemeColor('statusBarItem.warningBackground')
          : undefined;
    this.statusAction = view.action;
  }

  private statusAction: string = 'showRegions';

  private async statusClicked(): Promise<void> {
    switch (this.statusAction) {
      case 'showLog':
        this.log.show();
        break;
      case 'restart':
        if (this.problem) {
          await this.showProblem();
        } else {
          await this.restart('status bar');
        }
        break;
      case 'manageTrust':
        await vscode.commands.executeCommand('workbench.trust.manage');
        break;
      default:
        await vscode.commands.executeCommand('fusionlens.regions.focus');
    }
  }

  // ---------------------------------------------------------------- regions view

  refreshRegions(delayMs: number): void {
    if (this.refreshTimer) {
      clearTimeout(this.refreshTimer);
    }
    this.refreshTimer = setTimeout(() => void this.doRefresh(), delayMs);
  }

  private activePythonEditor(): vscode.TextEditor | undefined {
    const ed = vscode.window.activeTextEditor;
    if (ed && ed.document.languageId === 'python' && ed.document.uri.scheme === 'file') {
      return ed;
    }
    return undefined;
  }

  private async fetchRegions(uri: vscode.Uri): Promise<RegionsResult> {
    const c = await this.requireClient();
    const raw = await c.sendRequest(METHOD_REGIONS, { uri: c.code2ProtocolConverter.asUri(uri) });
    return normalizeRegions(raw, uri.toString());
  }

  private async doRefresh(): Promise<void> {
    const seq = ++this.refreshSeq;
    const ed = this.activePythonEditor();
    if (!ed) {
      // Keep showing the last Python file while a generated document or another editor is active.
      if (!this.regions.uri) {
        this.regions.show(undefined, null);
      }
      return;
    }
    if (this.serverState !== 'running') {
      return;
    }
    try {
      const result = await this.fetchRegions(ed.document.uri);
      if (seq === this.refreshSeq) {
        this.regions.show(ed.document.uri, result);
      }
    } catch (e) {
      if (!(e instanceof Quiet)) {
        this.log.warn(`${METHOD_REGIONS} failed: ${(e as Error).message}`);
        if (seq === this.refreshSeq) {
          this.regions.show(ed.document.uri, null, `Could not get regions: ${(e as Error).message}`);
        }
      }
    }
  }

  private async reveal(uriString: string, lines: number[]): Promise<void> {
    const uri = vscode.Uri.parse(uriString);
    const doc = await vscode.workspace.openTextDocument(uri);
    const blocks = lineBlocks(lines.filter((l) => l < doc.lineCount));
    const editor = await vscode.window.showTextDocument(doc, { preserveFocus: false, preview: false });
    if (!blocks.length) {
      return;
    }
    editor.selections = blocks.map(([a, b]) => new vscode.Selection(a, 0, b, doc.lineAt(b).range.end.character));
    editor.revealRange(new vscode.Range(blocks[0][0], 0, blocks[blocks.length - 1][1], 0), vscode.TextEditorRevealType.InCenterIfOutsideViewport);
  }

  // ---------------------------------------------------------------- commands

  private async executeServer<T>(command: string, args: unknown[]): Promise<T> {
    const c = await this.requireClient();
    return (await c.sendRequest(ExecuteCommandRequest.type, { command, arguments: args })) as T;
  }

  /** The file and regions a command acts on: the row's file, else the active Python editor. */
  private async context_(row?: TargetRow | RegionRow): Promise<{ uri: vscode.Uri; result: RegionsResult; line: number | undefined }> {
    if (row && this.regions.uri && this.regions.result) {
      return { uri: this.regions.uri, result: this.regions.result, line: undefined };
    }
    const ed = this.activePythonEditor();
    if (!ed) {
      throw new Error('Open a Python file first.');
    }
    if (ed.document.isDirty) {
      await ed.document.save();
    }
    const result = await this.fetchRegions(ed.document.uri);
    return { uri: ed.document.uri, result, line: ed.selection.active.line };
  }

  private async pickTarget(result: RegionsResult, line: number | undefined, row?: TargetRow | RegionRow): Promise<string | undefined> {
    if (row) {
      return row.target;
    }
    if (result.targets.length === 0) {
      throw new Error('No compile targets in this file. Mark one with @compiler.example.');
    }
    const at = line !== undefined ? targetAtLine(result, line) : undefined;
    if (at) {
      return at.name;
    }
    const pick = await vscode.window.showQuickPick(
      result.targets.map((t) => ({ label: t.name, description: `line ${t.line + 1} · ${t.status}` })),
      { placeHolder: 'Which target?' },
    );
    return pick?.label;
  }

  private async compile(row: TargetRow | RegionRow | undefined, wholeFile: boolean): Promise<void> {
    const { uri, result, line } = await this.context_(row);
    const target = wholeFile ? null : await this.pickTarget(result, line, row);
    if (target === undefined) {
      return;
    }
    const c = await this.requireClient();
    const what = target ?? path.basename(uri.fsPath);
    const res = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Window, title: `FusionLens: compiling ${what}` },
      () => this.executeServer<CompileResult | null>(CMD_COMPILE, [c.code2ProtocolConverter.asUri(uri), target]),
    );
    this.refreshRegions(0);
    if (res && res.ok === false) {
      const why = typeof res.message === 'string' && res.message ? `: ${res.message}` : '. The Problems panel and the log say why.';
      const pick = await vscode.window.showWarningMessage(
        `FusionLens: compiling ${what} did not succeed${why}`,
        'Show Problems',
        'Show Log',
      );
      if (pick === 'Show Problems') {
        await vscode.commands.executeCommand('workbench.actions.view.problems');
      } else if (pick === 'Show Log') {
        this.log.show();
      }
    } else if (res && Array.isArray(res.targets) && res.targets.length === 0) {
      void vscode.window.showInformationMessage(`FusionLens: nothing was compiled in ${what}${this.settings().allowExecution ? '' : ' (execution is not allowed)'}.`);
    }
  }

  private async openReturned(result: unknown): Promise<void> {
    const r = (result && typeof result === 'object' ? result : {}) as { uri?: unknown; message?: unknown };
    const u = r.uri;
    if (typeof u !== 'string') {
      // The server already shows its own "compile it first" warning (those start with "FusionLens:").
      if (typeof r.message === 'string' && r.message && !r.message.startsWith('FusionLens')) {
        void vscode.window.showWarningMessage(`FusionLens: ${r.message}`);
      }
      return;
    }
    const uri = vscode.Uri.parse(u);
    const shown = this.recentlyShown.get(uri.toString());
    if (shown === undefined || Date.now() - shown > 5000) {
      await this.generated.open(uri, undefined, true);
    }
  }

  private async showTrace(row?: TargetRow | RegionRow): Promise<void> {
    const { uri, result, line } = await this.context_(row);
    const target = await this.pickTarget(result, line, row);
    if (target === undefined) {
      return;
    }
    const c = await this.requireClient();
    const res = await this.executeServer(CMD_SHOW_TRACE, [c.code2ProtocolConverter.asUri(uri), target]);
    await this.openReturned(res);
  }

  private async showKernel(row?: RegionRow): Promise<void> {
    const { uri, result, line } = await this.context_(row);
    let target: string | undefined;
    let regionId: string | undefined;
    if (row && row.kind === 'region') {
      target = row.target;
      regionId = row.regionId;
    } else {
      const hits = line !== undefined ? regionsAtLine(result, line) : [];
      if (hits.length) {
        target = hits[0].target.name;
        regionId = hits[0].region.id;
      } else {
        const all = result.targets.flatMap((t) => t.regions.map((r) => ({ t, r })));
        if (!all.length) {
          throw new Error('No compiled regions in this file yet. Run "FusionLens: Compile and Benchmark Whole File" first.');
        }
        const pick = await vscode.window.showQuickPick(
          all.map(({ t, r }) => ({ label: `${r.id} · ${r.executor}`, description: `${t.name} · ${formatLines(r.lines)}`, t: t.name, id: r.id })),
          { placeHolder: 'Which region?' },
        );
        if (!pick) {
          return;
        }
        target = pick.t;
        regionId = pick.id;
      }
    }
    const c = await this.requireClient();
    const res = await this.executeServer(CMD_SHOW_KERNEL, [c.code2ProtocolConverter.asUri(uri), target, regionId]);
    await this.openReturned(res);
  }

  /** A standalone script of one fusion region or preview (the server's fusionlens.exportRepro). */
  private async exportRepro(row?: RegionRow): Promise<void> {
    const { uri, result, line } = await this.context_(row);
    let target: string | undefined;
    let regionId: string | undefined;
    if (row && row.kind === 'region') {
      target = row.target;
      regionId = row.regionId; // a preview row's P<n>: the server picks Triton's first, as the view shows
    } else {
      const fused = (e: string) => e === 'triton' || e === 'nvfuser';
      const all = result.targets.flatMap((t) => [
        ...t.regions.filter((r) => fused(r.executor)).map((r) => ({ label: `${r.id} · ${r.executor}`, t: t.name, id: r.id, lines: r.lines })),
        ...(t.previews ?? []).map((p) => ({ label: `${p.executor}:${p.id} · preview`, t: t.name, id: `${p.executor}:${p.id}`, lines: p.lines })),
      ]);
      if (!all.length) {
        throw new Error('No fusion regions or previews in this file yet. Run "FusionLens: Compile and Benchmark Whole File" first.');
      }
      const here = line !== undefined ? all.filter((c) => c.lines.includes(line)) : [];
      const pick = here.length === 1 ? here[0] : await vscode.window.showQuickPick(
        (here.length ? here : all).map((c) => ({ ...c, description: `${c.t} · ${formatLines(c.lines)}` })),
        { placeHolder: 'A repro script of which region?' },
      );
      if (!pick) {
        return;
      }
      target = pick.t;
      regionId = pick.id;
    }
    const c = await this.requireClient();
    const res = await this.executeServer<{ uri?: string; path?: string; summary?: string } | null>(
      CMD_EXPORT_REPRO, [c.code2ProtocolConverter.asUri(uri), target, regionId]);
    await this.openReturned(res);
    if (res && res.path) {
      void vscode.window.showInformationMessage(`FusionLens: wrote ${res.path} (${res.summary ?? ''}); run it with python, attach it to a bug report.`);
    }
  }

  private async clearCache(): Promise<void> {
    await this.executeServer(CMD_CLEAR_CACHE, []);
    this.lastSpeedup = null;
    this.updateStatus();
    this.refreshRegions(0);
    void vscode.window.setStatusBarMessage('FusionLens: cache cleared', 3000);
  }

  private reportError(command: string, e: unknown): void {
    if (e instanceof Quiet) {
      return;
    }
    const msg = e instanceof Error ? e.message : String(e);
    this.log.error(`${command}: ${msg}`);
    void vscode.window.showErrorMessage(`FusionLens: ${msg}`);
  }

  dispose(): void {
    if (this.refreshTimer) {
      clearTimeout(this.refreshTimer);
    }
    for (const d of this.disposables) {
      d.dispose();
    }
  }
}

/** An error already reported to the user. */
class Quiet extends Error {}
