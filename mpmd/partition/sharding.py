"""Shardings of a program's inputs and outputs inside their meshes.

The partitioner decides on which mesh each input and output lives; this
module decides how it is laid out on that mesh's devices:

* `in_shardings` / `out_shardings` given to `mpmd.jit` (pytree prefixes of
  `PartitionSpec`, `NamedSharding` or None, like `jax.jit`'s) win;
* otherwise an argument that is already a committed `jax.Array` on its mesh
  keeps its layout (so the outputs of one step feed the next without copies);
* otherwise it is replicated over its mesh.

`ArgumentPlacement` computes, per call and cheaply, the layout each argument
will be compiled for, which is part of the compilation cache key.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from mpmd._jax.annotation import device_assignment
from mpmd.config import MpmdConfig
from mpmd.errors import ConfigError, MpmdError

#: What a leaf of `in_shardings` / `out_shardings` may be.
ShardingLeaf = PartitionSpec | NamedSharding | None


def _is_sharding_leaf(x: Any) -> bool:
  return x is None or isinstance(x, (PartitionSpec, Sharding))


def broadcast_prefix(what: str, prefix: Any, tree: Any, num_leaves: int) -> list[Any]:
  """The leaf of pytree prefix `prefix` that covers each leaf of `tree`.

  `prefix` None means None for every leaf; a single `PartitionSpec` or
  `Sharding` applies to every leaf.
  """
  if prefix is None:
    return [None] * num_leaves
  if _is_sharding_leaf(prefix):
    return [prefix] * num_leaves
  flat: list[Any] = []
  try:
    jax.tree.map(lambda p, sub: flat.extend([p] * len(jax.tree.leaves(sub))), prefix, tree,
                 is_leaf=_is_sharding_leaf)
  except ValueError as e:
    if what.startswith("in"):
      count = len(tree) if isinstance(tree, (tuple, list)) else 1
      fix = ("give one sharding (PartitionSpec, NamedSharding or None) for all arguments, or "
             f"a tuple with one entry per positional argument ({count}), each a sharding or a "
             "pytree prefix of that argument")
    else:
      fix = ("give one sharding (PartitionSpec, NamedSharding or None) for all outputs, or a "
             "pytree prefix of the outputs (e.g. a tuple with one entry per returned value)")
    raise ConfigError(f"{what} is not a pytree prefix of the "
                      f"{'arguments' if what.startswith('in') else 'outputs'}: {fix}. "
                      f"JAX says: {e}") from e
  for leaf in flat:
    if not _is_sharding_leaf(leaf):
      raise ConfigError(f"{what} leaves must be PartitionSpec, NamedSharding or None, got "
                        f"{leaf!r}")
  return flat


def on_mesh(what: str, leaf: PartitionSpec | Sharding, mesh_name: str, mesh: Mesh) -> NamedSharding:
  """The sharding `leaf` asks for, on mesh `mesh_name`.

  A `PartitionSpec` is applied to the mesh; a `NamedSharding` must be on the
  mesh's devices (in order) and keeps its spec.
  """
  if isinstance(leaf, PartitionSpec):
    spec = leaf
  elif isinstance(leaf, NamedSharding):
    devices = tuple(leaf.mesh.devices.flat)
    if devices != tuple(mesh.devices.flat):
      raise MpmdError(
          f"{what} is a NamedSharding on devices {[d.id for d in devices]}, but the program "
          f"places this value on mesh {mesh_name!r} (devices "
          f"{[d.id for d in mesh.devices.flat]}): give a PartitionSpec (applied on whatever "
          f"mesh the value lands on) or a NamedSharding of that mesh")
    spec = leaf.spec
  else:
    raise MpmdError(f"{what} must be a PartitionSpec or a NamedSharding, got {leaf!r}")
  for entry in spec:
    for axis in (entry if isinstance(entry, (tuple, list)) else (entry,)):
      if isinstance(axis, str) and axis not in mesh.axis_names:
        raise ConfigError(
            f"{what}: {spec} does not fit mesh {mesh_name!r} with axes {dict(mesh.shape)}: it "
            f"names axis {axis!r}, which the mesh does not have: use the meshes' axis names "
            f"({', '.join(map(repr, mesh.axis_names))}) in the PartitionSpec")
  try:
    return NamedSharding(mesh, spec)
  except (ValueError, TypeError) as e:
    raise MpmdError(f"{what}: {spec} does not fit mesh {mesh_name!r} with axes "
                    f"{dict(mesh.shape)}: {e}") from e


def mesh_of_sharding_leaf(leaf: Any, config: MpmdConfig) -> str | None:
  """The topology mesh a `NamedSharding` leaf pins its value to (else None)."""
  if not isinstance(leaf, NamedSharding):
    return None
  name = config.mesh_of_devices(leaf.mesh.devices.flat)
  if name is None:
    meshes = ", ".join(f"{n}: {[d.id for d in m.devices.flat]}"
                       for n, m in config.topology.items())
    raise ConfigError(f"sharding {leaf} is on devices "
                      f"{sorted(d.id for d in leaf.mesh.devices.flat)}, which are not the devices "
                      f"of any mesh of the topology ({list(config.topology)}): give a "
                      "PartitionSpec (applied on the mesh the value lands on) or a "
                      f"NamedSharding over the devices of one mesh ({meshes})")
  return name


def check_fits(what: str, sharding: Sharding, shape: Sequence[int]) -> None:
  """Raises `ConfigError` when `sharding` (a `NamedSharding`) cannot lay out a
  value of `shape`: more spec entries than dimensions, or a dimension that
  its mesh axes do not divide."""
  if not isinstance(sharding, NamedSharding):
    return
  spec, sizes = sharding.spec, dict(sharding.mesh.shape)
  shape = tuple(shape)
  if len(spec) > len(shape):
    raise ConfigError(f"{what}: {spec} has {len(spec)} entries but the value has rank "
                      f"{len(shape)} (shape {shape}): give at most one entry per dimension")
  for d, (dim, axes) in enumerate(zip(shape, spec)):
    if axes is None:
      continue
    names = tuple(axes) if isinstance(axes, (tuple, list)) else (axes,)
    count = 1
    for name in names:
      count *= sizes.get(name, 1)
    if dim % count:
      raise ConfigError(f"{what}: dimension {d} of shape {shape} has size {dim}, which mesh "
                        f"axes {names} ({count} devices of {sizes}) do not divide: pick a "
                        "size that divides, or leave that dimension unsharded")


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


def _normalized_spec(spec: PartitionSpec) -> tuple:
  parts = list(spec)
  while parts and parts[-1] is None:
    parts.pop()
  return tuple(tuple(p) if isinstance(p, list) else p for p in parts)


class ArgumentPlacement:
  """Where each argument of a lowered program will be compiled to live.

  For argument `i` placed on mesh `meshes[i]` (None: unused), `key(i, x)`
  is a hashable description of the input sharding a program compiled for
  argument `x` would use, and `sharding(i, x)` that sharding. Results are
  memoized per sharding object, so a training loop that feeds outputs back
  pays a dict lookup per argument.
  """

  REPLICATED = ("replicated",)

  def __init__(self, meshes: Sequence[str | None], explicit: Sequence[NamedSharding | None],
               topology: Mapping[str, Mesh]):
    self.meshes = tuple(meshes)
    self.explicit = tuple(explicit)
    self.topology = topology
    self._mesh_devices = {name: tuple(m.devices.flat) for name, m in topology.items()}
    self._mesh_device_sets = {name: frozenset(d) for name, d in self._mesh_devices.items()}
    self._all_devices = frozenset(d for ds in self._mesh_devices.values() for d in ds)
    self._memo: dict[tuple[int, int], tuple[Sharding, str | None, tuple, Sharding | None]] = {}
    # In a multi-process run every process must compile for the same input
    # layouts, so a committed argument's own layout (which only its owner
    # sees) is not followed: it is laid out as `in_shardings` says.
    self.follow_committed = jax.process_count() == 1

  def _describe(self, s: Sharding, ndim: int) -> tuple[str | None, tuple, Sharding | None]:
    """(mesh it is on or None, layout key, the sharding to compile for)."""
    devices = s.device_set
    mesh_name = next((n for n, ds in self._mesh_device_sets.items() if ds == devices), None)
    if mesh_name is None:
      return None, (), None
    mesh = self.topology[mesh_name]
    if s.is_fully_replicated:
      return mesh_name, self.REPLICATED, replicated(mesh)
    if isinstance(s, NamedSharding) and tuple(s.mesh.devices.flat) == self._mesh_devices[mesh_name]:
      if s.mesh.axis_names == mesh.axis_names and s.mesh.devices.shape == mesh.devices.shape:
        return mesh_name, ("named", _normalized_spec(s.spec)), NamedSharding(mesh, s.spec)
    # Another kind of layout on the mesh's devices: recompiled for as is when
    # its device order is the mesh's; else the argument is replicated.
    try:
      order = device_assignment(s)
    except AttributeError:
      order = ()
    if order == self._mesh_devices[mesh_name]:
      return mesh_name, ("other", repr(s), ndim), s
    return mesh_name, self.REPLICATED, replicated(mesh)

  def _lookup(self, x: Any) -> tuple[str | None, tuple, Sharding | None]:
    s = x.sharding
    ndim = x.ndim
    hit = self._memo.get((id(s), ndim))
    if hit is not None and hit[0] is s:
      return hit[1], hit[2], hit[3]
    mesh_name, key, target = self._describe(s, ndim)
    if len(self._memo) > 4096:
      self._memo.clear()
    self._memo[(id(s), ndim)] = (s, mesh_name, key, target)
    return mesh_name, key, target

  def check_devices(self, x: Any, path: str) -> None:
    """Raises if committed array `x` is on devices the program does not use."""
    if isinstance(x, jax.Array) and x.committed:
      devices = x.sharding.device_set
      if not devices <= self._all_devices:
        outside = sorted(d.id for d in devices - self._all_devices)
        raise MpmdError(
            f"argument {path} is committed to devices {sorted(d.id for d in devices)}, and "
            f"{outside} are on no mesh of the program (meshes: "
            + ", ".join(f"{n}: {[d.id for d in ds]}" for n, ds in self._mesh_devices.items())
            + "): move it with jax.device_put, or pass it uncommitted")

  def key(self, i: int, x: Any) -> tuple:
    """The layout argument `x` at flat position `i` would be compiled for."""
    mesh_name = self.meshes[i]
    if mesh_name is None or self.explicit[i] is not None:
      return ()
    if self.follow_committed and isinstance(x, jax.Array) and x.committed:
      on, key, _ = self._lookup(x)
      if on == mesh_name:
        return key
    return self.REPLICATED

  def sharding(self, i: int, x: Any) -> Sharding | None:
    """The input sharding to compile argument `i` with (None: unused)."""
    mesh_name = self.meshes[i]
    if mesh_name is None:
      return None
    if self.explicit[i] is not None:
      return self.explicit[i]
    if self.follow_committed and isinstance(x, jax.Array) and x.committed:
      on, _, target = self._lookup(x)
      if on == mesh_name and target is not None:
        return target
    return replicated(self.topology[mesh_name])


def _index_key(index: tuple, shape: tuple[int, ...]) -> tuple:
  """A shard's index (a tuple of slices) in a form two equal ones share."""
  return tuple(sl.indices(dim) for sl, dim in zip(index, shape))


