// Generated trace / kernel code opens read-only: a content provider serves the server's .py
// files under the `fusionlens-generated` scheme (Python highlighting comes from the extension).
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';

export const GENERATED_SCHEME = 'fusionlens-generated';

export class GeneratedDocuments implements vscode.TextDocumentContentProvider {
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;
  /** When the server last asked to show each file (window/showDocument), by file URI. */
  private readonly shownAt = new Map<string, number>();

  async provideTextDocumentContent(uri: vscode.Uri): Promise<string> {
    try {
      return await fs.promises.readFile(uri.fsPath, 'utf8');
    } catch (e) {
      return `# FusionLens: cannot read ${uri.fsPath}: ${(e as Error).message}\n`;
    }
  }

  /** The read-only URI for a generated file on disk. */
  static toGenerated(file: vscode.Uri): vscode.Uri {
    return vscode.Uri.from({ scheme: GENERATED_SCHEME, path: file.path });
  }

  /**
   * Is this a file the server generated? Under `fusionlens.cacheFolder`, under the default
   * `~/.cache/fusionlens-lsp/generated/` (`<tmp>/fusionlens-lsp-<uid>/` without a home), in a
   * `.fusionlens-cache` folder, or outside the
   * workspace (the server only asks to show documents it wrote).
   */
  static isGenerated(file: vscode.Uri, cacheFolder?: string | null): boolean {
    if (file.scheme !== 'file' || !file.path.endsWith('.py')) {
      return false;
    }
    if (cacheFolder && !path.relative(path.resolve(cacheFolder), file.fsPath).startsWith('..')) {
      return true;
    }
    const parts = file.fsPath.split(path.sep);
    if (parts.some((p, i) => p === '.fusionlens-cache' || (p === 'generated' && /^fusionlens-lsp/.test(parts[i - 1] ?? '')))) {
      return true;
    }
    return vscode.workspace.getWorkspaceFolder(file) === undefined;
  }

  async open(file: vscode.Uri, selection?: vscode.Range, takeFocus?: boolean): Promise<vscode.TextEditor> {
    const uri = GeneratedDocuments.toGenerated(file);
    this.changed.fire(uri); // the file may have been rewritten by a new compile
    const doc = await vscode.workspace.openTextDocument(uri);
    if (doc.languageId !== 'python') {
      await vscode.languages.setTextDocumentLanguage(doc, 'python');
    }
    return vscode.window.showTextDocument(doc, {
      viewColumn: vscode.ViewColumn.Beside,
      preview: true,
      preserveFocus: takeFocus === false,
      selection,
    });
  }

  /** The server asked to show this file: a command returning it soon after need not open it again. */
  markShown(file: vscode.Uri): void {
    this.shownAt.set(file.toString(), Date.now());
  }

  shownRecently(file: vscode.Uri, withinMs = 5000): boolean {
    const at = this.shownAt.get(file.toString());
    return at !== undefined && Date.now() - at <= withinMs;
  }

  dispose(): void {
    this.changed.dispose();
  }
}
