"""The one way to find an op's backward rule: `lookup(sym)`, by the symbol object.

prim_rules holds the prims' rules, torch_rules and composite_rules those of registered
torch-level symbols (registering one for a name no symbol has fails at import; attention_rules
adds SDPA's to torch_rules' table); a later
package adds the rules of its own symbols with `extend` (fusionlens.distributed.autograd_rules). A symbol
with no rule here gets its decomposition differentiated, or the generic rule.
"""

from __future__ import annotations


from fusionlens.middle.autograd import attention_rules, composite_rules, prim_rules, torch_rules  # noqa: F401
from fusionlens.middle.autograd.torch_rules import Rule
from fusionlens.frontend import views
from fusionlens.ir.trace import BoundSymbol, Symbol, Value


def lookup(sym: Symbol) -> Rule | None:
    """The rule of `sym`, as (forward op, cotangents) -> (input Value, cotangent) pairs; None
    where it has none. A torch-level rule may raise torch_rules.NoRule for arguments it does
    not cover."""
    prim = prim_rules.RULES.get(sym)  # read at each call: tests swap a prim's rule
    if prim is not None:
        return lambda b, cots: _prim_pairs(b, prim(b, cots))
    if sym.impl is views.untracked_update:  # new values, the old gradient path: saves nothing
        return lambda b, cots: [(b.args[0], cots[0])] if cots[0] is not None else []
    return (torch_rules.RULES.get(sym) or composite_rules.RULES.get(sym)
            or next((table[sym] for table in _EXTENSIONS if sym in table), None))


_EXTENSIONS: list[dict[Symbol, Rule]] = []


def extend(table: dict[Symbol, Rule]) -> None:
    """Rules of symbols a later package defines (fusionlens.distributed's collectives): their
    symbols exist only once that package is imported, and it registers their rules then."""
    if table not in _EXTENSIONS:
        _EXTENSIONS.append(table)


def _prim_pairs(b: BoundSymbol, grads: list) -> list[tuple[Value, Value]]:
    """A prim rule gives a cotangent per positional argument (a list for a list argument,
    cat's); as pairs with the Values they belong to."""
    pairs = []
    for arg, g in zip(b.args, grads):
        if isinstance(arg, (list, tuple)) and isinstance(g, list):
            pairs += [(a, gi) for a, gi in zip(arg, g) if isinstance(a, Value) and gi is not None]
        elif isinstance(arg, Value) and g is not None:
            pairs.append((arg, g))
    return pairs
