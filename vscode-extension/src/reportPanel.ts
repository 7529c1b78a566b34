// "FusionLens: Show Report": the report page (compiler/html_report, rendered by the server:
// fusionlens.reportHtml) in a webview beside the editor. A click on a line or a region in the
// page reveals that line in the editor, the page follows the editor's cursor, and a new
// compile result of the file refreshes it. The panel follows the active Python editor (that
// file's report, or a page with a button to compile it), keeps the last pages it rendered per
// (file, target, result version), and comes back after a window reload (a serializer).
import * as vscode from 'vscode';
import { ExecuteCommandRequest } from 'vscode-languageclient/node';
import { CMD_REPORT_HTML, ReportHtmlResult } from './logic/protocol';
import {
  CachedPage, normalizeReportTargets, PageCache, pageKey, parseRestoredState, pickReportTarget, ReportTarget, targetContaining,
} from './logic/reportFollow';
import { CursorMessage, cursorMessage, makeNonce, messagePage, parsePageMessage, reportCsp, RevealMessage, withCsp } from './logic/webview';
import { activePythonEditor } from './regions';
import { Quiet, Server } from './server';

export const REPORT_VIEW_TYPE = 'fusionlens.report';
/** Where the panel's file and target are kept for a reload (the page cannot say: it is the server's). */
const STATE_KEY = 'fusionlens.reportPanel';
const WEBVIEW_OPTIONS: vscode.WebviewOptions = { enableScripts: true, localResourceRoots: [] };
/** A file the page asked to reveal becomes the active editor: not a switch to follow. */
const REVEAL_GRACE_MS = 3000;

interface Shown {
  uri: vscode.Uri;
  /** Asked for by a command (a regions view row): shown over the cursor's pick at the next render. */
  asked: string | null;
  /** The target whose report the page shows; null: a page saying why there is none. */
  target: string | null;
  /** The file's targets as last listed. */
  targets: ReportTarget[];
  /** The files the page shows lines of (as the report names them). */
  files: string[];
}

