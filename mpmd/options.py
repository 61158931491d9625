"""The boolean partitioning options, as Python sees the one table of them.

Every boolean option of a partition is one row of `MPMD_PARTITION_FLAGS` in
`include/mpmd/Pipeline.h`, which the extension exposes as
`mpmd._mpmd.PARTITION_FLAGS`: its name (the field of
`_mpmd.PartitionOptions`; users write `mpmd_<name>`), default, phase (the
pipeline that reads it), `mpmd-opt` text spelling, whether users set it, and
what it does. Everything else derives from that row: the user options
`make_config` accepts and their defaults (`KNOWN_PARTITIONING_OPTIONS`,
`default`), the text options of `mpmd-opt`'s pipelines and the replay
arguments (both from the same table in C++: lib/Transforms/Passes.cpp and
lib/Driver/MpmdOptArgs.cpp) and the options table of docs/api.md
(`docs_table`; `python -m mpmd.options_doc` rewrites it, test_options.py
fails when it is stale).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from mpmd import _mpmd

PHASES: tuple[str, ...] = ("import", "optimize", "export")


@dataclasses.dataclass(frozen=True)
class Flag:
  """One row of the table.

  Attributes:
    name: the field of `_mpmd.PartitionOptions` (`fragment_remat`).
    default: its value when not set.
    phase: the pipeline that reads it: "import", "optimize" or "export".
    text: its text option of `-mpmd-<phase>-pipeline` (`fragment-remat`).
    user: whether users set it (as `mpmd_<name>`); else the driver sets it
      from the schedule.
    doc: what it does (Markdown).
  """
  name: str
  default: bool
  phase: str
  text: str
  user: bool
  doc: str

  @property
  def option(self) -> str:
    """The user's name of the option: `mpmd_<name>`."""
    return f"mpmd_{self.name}"


#: Every row, in table order.
FLAGS: tuple[Flag, ...] = tuple(Flag(*row) for row in _mpmd.PARTITION_FLAGS)

#: The memory kinds values can be assigned to and transferred between
#: (include/mpmd/Dialect/MemoryKinds.h, the one definition).
MEMORY_KINDS: tuple[str, ...] = tuple(_mpmd.MEMORY_KINDS)

#: The rows users set in `partitioning_options`.
USER_FLAGS: tuple[Flag, ...] = tuple(f for f in FLAGS if f.user)

#: The partitioning options `make_config` accepts, with their types.
KNOWN_PARTITIONING_OPTIONS: dict[str, type] = {f.option: bool for f in USER_FLAGS}

_DEFAULTS: dict[str, bool] = {f.option: f.default for f in USER_FLAGS}


def default(option: str) -> bool:
  """The default of user option `option` (`mpmd_<name>`). Raises KeyError
  naming the known options for any other name."""
  try:
    return _DEFAULTS[option]
  except KeyError:
    raise KeyError(f"{option!r} is not a partitioning option (known: "
                   f"{', '.join(_DEFAULTS)})") from None


def typed(values: Mapping[str, bool]) -> _mpmd.PartitionOptions:
  """A fresh `_mpmd.PartitionOptions` with the user options `values` set
  (`mpmd_<name>` -> bool; the others at their defaults)."""
  options = _mpmd.PartitionOptions()
  for flag in USER_FLAGS:
    setattr(options, flag.name, bool(values.get(flag.option, flag.default)))
  return options


def copy(options: _mpmd.PartitionOptions) -> _mpmd.PartitionOptions:
  """A copy of `options` (every flag, the merge rules and the dispatch cost)."""
  fresh = _mpmd.PartitionOptions()
  for flag in FLAGS:
    setattr(fresh, flag.name, getattr(options, flag.name))
  fresh.merge_rules = list(options.merge_rules)
  fresh.dispatch_cost = options.dispatch_cost  # (a copy of the C++ struct)
  return fresh


DOCS_BEGIN = ("<!-- partitioning options: generated from MPMD_PARTITION_FLAGS "
              "(include/mpmd/Pipeline.h) by `python -m mpmd.options_doc`; do not edit -->")
DOCS_END = "<!-- end of generated partitioning options -->"


def docs_table() -> str:
  """The Markdown table of the user options (docs/api.md), between markers."""
  rows = [DOCS_BEGIN, "| option | default | effect |", "|---|---|---|"]
  rows += [f"| `{f.option}` | `{f.default}` | {f.doc} |" for f in USER_FLAGS]
  rows.append(DOCS_END)
  return "\n".join(rows)


def with_docs_table(text: str) -> str:
  """`text` (docs/api.md) with its generated table replaced by `docs_table()`.
  Raises ValueError when the markers are missing."""
  begin, end = text.find(DOCS_BEGIN), text.find(DOCS_END)
  if begin < 0 or end < begin:
    raise ValueError("docs/api.md has no generated partitioning options table (markers "
                     f"{DOCS_BEGIN!r} ... {DOCS_END!r})")
  return text[:begin] + docs_table() + text[end + len(DOCS_END):]
