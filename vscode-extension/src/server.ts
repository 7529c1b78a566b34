// The server's lifecycle: probe the interpreter, start `python -P -m lsp_server`, say what is
// wrong when it cannot start, restart it (one at a time), pass settings changes on.
import * as vscode from 'vscode';
import { DidChangeConfigurationNotification, LanguageClient, State } from 'vscode-languageclient/node';
import { InterpreterChoice, SERVER_ARGS, serverEnv } from './logic/interpreter';
import { ServerSettings } from './logic/settings';
import { ServerState } from './logic/status';
import { METHOD_STATUS, StatusParams } from './logic/protocol';
import { classifyProbe, describeProblem, installCommand, ProblemReport } from './logic/serverCheck';
import { GeneratedDocuments } from './generated';
import { findRepoRoot, readSettings, serverCwd } from './config';
import { probe, PythonInterpreters } from './python';
import { createConnection, ServerConnection } from './client';

/** An error already reported to the user. */
export class Quiet extends Error {}

export class Server implements vscode.Disposable {
  private readonly stateChanged = new vscode.EventEmitter<void>();
  /** `state`, `problem` or the settings the status bar shows changed. */
  readonly onDidChangeState = this.stateChanged.event;
  private readonly statusReceived = new vscode.EventEmitter<StatusParams>();
  /** A `fusionlens/status` notification. */
  readonly onStatus = this.statusReceived.event;
  private readonly willRestart = new vscode.EventEmitter<void>();
  /** A new server is about to start: what the old one said is stale. */
  readonly onWillRestart = this.willRestart.event;
  private readonly failed = new vscode.EventEmitter<void>();
  /** The server could not start (`problem` says why). */
  readonly onDidFail = this.failed.event;
  private readonly regionsStale = new vscode.EventEmitter<number>();
  /** The regions may have changed: ask again after this many ms. */
  readonly onRegionsStale = this.regionsStale.event;

  private readonly disposables: vscode.Disposable[];
  private connection: ServerConnection | undefined;
  private clientReady: Promise<LanguageClient | undefined> = Promise.resolve(undefined);
  private serverState: ServerState = 'starting';
  private problemReport: ProblemReport | undefined;
  private interpreter: InterpreterChoice | undefined;
  private starting: Promise<void> | undefined;
  private executionWasOff = false; // this server was told allowExecution false
  private restartQueue: Promise<void> = Promise.resolve();
  private restartPending = false;

  constructor(
    private readonly extensionPath: string,
    private readonly log: vscode.LogOutputChannel,
    private readonly generated: GeneratedDocuments,
    private readonly interpreters: PythonInterpreters,
  ) {
    this.disposables = [
      this.stateChanged,
      this.statusReceived,
      this.willRestart,
      this.failed,
      this.regionsStale,
      interpreters.onDidChange(() => this.interpreterMayHaveChanged()),
      vscode.workspace.onDidChangeConfiguration((e) => this.configurationChanged(e)),
      vscode.workspace.onDidGrantWorkspaceTrust(() => this.restart('workspace trusted')),
    ];
  }

  get state(): ServerState {
    return this.serverState;
  }

  get problem(): ProblemReport | undefined {
    return this.problemReport;
  }

  /** Start the first server; activation does not wait for it (the status item reports). */
  start(): void {
    this.starting = this.startClient();
  }

  private setState(state: ServerState): void {
    this.serverState = state;
    this.stateChanged.fire();
  }

  private async startClient(): Promise<void> {
    this.problemReport = undefined;
    this.setState('starting');
    let resolveReady!: (c: LanguageClient | undefined) => void;
    this.clientReady = new Promise((r) => (resolveReady = r));
    try {
      const choice = await this.interpreters.resolve();
      this.interpreter = choice;
      for (const s of choice.skipped) {
        this.log.info(`Skipped interpreter: ${s}`);
      }
      const cwd = serverCwd(this.extensionPath);
      this.log.info(`Python: ${choice.command} (from ${choice.source}); server: ${choice.command} ${SERVER_ARGS.join(' ')} in ${cwd}`);
      // a FusionLens checkout opened as a trusted workspace imports from it (-P: not from the cwd)
      const importRoot = vscode.workspace.isTrusted ? findRepoRoot() : undefined;
      const raw = await probe(choice.command, cwd, serverEnv(process.env, importRoot, true));
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
      const connection = this.connect(choice.command, cwd, serverEnv(process.env, importRoot));
      this.connection = connection;
      await connection.client.start();
      this.setState('running');
      resolveReady(connection.client);
      this.regionsStale.fire(0);
    } catch (e) {
      this.startFailed(e);
      resolveReady(undefined);
    }
  }

