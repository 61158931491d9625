"""Values of a multi-process run: `RemoteArray` placeholders for outputs on
meshes of other processes, and `gather`, which brings values to every process."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from mpmd.distributed.initialize import is_multiprocess
from mpmd.errors import DistributedError

__all__ = ["RemoteArray", "gather"]


class RemoteArray:
  """Stands for an output that lives on a mesh of other processes.

  It has the output's `shape`, `dtype`, `mesh` name and owning `processes`;
  passing it back as an argument of the same program (e.g. the parameters of
  the next step) is fine, since this process does not run that mesh. Its
  data is not here: `mpmd.distributed.gather(x)`, called by every process,
  returns it as a NumPy array everywhere.
  """

  __slots__ = ("shape", "dtype", "mesh", "processes")

  def __init__(self, shape: tuple[int, ...], dtype: Any, mesh: str, processes: tuple[int, ...]):
    self.shape = tuple(shape)
    self.dtype = np.dtype(dtype)
    self.mesh = mesh
    self.processes = tuple(processes)

  @property
  def ndim(self) -> int:
    return len(self.shape)

  @property
  def size(self) -> int:
    return int(np.prod(self.shape, dtype=np.int64))

  def _where(self) -> str:
    owners = ", ".join(str(p) for p in self.processes)
    return (f"this {self.dtype}{list(self.shape)} value lives on mesh {self.mesh!r}, owned by "
            f"process {owners}, not by process {jax.process_index()}")

  def __array__(self, dtype=None, copy=None):
    raise DistributedError(f"{self._where()}: call mpmd.distributed.gather(value) on every "
                           "process to get its data everywhere")

  def __repr__(self) -> str:
    return (f"RemoteArray({self.dtype}{list(self.shape)}, mesh={self.mesh!r}, "
            f"processes={list(self.processes)})")


def _owners_of(x: Any) -> tuple[int, ...] | None:
  """The processes holding `x`'s data, or None when every process has it."""
  if isinstance(x, RemoteArray):
    return x.processes
  if isinstance(x, jax.Array):
    return tuple(sorted({d.process_index for d in x.sharding.device_set}))
  return None


def gather(tree: Any) -> Any:
  """Every leaf of `tree` as a NumPy array on every process.

  A collective: every process calls it with a tree of the same structure
  (what the same program returned there: `jax.Array`\\ s where it holds the
  value, `RemoteArray`\\ s where it does not). Leaves owned by one process are
  broadcast from it; leaves whose mesh spans processes are all-gathered;
  NumPy arrays and Python numbers are returned as they are. A `jax.Array`
  that is not an mpmd output but lives on this process's devices (each
  process with its own) counts as owned by this process alone, so the
  processes would disagree on who broadcasts it: pass such values as NumPy.
  In a single-process run this is `jax.device_get`.
  """
  leaves, treedef = jax.tree.flatten(tree)
  if not is_multiprocess():
    return jax.tree.unflatten(treedef, [np.asarray(jax.device_get(x)) for x in leaves])
  from jax.experimental import multihost_utils  # public; imports lazily
  me = jax.process_index()
  out: list[Any] = [None] * len(leaves)
  by_owner: dict[int, list[int]] = {}
  for i, x in enumerate(leaves):
    owners = _owners_of(x)
    if owners is None:
      out[i] = np.asarray(x)
    elif len(owners) == 1:
      by_owner.setdefault(owners[0], []).append(i)
    else:  # a mesh spanning processes: its (global) array is here too
      out[i] = np.asarray(multihost_utils.process_allgather(x, tiled=True))
  for owner in sorted(by_owner):
    indices = by_owner[owner]
    source = me == owner
    host = []
    for i in indices:
      x = leaves[i]
      value = np.asarray(x) if source else np.zeros(x.shape, x.dtype)
      host.append(value.astype(np.uint8) if value.dtype == np.bool_ else value)
    got = multihost_utils.broadcast_one_to_all(host, is_source=source)
    for i, value in zip(indices, got):
      value = np.asarray(value)
      out[i] = value.astype(np.bool_) if leaves[i].dtype == np.bool_ else value
  return jax.tree.unflatten(treedef, out)
