// The extension's settings and workspace folders as VS Code has them (the mapping to the
// server's settings is logic/settings.ts).
import * as fs from 'fs';
import * as path from 'path';
import * as vscode from 'vscode';
import { toServerSettings, ServerSettings } from './logic/settings';

/** What the server is told now: the `fusionlens` section, with execution off when untrusted. */
export function readSettings(): ServerSettings {
  const cfg = vscode.workspace.getConfiguration('fusionlens');
  return toServerSettings((k) => cfg.get(k), vscode.workspace.isTrusted);
}

export function workspaceFolderPaths(): string[] {
  return (vscode.workspace.workspaceFolders ?? []).filter((f) => f.uri.scheme === 'file').map((f) => f.uri.fsPath);
}

/** A workspace folder that is a FusionLens checkout (install it editable rather than from PyPI). */
export function findRepoRoot(): string | undefined {
  for (const f of workspaceFolderPaths()) {
    if (fs.existsSync(path.join(f, 'lsp_server')) && fs.existsSync(path.join(f, 'pyproject.toml'))) {
      return f;
    }
  }
  return undefined;
}

/** Where the server runs. */
export function serverCwd(extensionPath: string): string | undefined {
  // In a trusted workspace run from the first folder (user code run by the server's worker
  // sees it as its working folder; the server itself starts with -P, so the folder is not on
  // its sys.path: a checkout opened as the workspace goes on PYTHONPATH instead, serverEnv).
  const folders = workspaceFolderPaths();
  return vscode.workspace.isTrusted && folders.length ? folders[0] : extensionPath;
}
