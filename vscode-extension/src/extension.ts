// FusionLens VS Code extension: starts `python -P -m lsp_server`, adds commands, the status bar
// item, the regions view and read-only generated code. The protocol is docs/lsp.md.
//
// Modules, each owning its state: server.ts (lifecycle; client.ts the language client,
// python.ts the interpreter), statusBar.ts, regions.ts (+ regionsView.ts), commands.ts,
// generated.ts, reportPanel.ts (the report page's webview), config.ts; src/logic/ has what is
// tested without VS Code.
import * as vscode from 'vscode';
import { Commands } from './commands';
import { GeneratedDocuments, GENERATED_SCHEME } from './generated';
import { PythonInterpreters } from './python';
import { Regions } from './regions';
import { ReportPanel, REPORT_VIEW_TYPE } from './reportPanel';
import { Server } from './server';
import { StatusBar } from './statusBar';

let server: Server | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const log = vscode.window.createOutputChannel('FusionLens', { log: true });
  const generated = new GeneratedDocuments();
  const interpreters = new PythonInterpreters(log);
  server = new Server(context.extensionPath, log, generated, interpreters);
  const statusBar = new StatusBar(server, log);
  const regions = new Regions(server, log);
  const report = new ReportPanel(server, log, context.workspaceState);
  const commands = new Commands({ server, regions, statusBar, generated, report, log });
  context.subscriptions.push(
    commands,
    report,
    log,
    statusBar,
    regions,
    generated,
    vscode.workspace.registerTextDocumentContentProvider(GENERATED_SCHEME, generated),
    // A report panel open when the window reloaded comes back (activation: onWebviewPanel).
    vscode.window.registerWebviewPanelSerializer(REPORT_VIEW_TYPE, { deserializeWebviewPanel: (panel, state) => report.restore(panel, state) }),
    server,
    interpreters,
  );
  // Do not hold up activation on the server: it reports through the status item.
  server.start();
}

export async function deactivate(): Promise<void> {
  await server?.stop();
  server = undefined;
}
