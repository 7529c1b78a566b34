// The language client for one server process: how it is spawned, and the middleware between
// VS Code and the server (settings, generated documents, lenses in untrusted workspaces).
import * as cp from 'child_process';
import * as vscode from 'vscode';
import { LanguageClient, LanguageClientOptions, Middleware, ResponseError, RevealOutputChannelOn, ServerOptions } from 'vscode-languageclient/node';
import { SERVER_ARGS } from './logic/interpreter';
import { answerConfigurationItem, ServerSettings } from './logic/settings';
import { CMD_CLEAR_CACHE, CMD_COMPILE } from './logic/protocol';
import { GeneratedDocuments } from './generated';
import { readSettings } from './config';

export interface ClientSetup {
  python: string;
  cwd: string | undefined;
  /** The server's environment (logic/interpreter.ts serverEnv). */
  env: NodeJS.ProcessEnv;
  log: vscode.LogOutputChannel;
  generated: GeneratedDocuments;
  initializationOptions: ServerSettings;
  /** A server command ran from a lens or code action: the regions may have changed. */
  regionsStale: (delayMs: number) => void;
}

export interface ServerConnection {
  client: LanguageClient;
  /** Last lines the server wrote to stderr (for the message when it dies at startup). */
  stderrTail: () => string[];
}

export function createConnection(setup: ClientSetup): ServerConnection {
  let stderrTail: string[] = [];
  // Spawn the process ourselves so its stderr can also be kept for error messages;
  // vscode-languageclient still copies it to the log channel.
  const serverOptions: ServerOptions = async () => {
    stderrTail = [];
    const child = cp.spawn(setup.python, SERVER_ARGS, {
      cwd: setup.cwd,
      env: setup.env,
      stdio: 'pipe',
      windowsHide: true,
    });
    child.stderr.setEncoding('utf8');
    child.stderr.on('data', (d: string) => {
      stderrTail.push(...d.split(/\r?\n/).filter((l) => l.trim()));
      stderrTail.splice(0, Math.max(0, stderrTail.length - 30));
    });
    child.on('exit', (code, signal) => {
      if (code !== 0 && code !== null) {
        setup.log.warn(`Server process exited with code ${code}`);
      } else if (signal) {
        setup.log.warn(`Server process killed by ${signal}`);
      }
    });
    return child;
  };
  const clientOptions: LanguageClientOptions = {
    // untitled buffers too: the server compiles a buffer's own text
    documentSelector: [{ scheme: 'file', language: 'python' }, { scheme: 'untitled', language: 'python' }],
    outputChannel: setup.log,
    revealOutputChannelOn: RevealOutputChannelOn.Never,
    initializationOptions: setup.initializationOptions,
    middleware: middleware(setup),
  };
  const client = new LanguageClient('fusionlens', 'FusionLens', serverOptions, clientOptions);
  return { client, stderrTail: () => stderrTail };
}

function middleware(setup: ClientSetup): Middleware {
  return {
    workspace: {
      // The server asks for `fusionlens.*`: answer from our settings (trust applied), pass the rest on.
      configuration: async (params, token, next) => {
        const theirs = params.items.some((i) => answerConfigurationItem(i.section, readSettings()) === undefined)
          ? await next(params, token)
          : [];
        if (theirs instanceof ResponseError) {
          return theirs;
        }
        const settings = readSettings();
        return params.items.map((item, i) => {
          const ours = answerConfigurationItem(item.section, settings);
          return ours !== undefined ? ours : Array.isArray(theirs) ? theirs[i] : null;
        });
      },
    },
    window: {
      showDocument: async (params, token, next) => {
        const uri = vscode.Uri.parse(params.uri);
        if (!params.external && GeneratedDocuments.isGenerated(uri, readSettings().cacheFolder)) {
          setup.generated.markShown(uri);
          const sel = params.selection
            ? new vscode.Range(params.selection.start.line, params.selection.start.character, params.selection.end.line, params.selection.end.character)
            : undefined;
          await setup.generated.open(uri, sel, params.takeFocus);
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
        setup.regionsStale(0);
      }
      return result;
    },
  };
}
