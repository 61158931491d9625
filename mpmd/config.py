"""`make_config`: topology, name-to-mesh assignment and options of a program.

A *topology* maps mesh names to `jax.sharding.Mesh`es over disjoint devices.
Every `named_computation` / `named_tensor` name used by the program is
assigned to one mesh (optionally with a stage id for circular schedules).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Hashable, Mapping
from typing import Any

import jax
from jax.sharding import Mesh

from mpmd import options as options_table
from mpmd.errors import ConfigError

Topology = Mapping[str, Mesh]
NameToMeshAssignment = Mapping[str, str]
NameToStageAssignment = Mapping[str, int]
PartitioningOptions = Mapping[str, Any]

_MESH_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]*$")

#: The memory kinds a name, input or output can be assigned to, after the
#: mesh: `"m1#pinned_host"` (host memory of m1's devices), `"m1#device"` (the
#: default). Shardy:MPMD spells them the same way. Defined once, in C++
#: (include/mpmd/Dialect/MemoryKinds.h), and read from the extension.
MEMORY_KINDS: tuple[str, ...] = options_table.MEMORY_KINDS


def split_memory_kind(target: str) -> tuple[str, str | None]:
  """`"m1#pinned_host"` -> `("m1", "pinned_host")`; `"m1"` -> `("m1", None)`."""
  mesh, sep, kind = target.partition("#")
  return mesh, (kind if sep else None)

# The options the partitioner understands, their defaults and documentation:
# one table (include/mpmd/Pipeline.h), read through `mpmd.options`.
KNOWN_PARTITIONING_OPTIONS = options_table.KNOWN_PARTITIONING_OPTIONS


@dataclasses.dataclass(frozen=True)
class FragmentMergeRule:
  """Scheduling units of one mesh to run as a single program.

  `FragmentMergeRule("m3", ["F0", "B0"])` merges the forward and backward of
  microbatch 0 on mesh m3 (units as in `mpmd.schedule`: `F3`, `B3`, `W3`,
  `F3.s5` for stage 5). Applied after scheduling, in program order.
  """
  mesh: str
  units: tuple[str, ...]

  def __init__(self, mesh: str, units):
    object.__setattr__(self, "mesh", mesh)
    # Units may be given as tokens or as `mpmd.schedule.Unit`s.
    object.__setattr__(self, "units", tuple(u if isinstance(u, str) else str(u) for u in units))

  def to_text(self) -> str:
    """The rule as a line of `mpmd-opt`'s `merge-rules`: `m3: F0 B0`."""
    from mpmd.schedule.core import format_line  # noqa: PLC0415 (the schedule library)
    return format_line(self.mesh, self.units)

  def parsed_units(self) -> list[tuple[str, int, int | None]]:
    """(kind, microbatch, stage or None) per unit. Raises `ScheduleError`."""
    from mpmd.schedule.core import split_token  # noqa: PLC0415 (the schedule library)
    return [split_token(u) for u in self.units]


