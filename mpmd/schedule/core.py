"""The schedule representation: units, per-mesh orders, validation, text form.

A pipeline schedule is, for every mesh, the total order in which that mesh runs
its *scheduling units*. A unit is one piece of work of one microbatch on one
pipeline stage:

- ``F``: the forward of stage ``s`` for microbatch ``m``;
- ``B``: the backward of the stage. When the backward is *split* (zero-bubble
  schedules) ``B`` is only the activation-gradient part (what the previous
  stage waits for) and
- ``W`` is the weight-gradient part, which nothing downstream waits for.

Stages are numbered ``0 .. S-1`` along the model; ``stage_to_mesh`` says which
mesh runs each stage. With one stage per mesh ``S = P``; with ``V`` virtual
stages per mesh ``S = P * V`` and the placement is *looped* (stage ``s`` on mesh
``s % P``) or *V-shaped* (ZBV, DualPipeV: stage ``s`` on mesh ``s`` for
``s < P`` and on mesh ``2P - 1 - s`` after that).

Data dependencies (what the simulator and the deadlock check honour):

- ``F(s, m)`` needs ``F(s-1, m)``;
- ``B(s, m)`` needs ``F(s, m)`` and ``B(s+1, m)`` (the last stage's ``B`` only
  its own ``F``);
- ``W(s, m)`` needs ``B(s, m)``.

Forward-only schedules (inference) have only ``F`` units; a *wrap-around*
forward-only schedule (``ParallelPipelinesWithWrapAround``) starts microbatch
``m`` at stage ``m % S`` and runs the stages cyclically from there.

Text form (``Schedule.to_text`` / ``Schedule.from_text``), one line per mesh,
``<mesh name>: <units>``; a schedule not tied to a topology names mesh ``k``
``m<k>``::

    m0: F0 F1 F2 F3 B0 B1 B2 B3
    m1: F0 F1 F2 F3 B0 B1 B2 B3

The grammar is defined once, in C++ (include/mpmd/UnitText.h), and read here
through the extension: ``mpmd-opt``'s ``schedule`` and ``merge-rules`` options
read the same text. Lines are separated by newlines or ``;``. A token is
``<kind><microbatch>`` with kind ``F``, ``B`` or ``W``, optionally followed by
``.s<stage>`` (``F0.s4``). Without the suffix the unit belongs to the stage
numbered like its mesh (stage ``k`` on mesh ``k``; under a given placement
whose mesh ``k`` holds one other stage, that stage). The printers (`format_unit`
here, ``formatUnit`` in C++) write the suffix exactly when the stage is not
the mesh's index. ``#`` starts a comment, a lone ``.`` is an idle slot and is
ignored (so JaxPP-style grids paste in), and two directives may precede the
mesh lines: ``@name <text>`` and ``@wrap_around``.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

from mpmd import _mpmd
from mpmd.errors import DeadlockError, ScheduleError, ScheduleParseError

Kind = Literal["F", "B", "W"]
KINDS: tuple[str, ...] = ("F", "B", "W")


@dataclasses.dataclass(frozen=True)
class WaitEdge:
  """One link of a deadlock cycle: ``mesh`` is stuck at ``blocked``, which
  needs ``awaited`` (on ``awaited_mesh``), not yet run."""

  mesh: int
  blocked: "Unit"
  awaited: "Unit"
  awaited_mesh: int


@dataclasses.dataclass(frozen=True)
class Unit:
  """One scheduling unit: ``kind`` of ``stage`` for ``microbatch``.

  ``kind`` is ``"F"`` (forward), ``"B"`` (backward, or its activation-gradient
  part when the backward is split) or ``"W"`` (weight-gradient part of a
  split backward). ``str(unit)`` is the text token with the stage, ``F3.s1``.
  """

  kind: Kind
  microbatch: int
  stage: int

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ScheduleError(f"unit kind must be one of F, B, W; got {self.kind!r}")
    for field in ("microbatch", "stage"):
      v = getattr(self, field)
      if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ScheduleError(
            f"unit {field} must be a non-negative int; got {v!r}")

  def token(self, with_stage: bool = True, *, mesh: int | None = None) -> str:
    """The text-form token: ``F3`` or, with the stage, ``F3.s1`` (left out
    when the stage is ``mesh``, the index of the mesh the unit runs on)."""
    return format_unit(self.kind, self.microbatch, self.stage if with_stage else None, mesh)

  def __str__(self) -> str:
    return self.token(True)

  @classmethod
  def parse(cls, token: str, default_stage: int | None = None) -> "Unit":
    """Parses a token (``F3`` needs ``default_stage``, ``F3.s1`` does not)."""
    kind, microbatch, stage = split_token(token)
    if stage is None:
      if default_stage is None:
        raise ScheduleError(f"unit token {token!r} needs a stage (.s<stage>)")
      stage = default_stage
    return cls(kind, microbatch, stage)


def format_unit(kind: str, microbatch: int, stage: int | None = None,
                mesh: int | None = None) -> str:
  """The printer of unit tokens (schedules, merge rules, the `mpmd-opt` replay
  arguments): ``F3``, or ``F3.s5`` when the stage is known (not None, >= 0)
  and is not ``mesh``, the index of the unit's mesh. It is C++'s
  (``formatUnitToken``, include/mpmd/UnitText.h)."""
  return _mpmd.format_unit_token(kind, int(microbatch), -1 if stage is None else int(stage),
                                 -1 if mesh is None else int(mesh))


def format_line(mesh_name: str, tokens: Iterable[str]) -> str:
  """``m1: F0 B0``: one line of a schedule or merge rule (C++'s
  ``formatUnitLine`` writes the same)."""
  return f"{mesh_name}: {' '.join(tokens)}".rstrip()


def split_token(token: str) -> tuple[str, int, int | None]:
  """``F3.s1`` -> ("F", 3, 1); ``B2`` -> ("B", 2, None). The one parser of
  unit tokens in Python (schedules, merge rules). Raises `ScheduleError`."""
  unit = _mpmd.parse_unit_token(token) if isinstance(token, str) else None
  if unit is None:
    raise ScheduleError(f"bad unit token {token!r}; {_TOKEN_HELP}")
  return unit.kind, unit.microbatch, None if unit.stage < 0 else unit.stage


MeshOrder = dict[int, list[Unit]]
"""Per-mesh total orders: mesh index -> the units that mesh runs, in order."""

_TOKEN_HELP = f"expected {_mpmd.UNIT_SYNTAX}, e.g. F0, B3, W2.s5"
_MESH_INDEX = re.compile(r"m(?P<index>\d+)")


def _line_mesh(head: str, mesh_names: Sequence[str] | None) -> int | None:
  """The index of the mesh a text line names (`head`, before the colon): a
  name of `mesh_names`, else ``m<index>``; None if it names none."""
  if mesh_names is not None and head in mesh_names:
    return list(mesh_names).index(head)
  match = _MESH_INDEX.fullmatch(head)
  if match is None:
    return None
  index = int(match.group("index"))
  return index if mesh_names is None or index < len(mesh_names) else None


def looped_placement(num_meshes: int, virtual_stages: int = 1) -> tuple[int, ...]:
  """Stage ``s`` on mesh ``s % P`` for ``S = P * V`` stages."""
  _check_positive(num_meshes=num_meshes, virtual_stages=virtual_stages)
  return tuple(s % num_meshes for s in range(num_meshes * virtual_stages))


def v_placement(num_meshes: int, virtual_stages: int = 2) -> tuple[int, ...]:
  """V-shaped (zig-zag) placement: stages go down the meshes and back up.

  Stage ``s`` of chunk ``v = s // P`` sits on mesh ``s % P`` when ``v`` is even
  and on mesh ``P - 1 - s % P`` when ``v`` is odd. With ``V = 2`` this is the
  ZBV / DualPipeV layout: mesh ``i`` holds stages ``i`` and ``2P - 1 - i``, so
  the first and the last stage share mesh 0.
  """
  _check_positive(num_meshes=num_meshes, virtual_stages=virtual_stages)
  out = []
  for s in range(num_meshes * virtual_stages):
    v, r = divmod(s, num_meshes)
    out.append(r if v % 2 == 0 else num_meshes - 1 - r)
  return tuple(out)


def _check_positive(**values: int) -> None:
  for name, v in values.items():
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
      raise ScheduleError(f"{name} must be a positive int; got {v!r}")


def _read_mesh_lines(text: str, mesh_names: Sequence[str] | None
                     ) -> tuple[dict[int, tuple[int, str, list[str]]], bool, str | None]:
  """The first step of `Schedule.from_text`: mesh index -> (line number,
  line, tokens) for each mesh line, whether `@wrap_around` is given, and the
  `@name` directive's text."""
  mesh_lines: dict[int, tuple[int, str, list[str]]] = {}
  wrap = False
  text_name = None
  for piece in _mpmd.split_unit_text(text):
    lineno, raw = piece.line_number, piece.text
    line = raw
    if piece.directive:
      directive, _, arg = line[1:].partition(" ")
      if directive == "name" and arg.strip():
        text_name = arg.strip()
      elif directive == "wrap_around" and not arg.strip():
        wrap = True
      else:
        raise ScheduleParseError(
            f"unknown directive {line!r}; expected '@name <text>' or "
            "'@wrap_around'", line_number=lineno, line=raw, token=line)
      continue
    head = piece.mesh if piece.has_mesh else ""
    mesh = _line_mesh(head, mesh_names) if head else None
    if mesh is None and (not head or mesh_names is None):
      raise ScheduleParseError(
          "expected 'm<mesh>: <units>' (e.g. 'm0: F0 F1 B0 B1'), a "
          "directive ('@name ...', '@wrap_around') or a '#' comment",
          line_number=lineno, line=raw)
    if mesh is None:
      raise ScheduleParseError(
          f"the schedule table has a line for mesh {head!r}, which is not in the topology "
          f"(meshes: {', '.join(mesh_names)}; a line may also name a mesh by its index, "
          f"m0..m{len(mesh_names) - 1})", line_number=lineno, line=raw, token=head)
    if mesh in mesh_lines:
      raise ScheduleParseError(
          f"mesh {head} already given on line {mesh_lines[mesh][0]}",
          line_number=lineno, line=raw, token=head)
    mesh_lines[mesh] = (lineno, raw, list(piece.tokens))
  return mesh_lines, wrap, text_name


