"""Progress where people wait: long loops (chunks of a decode, profile repeats, tensors of a conversion, the
demo's runs) report through one small object that renders with `tqdm.auto` (a widget in Jupyter, a bar in a
terminal) and/or calls back a function (the Workbench's progress bar).

`progress=` arguments take None (a bar, unless kzlab is quiet), False (nothing) or a callable
`fn(done, total)` (called after each step, no bar). `set_quiet(True)`, the CLI's `--quiet` and the
environment variable KZLAB_QUIET=1 silence the bars.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

ProgressFn = Callable[[int, int], None]
_quiet: bool | None = None


def set_quiet(quiet: bool | None) -> None:
    """Silence the progress bars (True), show them (False), or follow KZLAB_QUIET again (None)."""
    global _quiet
    _quiet = quiet


def is_quiet() -> bool:
    if _quiet is not None:
        return _quiet
    return os.environ.get("KZLAB_QUIET", "").strip().lower() not in ("", "0", "false", "no")


class Progress:
    """One loop's progress: `step()` after each item; `close()` (or a `with` block) at the end."""

    def __init__(self, total: int, desc: str, progress: ProgressFn | bool | None = None, unit: str = "it"):
        self.total, self.done = int(total), 0
        self._fn: ProgressFn | None = progress if callable(progress) else None
        self._bar: Any = None
        if progress is None and not is_quiet() and self.total > 1:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=self.total, desc=desc, unit=unit, leave=False, dynamic_ncols=True)

    def describe(self, text: str) -> None:
        """Name what the loop is doing now (the bar's label): where the time goes, said while it goes."""
        if self._bar is not None:
            self._bar.set_description_str(text, refresh=True)

    def step(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        if self._fn is not None:
            self._fn(self.done, self.total)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