  private startFailed(e: unknown): void {
    const failed = this.connection;
    this.connection = undefined;
    void failed?.client.dispose(1000).catch(() => undefined);
    const why = (failed?.stderrTail() ?? []).filter((l) => /Error|error:/.test(l)).pop() ?? (e as Error).message ?? String(e);
    this.log.error(`Server failed to start: ${(e as Error).message ?? e}`);
    this.fail({
      message: `FusionLens: the server (${this.interpreter?.command ?? 'python'} ${SERVER_ARGS.join(' ')}) failed to start: ${why}. See the FusionLens log.`,
      install: /ModuleNotFoundError|ImportError/.test(why) ? installCommand(this.interpreter?.command ?? 'python3', findRepoRoot()) : undefined,
    });
  }

  private connect(python: string, cwd: string | undefined, env: NodeJS.ProcessEnv): ServerConnection {
    const connection = createConnection({
      python,
      cwd,
      env,
      log: this.log,
      generated: this.generated,
      initializationOptions: this.startSettings(),
      regionsStale: (ms) => this.regionsStale.fire(ms),
    });
    const client = connection.client;
    client.onNotification(METHOD_STATUS, (params: StatusParams) => this.statusReceived.fire(params));
    client.onDidChangeState((e) => {
      if (client !== this.connection?.client) {
        return;
      }
      if (e.newState === State.Stopped) {
        this.setState(this.serverState === 'missing' ? 'missing' : 'stopped');
      } else if (e.newState === State.Running) {
        this.setState('running');
      } else {
        this.setState('starting');
      }
    });
    return connection;
  }

  private fail(p: ProblemReport): void {
    this.problemReport = p;
    this.setState('missing');
    this.log.error(p.message);
    this.failed.fire();
    void this.showProblem();
  }

  /** The problem's message with what can be done about it (install, settings, log, retry). */
  async showProblem(): Promise<void> {
    const p = this.problemReport;
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

  async stop(): Promise<void> {
    const c = this.connection?.client;
    this.connection = undefined;
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
        await this.stop();
        this.willRestart.fire();
        this.starting = this.startClient();
        await this.starting;
      });
    return this.restartQueue;
  }

  /** The running client; otherwise shows why there is none and throws. */
  async requireClient(): Promise<LanguageClient> {
    await this.starting;
    const c = await this.clientReady;
    if (!c || !c.isRunning()) {
      if (this.problemReport) {
        void this.showProblem();
        throw new Quiet();
      }
      throw new Error('The FusionLens server is not running. Run "FusionLens: Restart Server".');
    }
    return c;
  }

  private async interpreterMayHaveChanged(): Promise<void> {
    const next = await this.interpreters.resolve();
    if (next.command !== this.interpreter?.command) {
      await this.restart(`interpreter changed to ${next.command}`);
    }
  }

  /** The settings a server starts with; remembers whether it started with execution off. */
  private startSettings(): ServerSettings {
    const settings = readSettings();
    this.executionWasOff = !settings.allowExecution;
    return settings;
  }

  private configurationChanged(e: vscode.ConfigurationChangeEvent): void {
    if (e.affectsConfiguration('fusionlens.pythonPath') || e.affectsConfiguration('python.defaultInterpreterPath')) {
      void this.restart('interpreter setting changed');
      return;
    }
    if (e.affectsConfiguration('fusionlens')) {
      const settings = readSettings();
      if (settings.allowExecution && this.executionWasOff) {
        // the server keeps execution off once told so, until it restarts (docs/lsp.md)
        void this.restart('execution allowed');
        return;
      }
      this.executionWasOff ||= !settings.allowExecution;
      this.log.info(`Settings changed: ${JSON.stringify(settings)}`);
      const client = this.connection?.client;
      if (client?.isRunning()) {
        void client.sendNotification(DidChangeConfigurationNotification.type, { settings: { fusionlens: settings } });
      }
      this.stateChanged.fire(); // the status bar shows whether execution is allowed
      this.regionsStale.fire(500);
    }
  }

  dispose(): void {
    for (const d of this.disposables) {
      d.dispose();
    }
  }
}