def _read_units(mesh_lines: dict[int, tuple[int, str, list[str]]], num_meshes: int,
                stage_to_mesh: Sequence[int] | None
                ) -> tuple[dict[int, list[Unit]], dict[int, tuple[int, int, str]]]:
  """The second step of `Schedule.from_text`: each mesh's units, and where
  each stage was first seen (mesh, line, token) when the placement is
  inferred."""
  given_stages: dict[int, tuple[int, ...]] | None = None
  if stage_to_mesh is not None:
    given_stages = {}
    for s, k in enumerate(stage_to_mesh):
      given_stages.setdefault(k, ())
      given_stages[k] += (s,)
  parsed: dict[int, list[Unit]] = {}
  where: dict[int, tuple[int, int, str]] = {}  # stage -> (mesh, line, token)
  for mesh in range(num_meshes):
    lineno, raw, tokens = mesh_lines[mesh]
    units = []
    for tok in tokens:
      if tok == ".":
        continue
      try:
        kind, microbatch, stage_given = split_token(tok)
      except ScheduleError:
        raise ScheduleParseError(f"bad token {tok!r}: {_TOKEN_HELP} (or '.' "
                                 "for an idle slot)", line_number=lineno,
                                 line=raw, token=tok) from None
      if stage_given is not None:
        stage = stage_given
      elif given_stages is None:
        stage = mesh
      elif mesh in given_stages.get(mesh, ()):
        stage = mesh  # The stage numbered like its mesh.
      else:
        on_mesh = given_stages.get(mesh, ())
        if len(on_mesh) != 1:
          held = (" and ".join(map(str, on_mesh)) if on_mesh else "no stage")
          raise ScheduleParseError(
              f"token {tok!r} has no stage, but mesh {mesh} holds "
              f"{'stages ' if len(on_mesh) > 1 else ''}{held}; write "
              f"{tok}.s<stage>", line_number=lineno, line=raw, token=tok)
        stage = on_mesh[0]
      unit = Unit(kind, microbatch, stage)
      if given_stages is None:
        if stage in where and where[stage][0] != mesh:
          k0, l0, t0 = where[stage]
          raise ScheduleParseError(
              f"stage {stage} appears on mesh {mesh} ({tok!r}) and on mesh "
              f"{k0} (line {l0}, {t0!r}); a stage runs on one mesh",
              line_number=lineno, line=raw, token=tok)
        where.setdefault(stage, (mesh, lineno, tok))
      units.append(unit)
    parsed[mesh] = units
  return parsed, where


