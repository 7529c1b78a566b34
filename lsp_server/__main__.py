"""`python -P -m lsp_server`: the server. Start it with -P (or as `fusionlens-lsp`): `-m`
alone puts the working folder (an editor's workspace) first on sys.path, and a workspace
`lsp_server.py` would be run in place of this package. What -P would have left out is taken
out here before anything else is imported, so a workspace's own `compiler/`, `torch.py` or
`json.py` never replaces a module the server imports."""

import os
import sys

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the folder this package is in


def _drop_start_folder() -> None:
    if sys.flags.safe_path or not sys.path:
        return
    first = sys.path[0]
    start = os.path.abspath(first or os.curdir)
    if start != _HERE:  # a checkout run from its own folder keeps finding itself
        del sys.path[0]
    if _HERE not in [os.path.abspath(p or os.curdir) for p in sys.path]:
        sys.path.append(_HERE)


if __name__ == "__main__":  # (the fusionlens-lsp script's sys.path starts with its own bin folder)
    _drop_start_folder()

from lsp_server.app import main  # noqa: E402 - only once the start folder is gone

if __name__ == "__main__":
    main()
