"""The compile results the server holds: the cache of finished compiles, and the result each
target shows in the editor. Its `generation` changes whenever what is shown does, so views
built from it know when they are stale."""

from __future__ import annotations

import gc

from lsp_server.annotations import Result, ResultKey

DEFAULT_CACHE_ENTRIES = 100  # results kept for compiles that ask again (setting fusionlens.cacheEntries)


def settle_heap() -> None:
    """Put what the server holds now (results, their reports and notes: a big file's are
    millions of objects) out of the garbage collector's reach: otherwise every full collection
    walks them all, a pause of 100 ms in the middle of an edit's requests. What the frozen
    results leave behind when replaced is collected at the next settle."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


class Results:
    def __init__(self) -> None:
        self._cache: dict[ResultKey, Result] = {}
        self._shown: dict[tuple[str, str], Result] = {}  # (normalised path, target) -> Result
        self.generation = 0
        self._seq = 0
        self._limit = DEFAULT_CACHE_ENTRIES

    def next_seq(self) -> int:
        """A number for a new result, larger than every earlier one's."""
        self._seq += 1
        return self._seq

    def cached(self, key: ResultKey) -> Result | None:
        return self._cache.get(key)

    def keep(self, result: Result, limit: int = DEFAULT_CACHE_ENTRIES) -> None:
        """Cache a result that has a report (failures of the machinery are retried, not cached).
        Past `limit` entries the oldest that no target shows are dropped (never one shown: the
        editor holds it anyway; nor this one, about to be shown)."""
        self._limit = limit
        if result.kind == "report" and result.key is not None:
            self._cache.pop(result.key, None)  # a recompile of the same key is the newest
            self._cache[result.key] = result
            self._trim(result)

    def _trim(self, keep: Result | None = None) -> None:
        over = len(self._cache) - self._limit
        if over <= 0:
            return
        held = {id(r) for r in self._shown.values()} | {id(keep)}
        for key in [k for k, r in self._cache.items() if id(r) not in held][:over]:  # oldest first
            del self._cache[key]

    def show(self, result: Result) -> None:
        """Make `result` the one its target shows."""
        key = (result.path, result.target)
        if self._shown.get(key) is not result:
            self._shown[key] = result
            self.generation += 1
            self._trim()  # the result it replaces may be shown nowhere now
            settle_heap()

    def shown(self, path: str, target: str) -> Result | None:
        return self._shown.get((path, target))

    def all_shown(self) -> list[tuple[tuple[str, str], Result]]:
        return list(self._shown.items())

    def mention(self, path: str) -> bool:
        """Whether a shown result annotates the file."""
        return any(path in r.files() for r in self._shown.values())

    def clear(self) -> None:
        self._cache.clear()
        self._shown.clear()
        self.generation += 1
        gc.unfreeze()  # what was held is garbage now

    def cached_count(self) -> int:
        return len(self._cache)