class Schedule:
  """A pipeline schedule: for every mesh, the total order of its units.

  Args:
    orders: mesh index -> iterable of `Unit`s in execution order (a mapping
      with keys ``0 .. P-1``, or a sequence indexed by mesh).
    num_microbatches: M.
    stage_to_mesh: mesh of each stage (``len`` = S). Default: one stage per
      mesh, stage ``k`` on mesh ``k``.
    split_backward: whether the backward is split into ``B`` and ``W``.
      Default: True iff some unit is a ``W``.
    forward_only: the schedule has only ``F`` units (inference).
    wrap_around: forward-only; microbatch ``m`` enters at stage ``m % S`` and
      visits the stages cyclically (``ParallelPipelinesWithWrapAround``).
    name: a display name (not part of equality).
    validate: check the structure (every unit exactly once, on its stage's
      mesh). Deadlock freedom is checked by `validate()` and the simulator.

  Raises:
    ScheduleError: if the structure is invalid (with ``validate=True``).
  """

  def __init__(self, orders: Mapping[int, Iterable[Unit]] | Sequence[Iterable[Unit]],
               *, num_microbatches: int,
               stage_to_mesh: Sequence[int] | None = None,
               split_backward: bool | None = None,
               forward_only: bool = False,
               wrap_around: bool = False,
               name: str | None = None,
               validate: bool = True):
    if isinstance(orders, Mapping):
      self._orders = {int(k): tuple(v) for k, v in orders.items()}
    else:
      self._orders = {k: tuple(v) for k, v in enumerate(orders)}
    _check_positive(num_microbatches=num_microbatches)
    self._num_microbatches = num_microbatches
    if stage_to_mesh is None:
      stage_to_mesh = tuple(range(len(self._orders)))
    self._stage_to_mesh = tuple(int(m) for m in stage_to_mesh)
    if not self._stage_to_mesh:
      raise ScheduleError("a schedule needs at least one stage")
    if split_backward is None:
      split_backward = any(u.kind == "W" for o in self._orders.values() for u in o)
    self._split = bool(split_backward)
    self._forward_only = bool(forward_only)
    self._wrap_around = bool(wrap_around)
    self.name = name
    if self._wrap_around and not self._forward_only:
      raise ScheduleError("wrap_around schedules must be forward_only")
    if self._forward_only and self._split:
      raise ScheduleError("a forward_only schedule has no backward to split")
    self._num_meshes = max(max(self._stage_to_mesh) + 1, len(self._orders))
    self._stages_on: dict[int, tuple[int, ...]] = {
        k: tuple(s for s, m in enumerate(self._stage_to_mesh) if m == k)
        for k in range(self._num_meshes)}
    if validate:
      self._validate_structure()

  # ----------------------------------------------------------------- shape
  @property
  def num_meshes(self) -> int:
    """P, the number of meshes."""
    return self._num_meshes

  @property
  def num_microbatches(self) -> int:
    """M, the number of microbatches."""
    return self._num_microbatches

  @property
  def num_stages(self) -> int:
    """S, the number of pipeline stages."""
    return len(self._stage_to_mesh)

  @property
  def virtual_stages(self) -> int | None:
    """V = S / P when every mesh holds the same number of stages, else None."""
    counts = {len(v) for v in self._stages_on.values()}
    return counts.pop() if len(counts) == 1 else None

  @property
  def stage_to_mesh(self) -> tuple[int, ...]:
    """Mesh of each stage."""
    return self._stage_to_mesh

  @property
  def placement(self) -> str:
    """``"looped"``, ``"v"`` (V-shaped) or ``"custom"``."""
    v = self.virtual_stages
    if v is not None:
      if self._stage_to_mesh == looped_placement(self._num_meshes, v):
        return "looped"
      if self._stage_to_mesh == v_placement(self._num_meshes, v):
        return "v"
    return "custom"

  @property
  def split_backward(self) -> bool:
    """Whether the backward is split into ``B`` (activation grad) and ``W``."""
    return self._split

  @property
  def forward_only(self) -> bool:
    """Whether the schedule has only forward units."""
    return self._forward_only

  @property
  def wrap_around(self) -> bool:
    """Whether microbatch ``m`` enters at stage ``m % S`` (forward only)."""
    return self._wrap_around

  @property
  def kinds(self) -> tuple[str, ...]:
    """The unit kinds this schedule has: F; F, B; or F, B, W."""
    if self._forward_only:
      return ("F",)
    return ("F", "B", "W") if self._split else ("F", "B")

  @property
  def orders(self) -> MeshOrder:
    """A fresh ``{mesh: [units in order]}`` dict."""
    return {k: list(self.order(k)) for k in range(self._num_meshes)}

  def order(self, mesh: int) -> tuple[Unit, ...]:
    """The units of ``mesh`` in execution order."""
    return self._orders.get(mesh, ())

  def items(self) -> Iterator[tuple[int, tuple[Unit, ...]]]:
    """``(mesh, units)`` pairs in mesh order."""
    for k in range(self._num_meshes):
      yield k, self.order(k)

  def units(self) -> Iterator[Unit]:
    """Every unit, mesh by mesh, in order."""
    for _, order in self.items():
      yield from order

  def mesh_of(self, stage: int) -> int:
    """The mesh that runs ``stage``."""
    return self._stage_to_mesh[stage]

  def stages_on(self, mesh: int) -> tuple[int, ...]:
    """The stages placed on ``mesh``, ascending."""
    return self._stages_on.get(mesh, ())

  def expected_units(self, mesh: int | None = None) -> list[Unit]:
    """Every unit the schedule must contain (of one mesh, or all)."""
    stages = range(self.num_stages) if mesh is None else self.stages_on(mesh)
    return [Unit(k, m, s) for s in stages for m in range(self._num_microbatches)
            for k in self.kinds]

  # ----------------------------------------------------------- dependencies
  def entry_stage(self, microbatch: int) -> int:
    """The first stage microbatch ``microbatch`` runs (0 unless wrap-around)."""
    return microbatch % self.num_stages if self._wrap_around else 0

  def dependencies(self, unit: Unit) -> tuple[Unit, ...]:
    """The units ``unit`` consumes results of (its data dependencies)."""
    s, m, last = unit.stage, unit.microbatch, self.num_stages - 1
    if unit.kind == "F":
      if self._wrap_around:
        if s == self.entry_stage(m):
          return ()
        return (Unit("F", m, (s - 1) % self.num_stages),)
      return (Unit("F", m, s - 1),) if s > 0 else ()
    if unit.kind == "B":
      if s == last:
        return (Unit("F", m, s),)
      return (Unit("F", m, s), Unit("B", m, s + 1))
    return (Unit("B", m, s),)

  # ------------------------------------------------------------- validation
  def _validate_structure(self) -> None:
    problems: list[str] = []
    P, S, M = self._num_meshes, self.num_stages, self._num_microbatches
    for k in self._orders:
      if not 0 <= k < P:
        problems.append(f"order given for mesh {k}, but the stages are placed "
                        f"on meshes 0..{P - 1}")
    for s, k in enumerate(self._stage_to_mesh):
      if k < 0:
        problems.append(f"stage {s} is placed on negative mesh {k}")
    for k in range(P):
      if not self._stages_on[k]:
        problems.append(f"mesh {k} holds no stage")
    seen: dict[Unit, tuple[int, int]] = {}
    for k in sorted(self._orders):
      for pos, u in enumerate(self._orders[k]):
        if not isinstance(u, Unit):
          problems.append(f"mesh {k} position {pos}: {u!r} is not a Unit")
          continue
        if u.stage >= S:
          problems.append(f"unit {u} on mesh {k}: stage {u.stage} does not "
                          f"exist (the schedule has {S} stages)")
          continue
        if u.microbatch >= M:
          problems.append(f"unit {u} on mesh {k}: microbatch {u.microbatch} "
                          f"does not exist (the schedule has {M} microbatches)")
          continue
        if u.kind == "W" and not self._split:
          problems.append(f"unit {u} on mesh {k}: W units need a split "
                          "backward (split_backward=True)")
        if u.kind != "F" and self._forward_only:
          problems.append(f"unit {u} on mesh {k}: a forward-only schedule has "
                          "no backward units")
        if self._stage_to_mesh[u.stage] != k:
          problems.append(f"unit {u} is on mesh {k}, but stage {u.stage} is "
                          f"placed on mesh {self._stage_to_mesh[u.stage]}")
        if u in seen:
          k0, p0 = seen[u]
          where = (f"twice on mesh {k} (positions {p0} and {pos})" if k0 == k
                   else f"on mesh {k0} (position {p0}) and mesh {k} "
                        f"(position {pos})")
          problems.append(f"unit {u} appears {where}")
        else:
          seen[u] = (k, pos)
    for k in range(P):
      missing = [u for u in self.expected_units(k) if u not in seen]
      if missing:
        shown = " ".join(str(u) for u in missing[:12])
        more = f" (and {len(missing) - 12} more)" if len(missing) > 12 else ""
        problems.append(f"mesh {k} is missing {len(missing)} unit"
                        f"{'s' if len(missing) != 1 else ''}: {shown}{more}")
    if problems:
      title = f"invalid schedule{f' {self.name!r}' if self.name else ''}"
      shown = problems[:20]
      if len(problems) > 20:
        shown.append(f"... and {len(problems) - 20} more problems")
      raise ScheduleError(title + ":\n  - " + "\n  - ".join(shown))

  def validate(self) -> "Schedule":
    """Checks the structure and that the orders do not deadlock.

    Returns:
      self, so ``Schedule(...).validate()`` chains.

    Raises:
      ScheduleError: bad structure (names units and meshes).
      DeadlockError: the orders wait on each other (names the cycle).
    """
    self._validate_structure()
    run_in_order(self, lambda u: 0.0, 0.0)
    return self

  # ------------------------------------------------------------- text form
  def _mesh_names(self, mesh_names: Sequence[str] | None) -> list[str]:
    if mesh_names is None:
      return [f"m{k}" for k in range(self._num_meshes)]
    if len(mesh_names) != self._num_meshes:
      raise ScheduleError(f"the schedule has {self._num_meshes} meshes, got "
                          f"{len(mesh_names)} mesh names")
    return list(mesh_names)

  def to_text(self, mesh_names: Sequence[str] | None = None) -> str:
    """The text form: directives (if any), then ``<mesh name>: <tokens>`` per
    mesh (``mesh_names`` in mesh order; default ``m0``, ``m1``, ...)."""
    lines = []
    if self.name:
      lines.append(f"@name {self.name}")
    if self._wrap_around:
      lines.append("@wrap_around")
    for name, (k, order) in zip(self._mesh_names(mesh_names), self.items()):
      lines.append(format_line(name, (u.token(mesh=k) for u in order)))
    return "\n".join(lines) + "\n"

  @classmethod
  def from_text(cls, text: str, *, stage_to_mesh: Sequence[int] | None = None,
                num_microbatches: int | None = None,
                name: str | None = None,
                mesh_names: Sequence[str] | None = None) -> "Schedule":
    """Parses the text form (see the module docstring).

    Args:
      text: the schedule text.
      stage_to_mesh: placement; inferred from where each stage's units appear
        when omitted (tokens without ``.s<stage>`` then mean stage = mesh).
      num_microbatches: M; inferred as 1 + the largest microbatch if omitted.
      name: display name; overrides an ``@name`` directive.
      mesh_names: the meshes' names in mesh order (a topology's): a line may
        name its mesh by name or as ``m<index>``. Default: only ``m<index>``.

    Raises:
      ScheduleParseError: malformed text (names the line, the token and the
        expected syntax).
      ScheduleError: a well-formed text that is not a valid schedule.
    """
    mesh_lines, wrap, text_name = _read_mesh_lines(text, mesh_names)
    if not mesh_lines:
      raise ScheduleParseError("no mesh lines ('m0: ...') found")
    num_meshes = max(mesh_lines) + 1
    absent = [k for k in range(num_meshes) if k not in mesh_lines]
    if absent:
      raise ScheduleParseError(
          "missing mesh line" + ("s " if len(absent) > 1 else " ")
          + ", ".join(f"m{k}" for k in absent)
          + f" (meshes must be numbered m0..m{num_meshes - 1}; an idle mesh "
          "still needs its line, e.g. 'm2:')")
    parsed, where = _read_units(mesh_lines, num_meshes, stage_to_mesh)
    if stage_to_mesh is None:
      num_stages = max(where) + 1 if where else num_meshes
      unplaced = [s for s in range(num_stages) if s not in where]
      if unplaced:
        raise ScheduleParseError(
            "stage" + ("s " if len(unplaced) > 1 else " ")
            + ", ".join(map(str, unplaced))
            + " never appear" + ("" if len(unplaced) > 1 else "s")
            + "; cannot infer the placement (pass stage_to_mesh=)")
      stage_to_mesh = tuple(where[s][0] for s in range(num_stages))
    all_units = [u for us in parsed.values() for u in us]
    if num_microbatches is None:
      num_microbatches = 1 + max((u.microbatch for u in all_units), default=0)
    has_b = any(u.kind == "B" for u in all_units)
    has_w = any(u.kind == "W" for u in all_units)
    return cls(parsed, num_microbatches=num_microbatches,
               stage_to_mesh=stage_to_mesh, split_backward=has_w,
               forward_only=not (has_b or has_w), wrap_around=wrap,
               name=name if name is not None else text_name)

  # ------------------------------------------------------------ dict form
  def to_dict(self) -> dict[str, Any]:
    """A JSON-compatible dict (for tools and the compiler driver)."""
    return {
        "name": self.name,
        "num_meshes": self._num_meshes,
        "num_microbatches": self._num_microbatches,
        "stage_to_mesh": list(self._stage_to_mesh),
        "split_backward": self._split,
        "forward_only": self._forward_only,
        "wrap_around": self._wrap_around,
        "orders": [[[u.kind, u.microbatch, u.stage] for u in order]
                   for _, order in self.items()],
    }

  @classmethod
  def from_dict(cls, data: Mapping[str, Any]) -> "Schedule":
    """Inverse of `to_dict`."""
    try:
      orders = [[Unit(k, int(m), int(s)) for k, m, s in order]
                for order in data["orders"]]
      return cls(orders, num_microbatches=int(data["num_microbatches"]),
                 stage_to_mesh=data["stage_to_mesh"],
                 split_backward=bool(data.get("split_backward", False)),
                 forward_only=bool(data.get("forward_only", False)),
                 wrap_around=bool(data.get("wrap_around", False)),
                 name=data.get("name"))
    except (KeyError, TypeError, ValueError) as e:
      if isinstance(e, ScheduleError):
        raise
      raise ScheduleError(f"malformed schedule dict: {e!r}") from e

  # -------------------------------------------------------------- display
  def describe(self) -> str:
    """One line: name, P, M, S, placement, backward kind."""
    parts = [f"P={self._num_meshes} meshes", f"M={self._num_microbatches} "
             "microbatches", f"S={self.num_stages} stages"]
    if self.num_stages != self._num_meshes or self.placement != "looped":
      parts[-1] += f" ({self.placement} placement)"
    parts.append("forward only" if self._forward_only else
                 "split backward (B + W)" if self._split else "full backward")
    if self._wrap_around:
      parts.append("wrap-around")
    return f"{self.name or 'schedule'}: " + ", ".join(parts)

  def table(self) -> str:
    """A text table: a header line, then one aligned row per mesh."""
    rows = [[u.token(mesh=k) for u in order] for k, order in self.items()]
    width = max((len(t) for r in rows for t in r), default=1)
    label = max(len(f"m{self._num_meshes - 1}:"), 3)
    lines = [self.describe()]
    for k, row in enumerate(rows):
      cells = " ".join(t.ljust(width) for t in row).rstrip()
      lines.append(f"{f'm{k}:'.ljust(label)} {cells}".rstrip())
    return "\n".join(lines)

  def __str__(self) -> str:
    return self.table()

  def __repr__(self) -> str:
    return f"<Schedule {self.describe()}>"

  def __eq__(self, other: object) -> bool:
    if not isinstance(other, Schedule):
      return NotImplemented
    return (self._num_microbatches == other._num_microbatches
            and self._stage_to_mesh == other._stage_to_mesh
            and self._split == other._split
            and self._forward_only == other._forward_only
            and self._wrap_around == other._wrap_around
            and self._num_meshes == other._num_meshes
            and all(self.order(k) == other.order(k)
                    for k in range(self._num_meshes)))

  __hash__ = None  # type: ignore[assignment]


