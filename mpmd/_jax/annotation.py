"""Annotating a fragment program for the compiler: the sharding and donation
marks of ``@main``'s arguments and results, as ``jax.jit`` writes them.

The JAX internals used here:

* ``jax._src.config.use_shardy_partitioner`` -- which sharding annotation kind
  (``sdy.sharding`` or ``mhlo.sharding``) the compiler expects.
* ``Sharding._to_sdy_sharding`` / ``Sharding._to_xla_hlo_sharding`` -- the
  annotation for a sharding, exactly as ``jax.jit`` writes it.
* ``Sharding._device_assignment`` -- the device order a sharding refers to.
* (public) ``jax.extend.mlir.passmanager`` -- the ``sdy-lift-inlined-meshes``
  pass, as jax's own lowering runs it, and Shardy's propagation
  (``sdy-propagation-pipeline``), as XLA runs it when it compiles.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import re

import jax
from jax.extend.mlir import passmanager as _passmanager
from jax._src import config as _config
from jax._src.lib.mlir import ir

from mpmd._jax.parsing import find_main

__all__ = ["annotate_module", "annotate_results", "device_assignment", "parse_tensor_sharding",
           "propagated", "propagated_result_shardings", "uses_shardy"]

# Argument attributes that carry a sharding or a donation mark; annotate_module
# owns them (the caller's in_shardings / donated_args are the source of truth).
_SHARDING_ATTRS = ("sdy.sharding", "mhlo.sharding")
_DONATION_ATTRS = ("jax.buffer_donor", "tf.aliasing_output")


def _sharding_attr(s: jax.sharding.Sharding, ndim: int, use_shardy: bool) -> tuple[str, Any]:
  """The (name, attribute) JAX writes to annotate a value with sharding ``s``."""
  if use_shardy:
    return "sdy.sharding", s._to_sdy_sharding(ndim).build({})
  return "mhlo.sharding", ir.StringAttr.get(str(s._to_xla_hlo_sharding(ndim)))


def annotate_module(module: Any, *, name: str,
                    in_shardings: Sequence[jax.sharding.Sharding],
                    in_avals: Sequence[jax.core.ShapedArray],
                    donated: Sequence[bool], num_devices: int,
                    out_shardings: Sequence[jax.sharding.Sharding | None] = (),
                    out_avals: Sequence[jax.core.ShapedArray] = (),
                    unaliased: Collection[int] = ()) -> None:
  """Prepares ``module`` in place for compilation on ``num_devices`` devices.

  * ``@main``'s arguments get the sharding annotation JAX itself would write
    for ``in_shardings`` (``sdy.sharding`` with an ``sdy.mesh`` under Shardy,
    else ``mhlo.sharding``), replacing any annotation already there;
  * donated arguments get ``jax.buffer_donor`` unless they already name the
    result whose buffer they become (``tf.aliasing_output``, kept, except for
    the arguments in ``unaliased``); donation marks on the other arguments
    are removed (``donated`` is the source of truth);
  * ``mhlo.num_partitions`` / ``mhlo.num_replicas`` are set to match;
  * an unnamed module is named ``name``.
  * results with a sharding in ``out_shardings`` get its annotation (the
    others are left alone: `annotate_results` sets them once decided).
  """
  main = find_main(module)
  use_shardy = uses_shardy()
  with module.context, ir.Location.unknown():
    old = (ir.ArrayAttr(main.attributes["arg_attrs"])
           if "arg_attrs" in main.attributes else None)
    new_attrs = []
    for i, (s, aval, d) in enumerate(zip(in_shardings, in_avals, donated)):
      attrs = {}
      if old is not None:
        for named in ir.DictAttr(old[i]):
          if named.name not in _SHARDING_ATTRS + _DONATION_ATTRS or (
              d and named.name == "tf.aliasing_output" and i not in unaliased):
            attrs[named.name] = named.attr
      key, value = _sharding_attr(s, aval.ndim, use_shardy)
      attrs[key] = value
      if d and "tf.aliasing_output" not in attrs:  # else it names the result it becomes
        attrs["jax.buffer_donor"] = ir.BoolAttr.get(True)
      new_attrs.append(ir.DictAttr.get(attrs))
    main.attributes["arg_attrs"] = ir.ArrayAttr.get(new_attrs)
    _set_result_shardings(main, out_shardings, out_avals, use_shardy)
    mod_attrs = module.operation.attributes
    i32 = ir.IntegerType.get_signless(32)
    mod_attrs["mhlo.num_partitions"] = ir.IntegerAttr.get(i32, num_devices)
    mod_attrs["mhlo.num_replicas"] = ir.IntegerAttr.get(i32, 1)
    if "sym_name" not in mod_attrs:
      mod_attrs["sym_name"] = ir.StringAttr.get(name)
    if use_shardy:
      # The inline meshes of the shardings become `sdy.mesh` symbols, as in
      # jax's own lowering.
      _passmanager.PassManager.parse(
          "builtin.module(sdy-lift-inlined-meshes)").run(module.operation)


def _set_result_shardings(main: Any, out_shardings: Sequence[jax.sharding.Sharding | None],
                          out_avals: Sequence[jax.core.ShapedArray], use_shardy: bool) -> None:
  """Gives the results of ``@main`` with a sharding in ``out_shardings`` its
  annotation (in the module's context); the others keep theirs."""
  if not any(o is not None for o in out_shardings):
    return
  old_res = ir.ArrayAttr(main.attributes["res_attrs"]) if "res_attrs" in main.attributes else None
  new_res = []
  for i, (o, aval) in enumerate(zip(out_shardings, out_avals)):
    attrs = {named.name: named.attr for named in ir.DictAttr(old_res[i])} if old_res else {}
    if o is not None:
      for k in _SHARDING_ATTRS:
        attrs.pop(k, None)
      key, value = _sharding_attr(o, aval.ndim, use_shardy)
      attrs[key] = value
    new_res.append(ir.DictAttr.get(attrs))
  main.attributes["res_attrs"] = ir.ArrayAttr.get(new_res)


def annotate_results(module: Any, out_shardings: Sequence[jax.sharding.Sharding | None],
                     out_avals: Sequence[jax.core.ShapedArray]) -> None:
  """Gives the results of ``@main`` of an annotated module (see
  `annotate_module`) the shardings in ``out_shardings`` (None: left as they
  are)."""
  use_shardy = uses_shardy()
  with module.context, ir.Location.unknown():
    _set_result_shardings(find_main(module), out_shardings, out_avals, use_shardy)
    if use_shardy:
      _passmanager.PassManager.parse(
          "builtin.module(sdy-lift-inlined-meshes)").run(module.operation)


def uses_shardy() -> bool:
  """Whether JAX annotates for Shardy (``sdy.sharding``) rather than GSPMD."""
  return bool(_config.use_shardy_partitioner.value)


#: One axis of an sdy dimension sharding (`"x"`, or a sub-axis `"x":(1)2`).
_AXIS = re.compile(r'"([^"]+)"(:\(\d+\)\d+)?')


def parse_tensor_sharding(text: str) -> tuple[tuple[tuple[str, ...] | None, ...],
                                              frozenset[str]] | None:
  """(per dimension the axes it is split over, in order; the unreduced axes)
  of one ``#sdy.sharding<@mesh, [{"x"}, {}], unreduced={"y"}>`` (or of one
  value's ``<@mesh, ...>`` in a ``#sdy.sharding_per_value``); a sub-axis
  keeps its suffix (``x:(1)2``: no mesh axis has that name, no
  ``PartitionSpec`` can say it); None for text of another form."""
  head = re.match(r"(?:#sdy\.sharding)?<(@[^,]+|mesh<[^>]*>),\s*\[", text)
  if head is None:
    return None
  start, end = head.end() - 1, text.index("]", head.end())
  dims = []
  for dim in re.findall(r"\{([^}]*)\}", text[start + 1:end]):
    dims.append(tuple(a + sub for a, sub in _AXIS.findall(dim)) or None)
  unreduced = re.search(r"unreduced=\{([^}]*)\}", text[end:])
  return tuple(dims), frozenset(re.findall(r'"([^"]+)"', unreduced.group(1)) if unreduced else ())


def propagated_result_shardings(module: Any) -> list[tuple[tuple[tuple[str, ...] | None, ...],
                                                           frozenset[str]] | None]:
  """What Shardy's propagation gives each result of ``@main`` of an annotated
  module (argument shardings set; ``module`` itself is not changed): per
  result (per dimension its mesh axes or None, the unreduced axes), as XLA's
  compile would choose it for a result left unspecified (a sub-axis named
  with its suffix, ``x:(1)2``); None for a result propagation leaves
  unsharded."""
  copy = propagated(module)
  with module.context, ir.Location.unknown():
    main = find_main(copy)
    n = len(ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value).results)
    res = ir.ArrayAttr(main.attributes["res_attrs"]) if "res_attrs" in main.attributes else None
    out = []
    for j in range(n):
      attrs = ir.DictAttr(res[j]) if res is not None else None
      if attrs is None or "sdy.sharding" not in attrs:
        out.append(None)
        continue
      out.append(parse_tensor_sharding(str(attrs["sdy.sharding"])))
  return out


def propagated(module: Any, text: str | None = None) -> Any:
  """A copy of ``module`` (or ``text`` parsed in its context) after Shardy's
  propagation (``sdy-propagation-pipeline``); ``module`` is not changed."""
  with module.context:
    copy = module.operation.clone() if text is None else ir.Module.parse(text)
    _passmanager.PassManager.parse("builtin.module(sdy-propagation-pipeline)").run(copy.operation)
  return copy


def device_assignment(sharding: jax.sharding.Sharding) -> tuple:
  """The ordered devices a sharding's tile assignment refers to (its
  ``_device_assignment``); must equal the compile device list for the
  sharding annotation to mean what it says."""
  return tuple(sharding._device_assignment)
