// Keeps the regions view on the active Python file: asks the server for `fusionlens/regions`
// when the editor, the file or the server's results change, and reveals a region's lines.
import * as vscode from 'vscode';
import { lineBlocks } from './logic/format';
import { METHOD_REGIONS, normalizeRegions, RegionsResult } from './logic/protocol';
import { RegionsView } from './regionsView';
import { Quiet, Server } from './server';

/** The active editor when it is a Python file on disk. */
export function activePythonEditor(): vscode.TextEditor | undefined {
  const ed = vscode.window.activeTextEditor;
  if (ed && ed.document.languageId === 'python' && ed.document.uri.scheme === 'file') {
    return ed;
  }
  return undefined;
}

export class Regions implements vscode.Disposable {
  private readonly view = new RegionsView();
  private readonly disposables: vscode.Disposable[];
  private refreshTimer: NodeJS.Timeout | undefined;
  private refreshSeq = 0;

  constructor(
    private readonly server: Server,
    private readonly log: vscode.LogOutputChannel,
  ) {
    this.disposables = [
      this.view,
      vscode.window.onDidChangeActiveTextEditor(() => this.refresh(50)),
      vscode.workspace.onDidSaveTextDocument((d) => d.languageId === 'python' && this.refresh(300)),
      this.view.view.onDidChangeVisibility((e) => e.visible && this.refresh(0)),
      server.onRegionsStale((ms) => this.refresh(ms)),
      server.onStatus((p) => this.statusReceived(p.uri, p.state)),
      server.onDidFail(() => this.view.show(undefined, null, 'The FusionLens server is not running. Click the status bar item for details.')),
    ];
  }

  /** The file the view shows and its regions (null before any answer). */
  get shown(): { uri: vscode.Uri | undefined; result: RegionsResult | null } {
    return { uri: this.view.uri, result: this.view.result };
  }

  private statusReceived(uri: string | null, state: string): void {
    const active = vscode.window.activeTextEditor?.document.uri.toString();
    if (!uri || uri === active) {
      this.refresh(state === 'compiling' ? 200 : 0);
    }
  }

  /** Ask again after delayMs; a newer request restarts the wait. */
  refresh(delayMs: number): void {
    if (this.refreshTimer) {
      clearTimeout(this.refreshTimer);
    }
    this.refreshTimer = setTimeout(() => void this.doRefresh(), delayMs);
  }

  async fetch(uri: vscode.Uri): Promise<RegionsResult> {
    const c = await this.server.requireClient();
    const raw = await c.sendRequest(METHOD_REGIONS, { uri: c.code2ProtocolConverter.asUri(uri) });
    return normalizeRegions(raw, uri.toString());
  }

  private async doRefresh(): Promise<void> {
    const seq = ++this.refreshSeq;
    const ed = activePythonEditor();
    if (!ed) {
      // Keep showing the last Python file while a generated document or another editor is active.
      if (!this.view.uri) {
        this.view.show(undefined, null);
      }
      return;
    }
    if (this.server.state !== 'running') {
      return;
    }
    try {
      const result = await this.fetch(ed.document.uri);
      if (seq === this.refreshSeq) {
        this.view.show(ed.document.uri, result);
      }
    } catch (e) {
      if (!(e instanceof Quiet)) {
        this.log.warn(`${METHOD_REGIONS} failed: ${(e as Error).message}`);
        if (seq === this.refreshSeq) {
          this.view.show(ed.document.uri, null, `Could not get regions: ${(e as Error).message}`);
        }
      }
    }
  }

  /** Open the file and select the lines (a row's click). */
  async reveal(uriString: string, lines: number[]): Promise<void> {
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

  dispose(): void {
    if (this.refreshTimer) {
      clearTimeout(this.refreshTimer);
    }
    for (const d of this.disposables) {
      d.dispose();
    }
  }
}
