// "FusionLens: Show Report": the report page (compiler/html_report, rendered by the server:
// fusionlens.reportHtml) in a webview beside the editor. A click on a line or a region in the
// page reveals that line in the editor, the page follows the editor's cursor, and a new
// compile result of the file refreshes it.
import * as vscode from 'vscode';
import { ExecuteCommandRequest } from 'vscode-languageclient/node';
import { CMD_REPORT_HTML, ReportHtmlResult } from './logic/protocol';
import { CursorMessage, cursorMessage, makeNonce, messagePage, parsePageMessage, reportCsp, RevealMessage, withCsp } from './logic/webview';
import { Quiet, Server } from './server';

export const REPORT_VIEW_TYPE = 'fusionlens.report';

interface Shown {
  uri: vscode.Uri;
  /** The document's URI as the server knows it (its fusionlens/status messages name it so). */
  serverUri: string;
  /** null: the first target of the file that has a result (the server picks). */
  target: string | null;
}

export class ReportPanel implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private shown: Shown | undefined;
  private renderSeq = 0;
  private refreshTimer: NodeJS.Timeout | undefined;
  private cursorTimer: NodeJS.Timeout | undefined;
  /** Where the editor's cursor last was: a page just rendered starts there. */
  private cursor: CursorMessage | undefined;
  private readonly disposables: vscode.Disposable[];

  constructor(
    private readonly server: Server,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.disposables = [
      // A compile of the file ended (or the results were cleared, the server restarted).
      server.onStatus((p) => p.state !== 'compiling' && (!p.uri || p.uri === this.shown?.serverUri) && this.refresh(200)),
      server.onRegionsStale((ms) => this.refresh(ms + 200)),
      vscode.window.onDidChangeTextEditorSelection((e) => this.cursorMoved(e)),
    ];
  }

  /** Open the panel (or bring it back) on the report of `target` in `uri`. */
  async show(uri: vscode.Uri, target: string | null): Promise<void> {
    const c = await this.server.requireClient();
    this.shown = { uri, serverUri: c.code2ProtocolConverter.asUri(uri), target };
    if (!this.panel) {
      const panel = vscode.window.createWebviewPanel(
        REPORT_VIEW_TYPE,
        'FusionLens Report',
        { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
        { enableScripts: true, retainContextWhenHidden: true, enableFindWidget: true, localResourceRoots: [] },
      );
      panel.onDidDispose(() => {
        this.panel = undefined;
        this.shown = undefined;
      });
      panel.webview.onDidReceiveMessage((m) => void this.pageMessage(m));
      this.panel = panel;
    } else {
      this.panel.reveal(undefined, true);
    }
    await this.render();
  }

  /** Render again after delayMs, if open (a newer request restarts the wait). */
  refresh(delayMs: number): void {
    if (!this.panel) {
      return;
    }
    if (this.refreshTimer) {
      clearTimeout(this.refreshTimer);
    }
    this.refreshTimer = setTimeout(() => {
      this.render().catch((e) => {
        if (!(e instanceof Quiet)) {
          this.log.warn(`${CMD_REPORT_HTML} failed: ${(e as Error).message}`);
        }
      });
    }, delayMs);
  }

  private async render(): Promise<void> {
    const { panel, shown } = this;
    if (!panel || !shown) {
      return;
    }
    const seq = ++this.renderSeq;
    const nonce = makeNonce();
    const c = await this.server.requireClient();
    const res = (await c.sendRequest(ExecuteCommandRequest.type, {
      command: CMD_REPORT_HTML,
      arguments: [shown.serverUri, shown.target, nonce],
    })) as ReportHtmlResult | null;
    if (seq !== this.renderSeq || panel !== this.panel) {
      return; // a newer render, or the panel was closed
    }
    const html = res && typeof res.html === 'string' ? res.html : messagePage(res?.message ?? 'The server sent no report.', nonce);
    const file = shown.uri.path.split('/').pop();
    panel.title = res?.target ? `FusionLens: ${res.target}` : `FusionLens Report${file ? ` (${file})` : ''}`;
    panel.webview.html = withCsp(html, reportCsp(panel.webview.cspSource, nonce));
    const ed = vscode.window.activeTextEditor;
    if (ed && ed.document.uri.scheme === 'file') {
      this.cursor = cursorMessage(ed.document.uri.fsPath, ed.selection.active.line);
    }
    if (this.cursor) {
      void panel.webview.postMessage(this.cursor); // VS Code holds it until the new page has loaded
    }
    this.log.info(`report page of ${res?.target ?? shown.target ?? file}: ${res?.html ? `${res.html.length} characters` : res?.message}`);
  }

  /** The page asked to reveal a line: open its file beside the panel and select the line. */
  private async pageMessage(raw: unknown): Promise<void> {
    const m = parsePageMessage(raw);
    if (!m) {
      return;
    }
    try {
      await this.reveal(m);
    } catch (e) {
      this.log.warn(`could not reveal ${m.file}:${m.line}: ${(e as Error).message}`);
    }
  }

  private async reveal(m: RevealMessage): Promise<void> {
    const uri = vscode.Uri.file(m.file);
    const doc = await vscode.workspace.openTextDocument(uri);
    const line = Math.min(m.line - 1, doc.lineCount - 1);
    const showing = vscode.window.visibleTextEditors.find((e) => e.document.uri.toString() === uri.toString());
    const panelColumn = this.panel?.viewColumn;
    const column = showing?.viewColumn ?? (panelColumn === vscode.ViewColumn.One ? vscode.ViewColumn.Beside : vscode.ViewColumn.One);
    const range = new vscode.Range(line, 0, line, doc.lineAt(line).range.end.character);
    const editor = await vscode.window.showTextDocument(doc, { viewColumn: column, preserveFocus: false, preview: false });
    // The cursor at the line's start (a selection ending at a long line's end scrolls the editor sideways).
    editor.selection = new vscode.Selection(range.end, range.start);
    editor.revealRange(range, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
  }

  /** The editor's cursor moved: the page selects that line's region (a short wait: typing moves it a lot). */
  private cursorMoved(e: vscode.TextEditorSelectionChangeEvent): void {
    const panel = this.panel;
    if (!panel || e.textEditor.document.uri.scheme !== 'file') {
      return;
    }
    const cursor = cursorMessage(e.textEditor.document.uri.fsPath, e.selections[0]?.active.line ?? 0);
    this.cursor = cursor;
    if (this.cursorTimer) {
      clearTimeout(this.cursorTimer);
    }
    this.cursorTimer = setTimeout(() => void panel.webview.postMessage(cursor), 100);
  }

  dispose(): void {
    for (const t of [this.refreshTimer, this.cursorTimer]) {
      if (t) {
        clearTimeout(t);
      }
    }
    this.panel?.dispose();
    for (const d of this.disposables) {
      d.dispose();
    }
  }
}