export class ReportPanel implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private shown: Shown | undefined;
  private renderSeq = 0;
  private refreshTimer: NodeJS.Timeout | undefined;
  private cursorTimer: NodeJS.Timeout | undefined;
  /** Where the editor's cursor last was: a page just rendered starts there. */
  private cursor: CursorMessage | undefined;
  private readonly pages = new PageCache();
  /** Each file's target shown last (a URI string -> name): switching back shows it again. */
  private readonly lastTarget = new Map<string, string>();
  private revealed: { fsPath: string; at: number } | undefined;
  private messageNonce = makeNonce();
  private readonly disposables: vscode.Disposable[];

  constructor(
    private readonly server: Server,
    private readonly log: vscode.LogOutputChannel,
    private readonly memento: vscode.Memento,
  ) {
    this.disposables = [
      // A compile of the shown file ended (or the results were cleared, the server restarted).
      server.onStatus((p) => p.state !== 'compiling' && this.shown && (!p.uri || this.sameFile(p.uri)) && this.refresh(200)),
      server.onRegionsStale((ms) => this.refresh(ms + 200)),
      server.onWillRestart(() => this.forget()), // a new server numbers its results from 1 again
      vscode.window.onDidChangeTextEditorSelection((e) => this.cursorMoved(e)),
      vscode.window.onDidChangeActiveTextEditor((ed) => void this.editorChanged(ed).catch((e) => this.warn(e))),
    ];
  }

  /** Open the panel (or bring it back) on the report of `uri`: `target`, else the cursor's pick. */
  async show(uri: vscode.Uri, target: string | null): Promise<void> {
    this.shown = this.newShown(uri, target);
    if (!this.panel) {
      this.adopt(vscode.window.createWebviewPanel(
        REPORT_VIEW_TYPE,
        'FusionLens Report',
        { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
        { ...WEBVIEW_OPTIONS, retainContextWhenHidden: true, enableFindWidget: true },
      ));
    } else {
      this.panel.reveal(undefined, true);
    }
    await this.render();
  }

  /** A panel of a window reloaded: show what it showed (the file's report now, or why there is none). */
  async restore(panel: vscode.WebviewPanel, state: unknown): Promise<void> {
    if (this.panel) {
      panel.dispose(); // one panel: the command opened one before the window restored this
      return;
    }
    panel.webview.options = WEBVIEW_OPTIONS;
    this.adopt(panel);
    const saved = parseRestoredState(state) ?? parseRestoredState(this.memento.get(STATE_KEY));
    const uri = saved ? vscode.Uri.parse(saved.uri) : activePythonEditor()?.document.uri;
    if (!uri) {
      this.showMessage(panel, undefined, 'Open a Python file with @compiler.example targets and run "FusionLens: Show Report".', false);
      return;
    }
    this.shown = this.newShown(uri, saved?.target ?? null);
    this.showMessage(panel, this.shown, 'Waiting for the FusionLens server…', false);
    try {
      await this.render();
    } catch (e) {
      this.warn(e);
      if (!(e instanceof Quiet) && panel === this.panel && this.shown) {
        this.showMessage(panel, this.shown, `No report: ${(e as Error).message}`, false);
      }
    }
  }

  /** Drop the pages kept (the server's results were cleared, or it restarts). */
  forget(): void {
    this.pages.clear();
    this.lastTarget.clear();
  }

  /** Render again after delayMs, if open (a newer request restarts the wait). */
  refresh(delayMs: number): void {
    if (!this.panel) {
      return;
    }
    if (this.refreshTimer) {
      clearTimeout(this.refreshTimer);
    }
    this.refreshTimer = setTimeout(() => this.render().catch((e) => this.warn(e)), delayMs);
  }

  private newShown(uri: vscode.Uri, asked: string | null): Shown {
    return { uri, asked, target: null, targets: [], files: [] };
  }

  private adopt(panel: vscode.WebviewPanel): void {
    panel.onDidDispose(() => {
      if (this.panel === panel) {
        this.panel = undefined;
        this.shown = undefined;
      }
    });
    panel.webview.onDidReceiveMessage((m) => void this.pageMessage(m));
    this.panel = panel;
  }

  private warn(e: unknown): void {
    if (!(e instanceof Quiet)) {
      this.log.warn(`${CMD_REPORT_HTML} failed: ${(e as Error).message}`);
    }
  }

  /** Whether a URI as the server names it is the shown file's. */
  private sameFile(serverUri: string): boolean {
    return !!this.shown && vscode.Uri.parse(serverUri).fsPath === this.shown.uri.fsPath;
  }

  private async request(args: unknown[]): Promise<ReportHtmlResult | null> {
    const c = await this.server.requireClient();
    return (await c.sendRequest(ExecuteCommandRequest.type, { command: CMD_REPORT_HTML, arguments: args })) as ReportHtmlResult | null;
  }

  /** The file's targets with the versions of their results (no page rendered). */
  private async listTargets(uri: vscode.Uri): Promise<{ targets: ReportTarget[]; message: string | undefined }> {
    const c = await this.server.requireClient();
    const res = await this.request([c.code2ProtocolConverter.asUri(uri), null, null, { render: false }]);
    return { targets: normalizeReportTargets(res?.targets), message: res?.message };
  }

  /** The 0-based cursor line in an editor of `uri`, the active one first. */
  private cursorLineIn(uri: vscode.Uri): number | undefined {
    const editors = [vscode.window.activeTextEditor, ...vscode.window.visibleTextEditors];
    return editors.find((e) => e && e.document.uri.toString() === uri.toString())?.selection.active.line;
  }

  /** Show the report the shown file picks now: from the pages kept where its result is unchanged. */
  private async render(): Promise<void> {
    const { panel, shown } = this;
    if (!panel || !shown) {
      return;
    }
    const seq = ++this.renderSeq;
    const stale = () => seq !== this.renderSeq || panel !== this.panel || shown !== this.shown;
    const listed = await this.listTargets(shown.uri);
    if (stale()) {
      return;
    }
    shown.targets = listed.targets;
    const asked = shown.asked;
    shown.asked = null;
    const uriKey = shown.uri.toString();
    const target = pickReportTarget(shown.targets, asked ? undefined : this.cursorLineIn(shown.uri), asked ?? this.lastTarget.get(uriKey));
    const version = shown.targets.find((t) => t.name === target)?.version ?? null;
    if (target === null || version === null) {
      const file = shown.uri.path.split('/').pop() ?? '';
      const none = shown.targets.length === 0;
      this.showMessage(panel, shown, none
        ? listed.message ?? `No compile targets in ${file}: mark a function with @compiler.example.`
        : `Nothing in ${file} has a compile result yet; compile a target first.`, !none);
      return;
    }
    const kept = this.pages.get(pageKey(uriKey, target, version));
    const page = kept ?? (await this.renderPage(shown, target, version));
    if (!page || stale()) {
      return;
    }
    this.showPage(panel, shown, page, kept !== undefined);
  }

  /** Ask the server for the page of `target` and keep it; undefined (a message shown) where there is none. */
  private async renderPage(shown: Shown, target: string, version: number): Promise<CachedPage | undefined> {
    const c = await this.server.requireClient();
    const nonce = makeNonce();
    const res = await this.request([c.code2ProtocolConverter.asUri(shown.uri), target, nonce]);
    if (!res || typeof res.html !== 'string') {
      if (this.panel && shown === this.shown) {
        this.showMessage(this.panel, shown, res?.message ?? 'The server sent no report.', true);
      }
      return undefined;
    }
    const files = Array.isArray(res.files) ? res.files.filter((f): f is string => typeof f === 'string') : [];
    const page: CachedPage = { html: res.html, nonce, target, files };
    this.pages.put(pageKey(shown.uri.toString(), target, typeof res.version === 'number' ? res.version : version), page);
    return page;
  }

  private showPage(panel: vscode.WebviewPanel, shown: Shown, page: CachedPage, kept: boolean): void {
    shown.target = page.target;
    shown.files = page.files;
    this.lastTarget.set(shown.uri.toString(), page.target);
    panel.title = `FusionLens: ${page.target}`;
    // The same text again (an unchanged result) does not reload the page.
    panel.webview.html = withCsp(page.html, reportCsp(panel.webview.cspSource, page.nonce));
    this.saveState(shown);
    this.postCursor(panel);
    this.log.info(`report page of ${page.target}: ${page.html.length} characters${kept ? ' (kept from before)' : ''}`);
  }

  private showMessage(panel: vscode.WebviewPanel, shown: Shown | undefined, text: string, compileButton: boolean): void {
    const file = shown?.uri.path.split('/').pop();
    panel.title = `FusionLens Report${file ? ` (${file})` : ''}`;
    panel.webview.html = withCsp(messagePage(text, this.messageNonce, compileButton), reportCsp(panel.webview.cspSource, this.messageNonce));
    if (shown) {
      shown.target = null;
      shown.files = [];
      this.saveState(shown);
    }
    this.log.info(`report panel of ${file ?? 'no file'}: ${text}`);
  }

  private saveState(shown: Shown): void {
    void this.memento.update(STATE_KEY, { uri: shown.uri.toString(), target: shown.target });
  }

  private postCursor(panel: vscode.WebviewPanel): void {
    const ed = vscode.window.activeTextEditor;
    if (ed && ed.document.uri.scheme === 'file') {
      this.cursor = cursorMessage(ed.document.uri.fsPath, ed.selection.active.line);
    }
    if (this.cursor) {
      void panel.webview.postMessage(this.cursor); // VS Code holds it until the new page has loaded
    }
  }

  /** Another editor is active: a Python file's report, unless the page asked for the file or shows its lines. */
  private async editorChanged(ed: vscode.TextEditor | undefined): Promise<void> {
    const shown = this.shown;
    if (!this.panel || !ed || ed.document.languageId !== 'python' || ed.document.uri.scheme !== 'file') {
      return; // the panel itself, an output, a generated document: keep the page
    }
    const uri = ed.document.uri;
    if (shown && uri.toString() === shown.uri.toString()) {
      return;
    }
    const r = this.revealed;
    if (r && r.fsPath === uri.fsPath && Date.now() - r.at < REVEAL_GRACE_MS) {
      return;
    }
    if (shown?.target && shown.files.includes(uri.fsPath)) {
      // A file of the model the page shows (imported by the target's file): keep the page unless it has results of its own.
      const own = await this.listTargets(uri);
      if (!own.targets.some((t) => t.version !== null) || shown !== this.shown) {
        return;
      }
    }
    this.shown = this.newShown(uri, null);
    this.refresh(50); // tabs flipped through quickly render once
  }

  /** The page asked to reveal a line, or (the no-result page) to compile the file. */
  private async pageMessage(raw: unknown): Promise<void> {
    const m = parsePageMessage(raw);
    if (!m) {
      return;
    }
    try {
      if (m.type === 'reveal') {
        await this.reveal(m);
      } else {
        await this.compileShown();
      }
    } catch (e) {
      this.log.warn(`could not ${m.type === 'reveal' ? `reveal ${m.file}:${m.line}` : 'compile'}: ${(e as Error).message}`);
    }
  }

  /** Where to show a file: where it shows already, else a column other than the panel's. */
  private editorColumn(uri: vscode.Uri): vscode.ViewColumn {
    const showing = vscode.window.visibleTextEditors.find((e) => e.document.uri.toString() === uri.toString());
    const panelColumn = this.panel?.viewColumn;
    return showing?.viewColumn ?? (panelColumn === vscode.ViewColumn.One ? vscode.ViewColumn.Beside : vscode.ViewColumn.One);
  }

  private async reveal(m: RevealMessage): Promise<void> {
    const uri = vscode.Uri.file(m.file);
    const doc = await vscode.workspace.openTextDocument(uri);
    const line = Math.min(m.line - 1, doc.lineCount - 1);
    const range = new vscode.Range(line, 0, line, doc.lineAt(line).range.end.character);
    this.revealed = { fsPath: uri.fsPath, at: Date.now() };
    const editor = await vscode.window.showTextDocument(doc, { viewColumn: this.editorColumn(uri), preserveFocus: false, preview: false });
    // The cursor at the line's start (a selection ending at a long line's end scrolls the editor sideways).
    editor.selection = new vscode.Selection(range.end, range.start);
    editor.revealRange(range, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
  }

  /** The no-result page's button: the shown file in its editor, then "Compile and Benchmark Current Target". */
  private async compileShown(): Promise<void> {
    const shown = this.shown;
    if (!shown) {
      return;
    }
    const doc = await vscode.workspace.openTextDocument(shown.uri);
    await vscode.window.showTextDocument(doc, { viewColumn: this.editorColumn(shown.uri), preserveFocus: false, preview: false });
    await vscode.commands.executeCommand('fusionlens.compileTarget');
  }

  /** The editor's cursor moved: the page selects that line's region; into another compiled target's function, its report. */
  private cursorMoved(e: vscode.TextEditorSelectionChangeEvent): void {
    const { panel, shown } = this;
    if (!panel || e.textEditor.document.uri.scheme !== 'file') {
      return;
    }
    const line0 = e.selections[0]?.active.line ?? 0;
    const cursor = cursorMessage(e.textEditor.document.uri.fsPath, line0);
    this.cursor = cursor;
    if (this.cursorTimer) {
      clearTimeout(this.cursorTimer);
    }
    this.cursorTimer = setTimeout(() => void panel.webview.postMessage(cursor), 100);
    if (shown && e.textEditor.document.uri.toString() === shown.uri.toString()) {
      const into = targetContaining(shown.targets, line0);
      if (into && into.name !== shown.target) {
        this.refresh(150);
      }
    }
  }

  dispose(): void {
    for (const t of [this.refreshTimer, this.cursorTimer]) {
      if (t) {
        clearTimeout(t);
      }
    }
    // The panel is left to VS Code: disposing it here, as the window reloads, would close it
    // instead of letting the serializer bring it back.
    this.panel = undefined;
    for (const d of this.disposables) {
      d.dispose();
    }
  }
}
