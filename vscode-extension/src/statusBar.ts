// The status bar item: the server's state, the last compile and its speedup (the text is
// logic/status.ts), and what a click on it does.
import * as vscode from 'vscode';
import { StatusParams } from './logic/protocol';
import { statusView } from './logic/status';
import { readSettings } from './config';
import { Server } from './server';

export class StatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private readonly disposables: vscode.Disposable[];
  private lastStatus: StatusParams | null = null;
  private lastSpeedup: number | null = null;
  private action: string = 'showRegions';

  constructor(
    private readonly server: Server,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.item = vscode.window.createStatusBarItem('fusionlens.status', vscode.StatusBarAlignment.Left, 10);
    this.item.name = 'FusionLens';
    this.item.command = 'fusionlens.statusClicked';
    this.disposables = [
      this.item,
      server.onDidChangeState(() => this.update()),
      server.onStatus((p) => this.statusReceived(p)),
      server.onWillRestart(() => (this.lastStatus = null)),
    ];
    this.update();
    this.item.show();
  }

  private statusReceived(params: StatusParams): void {
    this.lastStatus = params;
    if (typeof params.speedup === 'number') {
      this.lastSpeedup = params.speedup;
    }
    this.update();
  }

  /** The cache is gone, and with it the speedup shown. */
  cacheCleared(): void {
    this.lastSpeedup = null;
    this.update();
  }

  private update(): void {
    const view = statusView({
      server: this.server.state,
      trusted: vscode.workspace.isTrusted,
      allowExecution: readSettings().allowExecution,
      last: this.lastStatus,
      lastSpeedup: this.lastSpeedup,
    });
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
    this.item.backgroundColor =
      view.kind === 'error'
        ? new vscode.ThemeColor('statusBarItem.errorBackground')
        : view.kind === 'warning'
          ? new vscode.ThemeColor('statusBarItem.warningBackground')
          : undefined;
    this.action = view.action;
  }

  async clicked(): Promise<void> {
    switch (this.action) {
      case 'showLog':
        this.log.show();
        break;
      case 'restart':
        if (this.server.problem) {
          await this.server.showProblem();
        } else {
          await this.server.restart('status bar');
        }
        break;
      case 'manageTrust':
        await vscode.commands.executeCommand('workbench.trust.manage');
        break;
      default:
        await vscode.commands.executeCommand('fusionlens.regions.focus');
    }
  }

  dispose(): void {
    for (const d of this.disposables) {
      d.dispose();
    }
  }
}