def reuse_shards(x: jax.Array, sharding: Sharding) -> jax.Array | None:
  """`x` laid out as `sharding` without copying anything, when each device of
  `sharding` already holds, among `x`'s shards, exactly the piece it needs
  (e.g. an array replicated over a mesh's `stage` axis, handed to a mesh of
  one stage); None otherwise (also when `sharding` is in another memory
  kind, host memory say: that takes a copy). The result shares `x`'s
  buffers."""
  if (x.sharding.memory_kind or "device") != (sharding.memory_kind or "device"):
    return None
  try:
    wanted = sharding.addressable_devices_indices_map(x.shape)
  except Exception:  # noqa: BLE001 -- a sharding that cannot lay out x: no shortcut
    return None
  held = {shard.device: shard for shard in x.addressable_shards}
  pieces = []
  for device, index in wanted.items():
    shard = held.get(device)
    if shard is None or _index_key(shard.index, x.shape) != _index_key(index, x.shape):
      return None
    pieces.append(shard.data)
  return jax.make_array_from_single_device_arrays(x.shape, sharding, pieces)


def host_side(x: jax.Array, sharding: Sharding) -> Any:
  """What to hand `jax.device_put` to lay `x` out as `sharding` on other
  devices: on CPU, `x`'s host view (a NumPy array: `device_put` then slices
  it on the host, where moving a device array between device sets compiles
  a resharding program per shape and layout); elsewhere (other platforms,
  arrays or layouts spanning other processes) `x` itself."""
  if (x.is_fully_addressable and sharding.is_fully_addressable and
      all(d.platform == "cpu" for d in (*x.sharding.device_set, *sharding.device_set))):
    return np.asarray(x)
  return x