@dataclasses.dataclass(frozen=True)
class MpmdConfig:
  """Everything `mpmd.jit` needs besides the function. Build with `make_config`."""

  topology: Mapping[str, Mesh]
  name_to_mesh_assignment: Mapping[str, str]
  name_to_stage_assignment: Mapping[str, int] | None = None
  input_mesh_assignment: Any = ()
  output_mesh_assignment: Any = ()
  partitioning_options: Mapping[str, Any] | None = None
  pipeline_schedule: Any = None
  read_input_mesh_from_arguments: bool = False
  fragment_merge_rules: tuple[FragmentMergeRule, ...] = ()
  shared_devices: bool = False

  def mesh_of_devices(self, devices) -> str | None:
    """The name of the mesh whose devices are exactly `devices`, if exactly
    one mesh has them (meshes that share devices, `shared_devices`, do not
    tell an array's mesh by its devices)."""
    devices = set(devices)
    names = [name for name, mesh in self.topology.items() if set(mesh.devices.flat) == devices]
    return names[0] if len(names) == 1 else None

  @property
  def mesh_names(self) -> tuple[str, ...]:
    """Mesh names in topology order (the order schedules index meshes by)."""
    return tuple(self.topology)

  @property
  def sharding_mesh(self) -> Mesh:
    """The first mesh (its devices' platform is the program's)."""
    return next(iter(self.topology.values()))

  def option(self, name: str) -> Any:
    """The value of partitioning option `name`: as set, else its default
    (`mpmd.options`; e.g. True for `mpmd_merge_forward_with_backward`: a
    forward and the backward that runs right after it on its mesh are one
    program)."""
    return (self.partitioning_options or {}).get(name, options_table.default(name))

  def cache_key(self) -> Hashable:
    """A hashable value, equal for equivalent configurations.

    `mpmd.jit` wrappers of the same function whose configs have equal keys
    share compiled programs. Built from the topology (mesh names in order,
    each mesh's axis names, axis types, shape and devices), the assignments,
    the input/output mesh assignments (flattened leaves and treedef), the
    partitioning options, the fragment merge rules,
    `read_input_mesh_from_arguments` and the pipeline schedule (a string by
    value; any other object by identity, `id()`). A part that cannot be
    hashed is also taken by identity. A key taken by identity is only
    meaningful while the object lives: keep the config (which references
    it) alongside the key.
    """
    topology = tuple((name, tuple(mesh.axis_names), tuple(mesh.devices.shape),
                      tuple(str(t) for t in getattr(mesh, "axis_types", None) or ()),
                      tuple((d.platform, d.id) for d in mesh.devices.flat))
                     for name, mesh in self.topology.items())
    schedule = self.pipeline_schedule
    schedule_key = (("value", schedule) if schedule is None or isinstance(schedule, str)
                    else _by_identity(schedule))
    return (
        "MpmdConfig",
        topology,
        _hashed(self.name_to_mesh_assignment,
                lambda a: frozenset(a.items())),
        _hashed(self.name_to_stage_assignment,
                lambda a: None if a is None else frozenset(a.items())),
        _hashed(self.input_mesh_assignment, _tree_key),
        _hashed(self.output_mesh_assignment, _tree_key),
        _hashed(self.partitioning_options,
                lambda o: None if o is None else frozenset(o.items())),
        _hashed(self.fragment_merge_rules, tuple),
        bool(self.read_input_mesh_from_arguments),
        schedule_key,
    )


def _by_identity(obj: Any) -> tuple:
  return ("id", id(obj))


def _tree_key(tree: Any) -> tuple:
  leaves, treedef = jax.tree_util.tree_flatten(tree)
  return (tuple(leaves), treedef)


def _hashed(obj: Any, to_key) -> tuple:
  """("value", to_key(obj)) when that is hashable, else `obj`'s identity."""
  try:
    key = to_key(obj)
    hash(key)
  except (TypeError, ValueError, AttributeError):
    return _by_identity(obj)
  return ("value", key)