def run_in_order(schedule: Schedule, duration, latency
                 ) -> tuple[dict[Unit, float], dict[Unit, float]]:
  """Runs every mesh's order as early as dependencies allow.

  Each mesh runs one unit at a time in its order; a unit starts when the mesh
  is free and every dependency has ended (plus the latency when the
  dependency ran on another mesh).

  Args:
    schedule: the schedule (structure assumed valid).
    duration: ``unit -> time``.
    latency: transfer time between different meshes: a number, or
      ``(dependency, unit) -> time`` (e.g. per stage boundary).

  Returns:
    ``(start, end)`` times of every unit.

  Raises:
    DeadlockError: the orders cannot all run; names the wait-for cycle.
  """
  P = schedule.num_meshes
  orders = [schedule.order(k) for k in range(P)]
  mesh_of = schedule.stage_to_mesh
  latency_of = latency if callable(latency) else (lambda d, u, fixed=latency: fixed)
  pos = [0] * P
  free = [0.0] * P
  start: dict[Unit, float] = {}
  end: dict[Unit, float] = {}
  deps_cache: dict[Unit, tuple[Unit, ...]] = {}
  remaining = sum(len(o) for o in orders)
  while remaining:
    progressed = False
    for k in range(P):
      order = orders[k]
      while pos[k] < len(order):
        u = order[pos[k]]
        deps = deps_cache.get(u)
        if deps is None:
          deps = deps_cache[u] = schedule.dependencies(u)
        t = free[k]
        for d in deps:
          e = end.get(d)
          if e is None:
            break
          if mesh_of[d.stage] != k:
            e += latency_of(d, u)
          if e > t:
            t = e
        else:
          start[u] = t
          end[u] = free[k] = t + duration(u)
          pos[k] += 1
          remaining -= 1
          progressed = True
          continue
        break
    if not progressed:
      raise DeadlockError(_find_cycle(schedule, orders, pos, end))
  return start, end


def _find_cycle(schedule: Schedule, orders, pos, end) -> list[WaitEdge]:
  """The wait-for cycle among blocked meshes (each waits on one unit)."""
  waits: dict[int, WaitEdge] = {}
  for k, order in enumerate(orders):
    if pos[k] >= len(order):
      continue
    u = order[pos[k]]
    for d in schedule.dependencies(u):
      if d not in end:
        waits[k] = WaitEdge(k, u, d, schedule.mesh_of(d.stage))
        break
  for k, e in waits.items():
    if e.awaited_mesh == k:
      return [e]
    if e.awaited_mesh not in waits:  # only possible without validation
      raise ScheduleError(f"{e.blocked} on mesh {k} needs {e.awaited}, which "
                          f"mesh {e.awaited_mesh} never runs")
  # Every blocked mesh waits on a unit of another blocked mesh (the awaited
  # unit has not run, so its mesh is stuck before it): follow the edges.
  k = next(iter(waits))
  path: list[int] = []
  while k not in path:
    path.append(k)
    k = waits[k].awaited_mesh
  return [waits[m] for m in path[path.index(k):]]
