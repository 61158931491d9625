"""Labelling the layers of a model you cannot edit.

`label_layers(Block, names)` is a context manager: while it is open, every
call of an instance of `Block` (a flax linen or nnx module, an equinox module,
or any class whose instances are called) runs as `mpmd.named_computation`
under the next name of `names`. The model's source is not touched:

- flax linen modules are intercepted with `flax.linen.intercept_methods`;
- any other class has its method replaced on the class while the context is
  open (and restored after); a flax nnx module's state (parameters, RNG
  counts, batch statistics) enters the named computation as arguments and
  its updates come back out, as `nnx.jit` does it.

Enter it inside the function that `mpmd.jit` traces (the loss), so that each
trace numbers the layers from 0::

    def loss_fn(params, x, y):
      with mpmd.label_layers(FlaxGPT2Block, mpmd.stage_names(12, 4)):
        logits = model.apply(params, x)
      ...
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np

from mpmd.trace.ops import named_computation

Names = Sequence[str] | Callable[[int, Any], str]


def stage_names(num_layers: int, num_stages: int, prefix: str = "stage") -> list[str]:
  """One name per layer, `num_layers` consecutive layers cut into
  `num_stages` contiguous groups as even as they can be (earlier stages take
  the extra layers): e.g. `stage_names(5, 2) == ["stage0"] * 3 + ["stage1"] * 2`.

  Raises:
    ValueError: if `num_stages` is not between 1 and `num_layers`.
  """
  if not isinstance(num_layers, int) or not isinstance(num_stages, int) or not (
      1 <= num_stages <= num_layers):
    raise ValueError(f"stage_names needs 1 <= num_stages <= num_layers, got num_layers="
                     f"{num_layers!r}, num_stages={num_stages!r}")
  base, extra = divmod(num_layers, num_stages)
  names = []
  for stage in range(num_stages):
    names += [f"{prefix}{stage}"] * (base + (stage < extra))
  return names


def _is_array(x: Any) -> bool:
  return isinstance(x, (jax.Array, np.ndarray, np.generic))


def _call_labelled(name: str, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
  """`fn(*args, **kwargs)` as the named computation `name`: the array leaves of
  the arguments are its operands; every other leaf (flags, None, functions)
  is closed over."""
  leaves, tree = jax.tree_util.tree_flatten((args, kwargs))
  where = [i for i, leaf in enumerate(leaves) if _is_array(leaf)]

  def body(arrays):
    full = list(leaves)
    for i, a in zip(where, arrays):
      full[i] = a
    a, k = jax.tree_util.tree_unflatten(tree, full)
    return fn(*a, **k)

  return named_computation(body, name=name)([leaves[i] for i in where])


def _nnx_module_type() -> type | None:
  nnx = sys.modules.get("flax.nnx")
  return getattr(nnx, "Module", None) if nnx is not None else None


def _call_nnx_labelled(name: str, call: Callable[..., Any], module: Any, args: tuple,
                       kwargs: dict) -> Any:
  """An nnx module's call as a named computation: its state, and that of
  every nnx object among the arguments (an `nnx.Rngs` passed to the call),
  go in as operands and their updated state comes out (nothing traced
  inside leaks, and RNG counts advance as without the label)."""
  from flax import nnx  # noqa: PLC0415 (only for nnx modules)
  is_node = lambda x: isinstance(x, nnx.Pytree)  # noqa: E731
  leaves, tree = jax.tree_util.tree_flatten((args, kwargs), is_leaf=is_node)
  where = [i for i, leaf in enumerate(leaves) if is_node(leaf)]
  nodes = (module, *(leaves[i] for i in where))
  graphdef, state = nnx.split(nodes)

  def run(state, *rest_args):
    inner = nnx.merge(graphdef, state)
    full = list(leaves)
    for i, node in zip(where, inner[1:]):
      full[i] = node
    a, k = jax.tree_util.tree_unflatten(tree, full)
    # (the arrays among the arguments come in through `rest_args`)
    a, k = _with_arrays(a, k, rest_args)
    out = call(inner[0], *a, **k)
    return out, nnx.state(inner)

  arrays = _arrays_of(args, kwargs, is_node)
  out, new_state = _call_labelled(name, run, (state, *arrays), {})
  nnx.update(nodes, new_state)
  return out


def _arrays_of(args: tuple, kwargs: dict, skip: Callable[[Any], bool]) -> list:
  """The array leaves of `(args, kwargs)` outside the nodes `skip` picks."""
  leaves = jax.tree_util.tree_leaves((args, kwargs), is_leaf=skip)
  return [leaf for leaf in leaves if not skip(leaf) and _is_array(leaf)]


def _with_arrays(args: tuple, kwargs: dict, arrays: Sequence[Any]) -> tuple[tuple, dict]:
  """`(args, kwargs)` with their array leaves (outside nnx objects) replaced
  by `arrays`, in order."""
  from flax import nnx  # noqa: PLC0415
  is_node = lambda x: isinstance(x, nnx.Pytree)  # noqa: E731
  leaves, tree = jax.tree_util.tree_flatten((args, kwargs), is_leaf=is_node)
  it = iter(arrays)
  leaves = [leaf if is_node(leaf) or not _is_array(leaf) else next(it) for leaf in leaves]
  return jax.tree_util.tree_unflatten(tree, leaves)


class _Labeller:
  """The state of one open `label_layers` context."""

  def __init__(self, layer_types: tuple[type, ...], names: Names, method: str):
    self.layer_types = layer_types
    self.names = names
    self.method = method
    self.count = 0
    self.local = threading.local()

  def next_name(self, module: Any) -> str:
    index = self.count
    self.count += 1
    if callable(self.names):
      name = self.names(index, module)
    elif index < len(self.names):
      name = self.names[index]
    else:
      raise ValueError(
          f"label_layers: call #{index} of a {type(module).__name__}, but names has only "
          f"{len(self.names)} entries; give one name per layer call (mpmd.stage_names("
          f"num_layers, num_stages)), and open the context inside the traced function so "
          "that each trace numbers its layers from 0")
    if not isinstance(name, str):
      raise TypeError(f"label_layers: the name of call #{index} of a "
                      f"{type(module).__name__} is {name!r}, not a string")
    return name

  @contextlib.contextmanager
  def outermost(self) -> Iterator[bool]:
    """Whether this call is not inside another labelled call (a layer
    inside a labelled layer runs in its parent's named computation)."""
    depth = getattr(self.local, "depth", 0)
    self.local.depth = depth + 1
    try:
      yield depth == 0
    finally:
      self.local.depth = depth

  def wrap(self, original: Callable[..., Any], nnx_module: type | None) -> Callable[..., Any]:
    labeller = self

    def labelled(module, *args, **kwargs):
      with labeller.outermost() as outermost:
        if not outermost or not isinstance(module, labeller.layer_types):
          return original(module, *args, **kwargs)
        name = labeller.next_name(module)
        if nnx_module is not None and isinstance(module, nnx_module):
          return _call_nnx_labelled(name, original, module, args, kwargs)
        return _call_labelled(name, original, (module, *args), kwargs)

    labelled.__wrapped__ = original  # type: ignore[attr-defined]
    return labelled


def _is_linen(cls: type) -> bool:
  linen = sys.modules.get("flax.linen")
  return linen is not None and issubclass(cls, linen.Module)


@contextlib.contextmanager
def label_layers(layer_types: type | Sequence[type], names: Names, *,
                 method: str = "__call__") -> Iterator[None]:
  """Labels every call of the given layer classes while open, without
  touching the model's source.

  Args:
    layer_types: a class or classes whose instances are the layers: a flax
      linen `nn.Module` subclass, a flax nnx `nnx.Module` subclass, an
      equinox module, or any class whose `method` runs the layer.
    names: one named-computation name per layer call, in call order (e.g.
      `mpmd.stage_names(num_layers, num_stages)`), or a function
      `(index, module) -> name`. Map the names to meshes in `make_config`.
    method: the method that runs a layer.

  Each call becomes `mpmd.named_computation(..., name=...)`: the array
  arguments (and an equinox module's arrays, or an nnx module's state) are
  its operands; other arguments (flags, None) are closed over. A layer
  called inside a labelled layer runs in its parent's computation. Under
  plain `jax.jit` the labels are identities, so the same code is the
  reference.

  Raises:
    TypeError: if `layer_types` is not a class or tuple of classes, or a
      class has no such method.
    ValueError: when a call finds no name left in `names`.
  """
  types = tuple(layer_types) if isinstance(layer_types, (tuple, list)) else (layer_types,)
  if not types or not all(isinstance(t, type) for t in types):
    raise TypeError(f"label_layers needs a layer class or a tuple of classes, got "
                    f"{layer_types!r}")
  if not callable(names) and (isinstance(names, str) or not isinstance(names, Sequence)):
    raise TypeError(f"label_layers: names must be a sequence of names (one per layer call) or a "
                    f"function (index, module) -> name, got {names!r}")
  for t in types:
    if not callable(getattr(t, method, None)):
      raise TypeError(f"label_layers: {t.__name__} has no method {method!r}")
  labeller = _Labeller(types, names, method)
  with contextlib.ExitStack() as stack:
    linen = tuple(t for t in types if _is_linen(t))
    if linen:
      stack.enter_context(_intercept_linen(labeller, linen))
    nnx_module = _nnx_module_type()
    for t in types:
      if t in linen:
        continue
      original = t.__dict__.get(method)
      inherited = getattr(t, method)
      setattr(t, method, labeller.wrap(inherited, nnx_module))
      stack.callback(_restore, t, method, original)
    yield


def _restore(cls: type, method: str, original: Any) -> None:
  if original is None:
    delattr(cls, method)
  else:
    setattr(cls, method, original)


def _intercept_linen(labeller: _Labeller, types: tuple[type, ...]):
  """A `flax.linen.intercept_methods` context labelling `types`' calls."""
  from flax import linen as nn  # noqa: PLC0415 (only for linen models)

  def interceptor(next_fun, args, kwargs, context):
    module = context.module
    if context.method_name != labeller.method or not isinstance(module, types):
      return next_fun(*args, **kwargs)
    with labeller.outermost() as outermost:
      if not outermost:
        return next_fun(*args, **kwargs)
      return _call_labelled(labeller.next_name(module), next_fun, args, kwargs)

  return nn.intercept_methods(interceptor)