def _check_topology(topology: Any, shared_devices: bool = False) -> dict[str, Mesh]:
  if not isinstance(topology, Mapping) or not topology:
    raise ConfigError("topology must be a non-empty dict from mesh name to jax.sharding.Mesh, "
                      f"got {topology!r}")
  seen_devices: dict[int, str] = {}
  for name, mesh in topology.items():
    if not isinstance(name, str) or not _MESH_NAME.match(name):
      raise ConfigError(f"mesh name {name!r} is invalid: use letters, digits, '_', '.' or '-', "
                        "starting with a letter or '_'")
    if not isinstance(mesh, Mesh):
      raise ConfigError(f"topology[{name!r}] must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    if len(set(mesh.devices.flat)) != mesh.devices.size:
      raise ConfigError(f"mesh {name!r} lists a device twice: {mesh.devices.tolist()}")
    for d in mesh.devices.flat:
      if d.id in seen_devices and not shared_devices:
        raise ConfigError(f"device {d} is in both mesh {seen_devices[d.id]!r} and mesh {name!r}: "
                          "meshes of a topology must use disjoint devices (to run several "
                          "meshes on the same devices, one after another, e.g. to try a "
                          "pipeline on one GPU, pass make_config(..., shared_devices=True))")
      seen_devices[d.id] = name
  return dict(topology)


def _unknown_mesh(what: str, mesh: Any, topology: Mapping[str, Mesh]) -> ConfigError:
  return ConfigError(f"{what} is assigned to mesh {mesh!r}, which is not in the topology "
                     f"(meshes: {', '.join(topology)})")


def _check_target(what: str, target: Any, topology: Mapping[str, Mesh]) -> None:
  """Checks a mesh name, or `mesh#memory_kind`, that `what` is assigned to."""
  if not isinstance(target, str):
    raise _unknown_mesh(what, target, topology)
  mesh, kind = split_memory_kind(target)
  if mesh not in topology:
    raise _unknown_mesh(what, mesh, topology)
  if kind is not None and kind not in MEMORY_KINDS:
    raise ConfigError(f"{what} is assigned to memory kind {kind!r} of mesh {mesh!r}: use one of "
                      f"{', '.join(MEMORY_KINDS)} (e.g. {mesh + '#pinned_host'!r} for host "
                      "memory)")


def _check_io_assignment(what: str, tree: Any, topology: Mapping[str, Mesh]) -> None:
  for leaf in jax.tree.leaves(tree):
    if not isinstance(leaf, str):
      raise ConfigError(f"{what} must be a pytree prefix of mesh names, got leaf {leaf!r}")
    _check_target(f"a {what} entry", leaf, topology)


def make_config(topology: Topology,
                name_to_mesh_assignment: NameToMeshAssignment,
                *,
                name_to_stage_assignment: NameToStageAssignment | None = None,
                input_mesh_assignment: Any = (),
                output_mesh_assignment: Any = (),
                partitioning_options: PartitioningOptions | None = None,
                pipeline_schedule: Any = None,
                read_input_mesh_from_arguments: bool = False,
                fragment_merge_rules=(),
                shared_devices: bool = False) -> MpmdConfig:
  """Validates and bundles the configuration of an MPMD program.

  Args:
    topology: mesh name -> `jax.sharding.Mesh`. Meshes use disjoint devices
      (unless `shared_devices`); they may differ in shape (number of devices,
      axis names and sizes). Their order is the mesh order.
    name_to_mesh_assignment: name of each `named_computation` /
      `named_tensor` -> mesh name. A named tensor may be put in another
      memory of its mesh's devices: `"m1#pinned_host"` keeps it in host
      memory (`"m1#device"`: device memory, the default); see `MEMORY_KINDS`.
    name_to_stage_assignment: optional name -> stage id (>= 0).
    input_mesh_assignment: optional pytree prefix of the function's
      positional arguments whose leaves are mesh names (or None to infer),
      optionally with a memory kind (`"m1#pinned_host"`: the argument is
      taken in host memory).
    output_mesh_assignment: same for the outputs (`"m1#pinned_host"`: the
      output is returned in host memory).
    partitioning_options: compiler options, a dict of the names in
      `KNOWN_PARTITIONING_OPTIONS` (documented in `mpmd.options.FLAGS` and
      docs/api.md).
    pipeline_schedule: the pipeline schedule (see docs/schedules.md).
    fragment_merge_rules: `FragmentMergeRule`s: units of a mesh to fuse into
      one program (after scheduling).
    read_input_mesh_from_arguments: an argument that is a `jax.Array` on
      exactly the devices of one mesh is an input of that mesh (unless
      `input_mesh_assignment` says otherwise), e.g. parameters placed by a
      previous step. Off: inputs go where they are used.
    shared_devices: let meshes share devices (all meshes on one GPU, say).
      Their programs then run one after another on those devices: the
      pipeline is right but gains no speed; a transfer between two such
      meshes is a copy on the device. For trying a pipeline on fewer
      devices than it will run on; an argument's devices then do not tell
      its mesh (`read_input_mesh_from_arguments`).

  Raises:
    ConfigError: naming the offending mesh, name or option.
  """
  topology = _check_topology(topology, bool(shared_devices))
  if not isinstance(name_to_mesh_assignment, Mapping):
    raise ConfigError("name_to_mesh_assignment must be a dict from name to mesh name")
  for name, mesh in name_to_mesh_assignment.items():
    if not isinstance(name, str) or not name or "@" in name or "," in name:
      raise ConfigError(f"name {name!r} in name_to_mesh_assignment is invalid: use a non-empty "
                        "string without '@' or ','")
    _check_target(f"name {name!r}", mesh, topology)
  stages = dict(name_to_stage_assignment or {})
  for name, stage in stages.items():
    if name not in name_to_mesh_assignment:
      raise ConfigError(f"name {name!r} has a stage in name_to_stage_assignment but no mesh in "
                        "name_to_mesh_assignment")
    if not isinstance(stage, int) or isinstance(stage, bool) or stage < 0:
      raise ConfigError(f"stage of {name!r} must be an int >= 0, got {stage!r}")
  _check_io_assignment("input_mesh_assignment", input_mesh_assignment, topology)
  _check_io_assignment("output_mesh_assignment", output_mesh_assignment, topology)
  options = dict(partitioning_options or {})
  for key, value in options.items():
    if key not in KNOWN_PARTITIONING_OPTIONS:
      known = ", ".join(sorted(KNOWN_PARTITIONING_OPTIONS)) or "none yet"
      raise ConfigError(f"unknown partitioning option {key!r} (known options: {known})")
    if not isinstance(value, KNOWN_PARTITIONING_OPTIONS[key]):
      raise ConfigError(f"partitioning option {key!r} must be a "
                        f"{KNOWN_PARTITIONING_OPTIONS[key].__name__}, got {value!r}")
  if options.get("mpmd_merge_remat_fragments") and not options.get("mpmd_fragment_remat"):
    raise ConfigError("partitioning option 'mpmd_merge_remat_fragments' merges the forwards "
                      "that 'mpmd_fragment_remat' recomputes, and does nothing without it: set "
                      "'mpmd_fragment_remat': True as well")
  from mpmd.schedule.core import ScheduleError  # noqa: PLC0415 (the schedule library)
  rules = tuple(fragment_merge_rules)
  for rule in rules:
    if not isinstance(rule, FragmentMergeRule):
      raise ConfigError(f"fragment_merge_rules must hold FragmentMergeRule objects, got {rule!r}")
    if rule.mesh not in topology:
      raise _unknown_mesh("a fragment merge rule", rule.mesh, topology)
    try:
      rule.parsed_units()
      bad = False
    except ScheduleError:
      bad = True
    if bad or len(rule.units) < 2:
      raise ConfigError(f"fragment merge rule {rule.to_text()!r} must name at least two units "
                        "like F0, B3 or W2.s5")
  from mpmd.schedule import resolve  # noqa: PLC0415 (imports the schedule library)
  resolve.check_spec(pipeline_schedule)
  return MpmdConfig(topology=topology,
                    name_to_mesh_assignment=dict(name_to_mesh_assignment),
                    name_to_stage_assignment=stages or None,
                    input_mesh_assignment=input_mesh_assignment,
                    output_mesh_assignment=output_mesh_assignment,
                    partitioning_options=options or None,
                    pipeline_schedule=pipeline_schedule,
                    read_input_mesh_from_arguments=bool(read_input_mesh_from_arguments),
                    fragment_merge_rules=rules,
                    shared_devices=bool(shared_devices))
