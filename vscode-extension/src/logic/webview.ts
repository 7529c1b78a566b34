// The report page's webview, its pure parts: the Content-Security-Policy, the nonce, and the
// messages between the page and the extension (docs/lsp.md, fusionlens.reportHtml). No `vscode` import.
import { randomBytes } from 'crypto';

/** What the page posts when a source line or a region is clicked: reveal it in the editor. */
export interface RevealMessage {
  type: 'reveal';
  /** The file as the report names it (an absolute path). */
  file: string;
  /** 1-based, as the report's lines. */
  line: number;
}

/** What the no-result page posts when its button is clicked: compile the file's current target. */
export interface CompileMessage {
  type: 'compile';
}

export type PageMessage = RevealMessage | CompileMessage;

/** What the extension posts when the editor's cursor moves: the page selects that line's region. */
export interface CursorMessage {
  type: 'cursor';
  file: string;
  line: number;
}

// Far past any source file; a larger number is not a line the page can have shown.
const MAX_LINE = 10_000_000;

/** A fresh nonce: 24 random bytes, base64url (32 characters, as the server accepts: 16 to 128). */
export function makeNonce(): string {
  return randomBytes(24).toString('base64url');
}

/**
 * The policy VS Code asks webviews to set: nothing by default, scripts only with the nonce,
 * styles with the nonce or inline (charting libraries set style attributes), images from the
 * webview's own resources and data: URIs.
 */
export function reportCsp(cspSource: string, nonce: string): string {
  if (!/^[A-Za-z0-9_-]+$/.test(nonce)) {
    throw new Error('a nonce is base64url characters');
  }
  if (!cspSource || /[;,\r\n]/.test(cspSource)) {
    throw new Error(`unexpected webview cspSource: ${cspSource}`);
  }
  return [
    "default-src 'none'",
    `script-src 'nonce-${nonce}'`,
    `style-src 'nonce-${nonce}' 'unsafe-inline'`,
    `img-src ${cspSource} data:`,
  ].join('; ');
}

function escapeAttr(s: string): string {
  return s.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/**
 * The page with the policy as the first element of its <head> (a policy in a meta element
 * applies only to what comes after it); a page without a <head> gets one.
 */
export function withCsp(html: string, csp: string): string {
  const meta = `<meta http-equiv="Content-Security-Policy" content="${escapeAttr(csp)}">`;
  const head = /<head(\s[^>]*)?>/i.exec(html);
  if (head) {
    const at = head.index + head[0].length;
    return html.slice(0, at) + meta + html.slice(at);
  }
  const htmlTag = /<html(\s[^>]*)?>/i.exec(html);
  const at = htmlTag ? htmlTag.index + htmlTag[0].length : 0;
  return `${html.slice(0, at)}<head>${meta}</head>${html.slice(at)}`;
}

/**
 * A message from the page, checked: only a reveal of an absolute path and a line number, or
 * the no-result page's compile (which names nothing: the extension compiles the file it
 * shows), is acted on (the page shows user source, so nothing it posts is trusted further).
 */
export function parsePageMessage(raw: unknown): PageMessage | undefined {
  if (!raw || typeof raw !== 'object') {
    return undefined;
  }
  const m = raw as Record<string, unknown>;
  if (m.type === 'compile') {
    return { type: 'compile' };
  }
  if (m.type !== 'reveal' || typeof m.file !== 'string' || typeof m.line !== 'number') {
    return undefined;
  }
  const absolute = m.file.startsWith('/') || /^[A-Za-z]:[\\/]/.test(m.file);
  if (!absolute || m.file.length > 4096 || m.file.includes('\0')) {
    return undefined;
  }
  if (!Number.isInteger(m.line) || m.line < 1 || m.line > MAX_LINE) {
    return undefined;
  }
  return { type: 'reveal', file: m.file, line: m.line };
}

/** The cursor at a 0-based editor line, as the page's 1-based line. */
export function cursorMessage(file: string, line0: number): CursorMessage {
  return { type: 'cursor', file, line: line0 + 1 };
}

/** The no-result page's button: the palette command it runs, by its title. */
export const COMPILE_BUTTON = 'Compile and Benchmark Current Target';

/**
 * A page that says why there is no report (no result yet, the server's message); with
 * `compileButton`, a button that asks the extension to compile (a `compile` message).
 */
export function messagePage(message: string, nonce: string, compileButton = false): string {
  const text = message.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
  const button = compileButton
    ? `<p><button id="compile" type="button">${COMPILE_BUTTON}</button></p><script nonce="${nonce}">
(function () {
  const vscode = typeof acquireVsCodeApi === "function" ? acquireVsCodeApi() : null;
  document.getElementById("compile").addEventListener("click", function () {
    if (vscode) vscode.postMessage({ type: "compile" });
  });
})();
</script>`
    : '';
  return `<!DOCTYPE html><html lang="en"><head><style nonce="${nonce}">
body { font-family: var(--vscode-font-family); color: var(--vscode-foreground); padding: 1.5em; }
button { font: inherit; color: var(--vscode-button-foreground); background: var(--vscode-button-background);
  border: none; padding: 0.4em 0.9em; cursor: pointer; }
button:hover { background: var(--vscode-button-hoverBackground); }
</style></head><body><h3>FusionLens report</h3><p id="message">${text}</p>${button}</body></html>`;
}
