// The extension's palette, menu and view commands. The server's own commands (fusionlens.compile,
// ...) are registered by vscode-languageclient; these call them with workspace/executeCommand.
import * as path from 'path';
import * as vscode from 'vscode';
import { ExecuteCommandRequest } from 'vscode-languageclient/node';
import { regionsAtLine, targetAtLine, RegionRow, TargetRow } from './logic/regionsModel';
import { formatLines } from './logic/format';
import { CMD_CLEAR_CACHE, CMD_COMPILE, CMD_EXPORT_REPRO, CMD_SHOW_KERNEL, CMD_SHOW_TRACE, CompileResult, RegionsResult } from './logic/protocol';
import { GeneratedDocuments } from './generated';
import { ReportPanel } from './reportPanel';
import { readSettings } from './config';
import { activePythonEditor, Regions } from './regions';
import { Quiet, Server } from './server';
import { StatusBar } from './statusBar';

type Row = TargetRow | RegionRow;

export interface CommandDeps {
  server: Server;
  regions: Regions;
  statusBar: StatusBar;
  generated: GeneratedDocuments;
  report: ReportPanel;
  log: vscode.LogOutputChannel;
}

export class Commands implements vscode.Disposable {
  private readonly disposables: vscode.Disposable[] = [];
  private readonly server: Server;
  private readonly regions: Regions;
  private readonly log: vscode.LogOutputChannel;

  constructor(private readonly deps: CommandDeps) {
    this.server = deps.server;
    this.regions = deps.regions;
    this.log = deps.log;
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
    reg('fusionlens.compileTarget', (row?: Row) => this.compile(row, false));
    reg('fusionlens.compileFile', () => this.compile(undefined, true));
    reg('fusionlens.openTrace', (row?: Row) => this.showTrace(row));
    reg('fusionlens.openKernel', (row?: RegionRow) => this.showKernel(row));
    reg('fusionlens.exportReproScript', (row?: RegionRow) => this.exportRepro(row));
    reg('fusionlens.showReport', (row?: Row) => this.showReport(row));
    reg('fusionlens.resetCache', () => this.clearCache());
    reg('fusionlens.restartServer', () => this.server.restart('restart command'));
    reg('fusionlens.showLog', () => this.log.show());
    reg('fusionlens.refreshRegions', () => this.regions.refresh(0));
    reg('fusionlens.revealRegion', (uri: string, lines: number[]) => this.regions.reveal(uri, lines));
    reg('fusionlens.statusClicked', () => deps.statusBar.clicked());
  }

  private async executeServer<T>(command: string, args: unknown[]): Promise<T> {
    const c = await this.server.requireClient();
    return (await c.sendRequest(ExecuteCommandRequest.type, { command, arguments: args })) as T;
  }

  /** The document's URI as the server knows it. */
  private async serverUri(uri: vscode.Uri): Promise<string> {
    const c = await this.server.requireClient();
    return c.code2ProtocolConverter.asUri(uri);
  }

  /** The file and regions a command acts on: the row's file, else the active Python editor. */
  private async context_(row?: Row): Promise<{ uri: vscode.Uri; result: RegionsResult; line: number | undefined }> {
    const shown = this.regions.shown;
    if (row && shown.uri && shown.result) {
      return { uri: shown.uri, result: shown.result, line: undefined };
    }
    const ed = activePythonEditor();
    if (!ed) {
      throw new Error('Open a Python file first.');
    }
    if (ed.document.isDirty) {
      await ed.document.save();
    }
    const result = await this.regions.fetch(ed.document.uri);
    return { uri: ed.document.uri, result, line: ed.selection.active.line };
  }

  private async pickTarget(result: RegionsResult, line: number | undefined, row?: Row): Promise<string | undefined> {
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

  private async compile(row: Row | undefined, wholeFile: boolean): Promise<void> {
    const { uri, result, line } = await this.context_(row);
    const target = wholeFile ? null : await this.pickTarget(result, line, row);
    if (target === undefined) {
      return;
    }
    const serverUri = await this.serverUri(uri);
    const what = target ?? path.basename(uri.fsPath);
    const res = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Window, title: `FusionLens: compiling ${what}` },
      () => this.executeServer<CompileResult | null>(CMD_COMPILE, [serverUri, target, { wait: true }]),
    );
    this.regions.refresh(0);
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
      void vscode.window.showInformationMessage(`FusionLens: nothing was compiled in ${what}${readSettings().allowExecution ? '' : ' (execution is not allowed)'}.`);
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
    // The server may have asked to show it already (window/showDocument).
    if (!this.deps.generated.shownRecently(uri)) {
      await this.deps.generated.open(uri, undefined, true);
    }
  }

  private async showTrace(row?: Row): Promise<void> {
    const { uri, result, line } = await this.context_(row);
    const target = await this.pickTarget(result, line, row);
    if (target === undefined) {
      return;
    }
    const res = await this.executeServer(CMD_SHOW_TRACE, [await this.serverUri(uri), target]);
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
    const res = await this.executeServer(CMD_SHOW_KERNEL, [await this.serverUri(uri), target, regionId]);
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
    const res = await this.executeServer<{ uri?: string; path?: string; summary?: string } | null>(
      CMD_EXPORT_REPRO, [await this.serverUri(uri), target, regionId]);
    await this.openReturned(res);
    if (res && res.path) {
      void vscode.window.showInformationMessage(`FusionLens: wrote ${res.path} (${res.summary ?? ''}); run it with python, attach it to a bug report.`);
    }
  }

  /**
   * The report page beside the editor: of the row's target, else of the active file (the
   * panel picks the target whose function holds the cursor, else the latest result).
   */
  private async showReport(row?: Row): Promise<void> {
    const shown = this.regions.shown;
    if (row && shown.uri) {
      await this.deps.report.show(shown.uri, row.target);
      return;
    }
    const ed = activePythonEditor();
    if (!ed) {
      throw new Error('Open a Python file first.');
    }
    await this.deps.report.show(ed.document.uri, null);
  }

  private async clearCache(): Promise<void> {
    await this.executeServer(CMD_CLEAR_CACHE, []);
    this.deps.statusBar.cacheCleared();
    this.regions.refresh(0);
    this.deps.report.forget();
    this.deps.report.refresh(0);
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
    for (const d of this.disposables) {
      d.dispose();
    }
  }
}
