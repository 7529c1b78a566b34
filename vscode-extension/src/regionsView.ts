// The "FusionLens Regions" tree view in the explorer.
import * as vscode from 'vscode';
import { buildViewModel, CollectiveRow, RegionRow, TargetRow, ViewModel } from './logic/regionsModel';
import type { RegionsResult } from './logic/protocol';

type Row = TargetRow | RegionRow | CollectiveRow;

function contextValue(row: Row): string {
  switch (row.kind) {
    case 'target':
      return 'fusionlens.target';
    case 'collective':
      return 'fusionlens.collective';
    default:
      return row.preview ? 'fusionlens.preview' : 'fusionlens.region';
  }
}

export class RegionsView implements vscode.TreeDataProvider<Row>, vscode.Disposable {
  private readonly changed = new vscode.EventEmitter<Row | undefined>();
  readonly onDidChangeTreeData = this.changed.event;
  private model: ViewModel = buildViewModel(null);
  readonly view: vscode.TreeView<Row>;
  /** What the view currently shows. */
  result: RegionsResult | null = null;
  uri: vscode.Uri | undefined;

  constructor() {
    this.view = vscode.window.createTreeView('fusionlens.regions', { treeDataProvider: this, showCollapseAll: true });
    this.view.message = this.model.message;
  }

  show(uri: vscode.Uri | undefined, result: RegionsResult | null, why?: string): void {
    this.uri = uri;
    this.result = result;
    this.model = buildViewModel(result, why);
    this.view.message = this.model.message;
    this.view.description = uri ? uri.path.split('/').pop() : undefined;
    this.changed.fire(undefined);
  }

  getTreeItem(row: Row): vscode.TreeItem {
    const item = new vscode.TreeItem(
      row.label,
      row.kind === 'target'
        ? row.children.length
          ? vscode.TreeItemCollapsibleState.Expanded
          : vscode.TreeItemCollapsibleState.None
        : vscode.TreeItemCollapsibleState.None,
    );
    item.id = row.key;
    item.description = row.description;
    item.tooltip = row.tooltip;
    item.iconPath = new vscode.ThemeIcon(row.icon);
    item.contextValue = contextValue(row);
    if (this.uri) {
      // A collective run by a hook has no line here: its target's line.
      const lines =
        row.kind === 'target' ? [row.line] : row.kind === 'collective' && !row.lines.length ? this.targetLine(row.target) : row.lines;
      item.command = { command: 'fusionlens.revealRegion', title: 'Reveal', arguments: [this.uri.toString(), lines] };
    }
    return item;
  }

  getChildren(row?: Row): Row[] {
    if (!row) {
      return this.model.rows;
    }
    return row.kind === 'target' ? row.children : [];
  }

  private targetLine(target: string): number[] {
    const t = this.model.rows.find((r) => r.target === target);
    return t ? [t.line] : [];
  }

  getParent(row: Row): Row | undefined {
    if (row.kind !== 'target') {
      return this.model.rows.find((t) => t.target === row.target);
    }
    return undefined;
  }

  dispose(): void {
    this.view.dispose();
    this.changed.dispose();
  }
}
