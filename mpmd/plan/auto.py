"""Automatic stages: an unlabelled step and a topology are enough.

`auto_stages(step, topology, *args)` finds the model's layers — the module
class called most often at the outermost level of the model while the step
is traced (a flax linen or nnx module, an equinox module, any class whose
instances are called) — labels every call of it as a unit (`layer0`,
`layer1`, ... with `mpmd.label_layers`), and lets the planner (`mpmd.plan`)
group consecutive layers into stages by their measured (or estimated) costs.
The result shows which layers went where with the predicted step time and
memory, runs with `mpmd.jit`, and saves as a dict to rebuild the same cut
later (`AutoStages.to_dict`, `auto_stages_from_dict`).

Code outside the layers (embeddings, final norm, loss, optimizer) is placed
by the compiler with the first or last layer, as for any unlabelled code;
the planner measures it there (`mpmd.plan(..., count_outside=True)`), so a
heavy head or embedding moves the cut.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.extend.core as jcore

from mpmd.config import MpmdConfig, make_config
from mpmd.trace.label import label_layers
from mpmd.trace.ops import named_computation_p
from mpmd.plan.errors import PlanError
from mpmd.plan.planner import Plan, config_from_dict, plan, split_batch

__all__ = ["AutoStages", "LayerCalls", "auto_stages", "auto_stages_from_dict", "find_layers"]

UNIT_PREFIX = "layer"


@dataclasses.dataclass(frozen=True)
class LayerCalls:
  """The layers found in a step.

  Attributes:
    layer_type: the class whose calls are the layers.
    calls: how many times a traced forward calls it (at its outermost level).
    descriptions: per call, the layer's name where the library gives one
      (a flax linen module's name, e.g. ``h_3``), else ``ClassName#k``.
    candidates: every class seen, with its outermost-call count and the mean
      nesting depth of its calls (lower: closer to the model's top).
  """
  layer_type: type
  calls: int
  descriptions: tuple[str, ...]
  candidates: tuple[tuple[str, int, float], ...]


def _code_of(cls: type, method: str) -> Any:
  fn = inspect.unwrap(getattr(cls, method, None) or (lambda: None))
  return getattr(fn, "__code__", None)


#: Packages whose own classes are never a model's layers (a flax or equinox
#: *module* class still is, wherever it is defined).
_LIBRARIES = ("jax", "jaxlib", "flax", "optax", "equinox", "numpy", "mpmd", "weakref",
              "functools", "contextlib", "threading", "builtins", "collections", "abc")


def _module_bases() -> tuple[type, ...]:
  bases = []
  for module, name in (("flax.linen", "Module"), ("flax.nnx", "Module"), ("equinox", "Module")):
    found = getattr(sys.modules.get(module), name, None)
    if isinstance(found, type):
      bases.append(found)
  return tuple(bases)


def _may_be_layer(cls: type, bases: tuple[type, ...]) -> bool:
  """A model component: a flax / equinox module class, or a class of the
  user's code (not of JAX, flax, optax, equinox or the standard library)."""
  if bases and issubclass(cls, bases):
    return True
  package = (cls.__module__ or "").split(".")[0]
  return package not in _LIBRARIES and package not in sys.stdlib_module_names


def _describe(module: Any, index: int) -> str:
  name = getattr(module, "name", None)
  if isinstance(name, str) and name:
    return f"{type(module).__name__} {name}"
  return f"{type(module).__name__}#{index}"


def find_layers(fun: Callable[..., Any], *args: Any, min_calls: int = 2,
                layer_types: type | Sequence[type] | None = None, method: str = "__call__",
                static_argnums: Sequence[int] = ()) -> LayerCalls:
  """Traces ``fun(*args)`` (nothing runs) and finds its layers: among the
  classes whose ``method`` runs at least ``min_calls`` times at its
  outermost level (a call inside a call of the same class is not counted),
  the one whose calls sit closest to the top of the model (then: the most
  calls). With ``layer_types``, counts the calls of those classes instead.

  Raises:
    PlanError: no class is called ``min_calls`` times (e.g. the layers run
      inside one `lax.scan` / `nn.scan` body, which cannot be cut).
  """
  given = (tuple(layer_types) if isinstance(layer_types, (tuple, list))
           else (layer_types,) if layer_types is not None else None)
  calls: dict[type, list[tuple[int, Any]]] = collections.defaultdict(list)
  codes: dict[type, Any] = {}
  open_frames: list[tuple[Any, type]] = []
  bases = _module_bases()
  eligible: dict[type, bool] = {}

  def profile(frame, event, arg):
    if event == "call" and frame.f_code.co_name == method:
      module = frame.f_locals.get("self")
      cls = type(module)
      ok = eligible.get(cls)
      if ok is None:
        ok = eligible[cls] = (isinstance(module, given) if given is not None
                              else _may_be_layer(cls, bases))
      if module is not None and ok:
        code = codes.get(cls)
        if code is None:
          code = codes[cls] = _code_of(cls, method)
        if code is frame.f_code:
          if all(c is not cls for _, c in open_frames):  # outermost call of its class
            calls[cls].append((len(open_frames), module))
          open_frames.append((frame, cls))
    elif event == "return" and open_frames and open_frames[-1][0] is frame:
      open_frames.pop()

  previous = sys.getprofile()
  sys.setprofile(profile)
  try:
    # (a new function each time: JAX's trace cache would skip the Python code)
    jax.make_jaxpr(lambda *a: fun(*a), static_argnums=tuple(static_argnums))(*args)
  finally:
    sys.setprofile(previous)
  table = sorted(((sum(d for d, _ in c) / len(c), -len(c), cls.__qualname__, cls)
                  for cls, c in calls.items()), key=lambda t: t[:3])
  candidates = tuple((f"{cls.__module__}.{cls.__qualname__}", -n, depth)
                     for depth, n, _, cls in table)
  for depth, n, _, cls in table:
    if -n >= min_calls:
      descriptions = tuple(_describe(m, k) for k, (_, m) in enumerate(calls[cls]))
      return LayerCalls(cls, -n, descriptions, candidates)
  seen = ", ".join(f"{name} x{n}" for name, n, _ in candidates) or "none"
  raise PlanError(
      f"no module class is called at least {min_calls} times in the step (classes seen: {seen}): "
      "automatic stages cut between calls of a repeated layer; a model that runs its layers "
      "inside one lax.scan / nn.scan body cannot be cut there (unroll it, or label its parts "
      "with mpmd.named_computation and use mpmd.plan)")


_CONTROL_FLOW = ("scan", "while", "cond")


def _control_flow_around_labels(jaxpr: Any, inside: str | None = None) -> str | None:
  """The control-flow primitive that a named computation of ``jaxpr`` runs
  inside, if any."""
  for eqn in jaxpr.eqns:
    if eqn.primitive is named_computation_p:
      if inside is not None:
        return inside
      continue
    here = inside or (eqn.primitive.name if eqn.primitive.name in _CONTROL_FLOW else None)
    for sub in jcore.jaxprs_in_params(eqn.params):
      found = _control_flow_around_labels(sub, here)
      if found is not None:
        return found
  return None


def _labelled(fun: Callable[..., Any], layer_type: type, num_layers: int,
              method: str) -> Callable[..., Any]:
  """``fun`` with every call of ``layer_type`` labelled ``layer{k}`` (``k``
  counted per forward: a microbatch loop tracing the model again starts at
  ``layer0`` again)."""

  def labelled(*args: Any, **kwargs: Any) -> Any:
    with label_layers(layer_type, lambda i, _: f"{UNIT_PREFIX}{i % num_layers}", method=method):
      return fun(*args, **kwargs)

  labelled.__name__ = getattr(fun, "__name__", "step")
  labelled.__qualname__ = getattr(fun, "__qualname__", labelled.__name__)
  labelled.__doc__ = getattr(fun, "__doc__", None)
  return labelled


@dataclasses.dataclass
class AutoStages:
  """Stages found for an unlabelled step.

  Attributes:
    step: the step with its layers labelled (``layer0`` ...): give it to
      `mpmd.jit` with ``config``.
    config: the planned `MpmdConfig`.
    plan: the planner's `Plan` (schedule, microbatches, candidates, costs).
    layers: the layers found (`LayerCalls`).
    method: the layer method that was labelled.
    scheduled: whether ``config`` has the plan's schedule (a step with a
      microbatch loop); else the stages run in the order JAX emitted.
  """
  step: Callable[..., Any]
  config: MpmdConfig
  plan: Plan
  layers: LayerCalls
  method: str = "__call__"
  scheduled: bool = True

  @property
  def units(self) -> tuple[str, ...]:
    return self.plan.units

  def stages(self) -> list[tuple[str, list[str]]]:
    """Per stage, its mesh and the layers it holds (by description)."""
    index = {u: k for k, u in enumerate(self.plan.units)}
    return [(mesh, [self.layers.descriptions[index[u]] for u in group])
            for group, mesh in zip(self.plan.groups, self.plan.stage_meshes)]

  def jit(self, **jit_kwargs: Any) -> Any:
    """`mpmd.jit(self.step, self.config, **jit_kwargs)`."""
    from mpmd.jit import jit  # noqa: PLC0415 (mpmd.jit imports the planner's package)
    return jit(self.step, self.config, **jit_kwargs)

  def summary(self) -> str:
    """Which layers went where, and the planner's prediction."""
    lines = [f"{self.layers.calls} layers ({self.layers.layer_type.__qualname__}) over "
             f"{len(set(self.plan.stage_meshes))} meshes:"]
    for mesh, layers in self.stages():
      first, last = layers[0], layers[-1]
      span = first if len(layers) == 1 else f"{first} .. {last}"
      lines.append(f"  {mesh}: {len(layers)} layer(s): {span}")
    before_f, before_b, after = self.plan.costs.outside_seconds
    if before_f or before_b or after:
      lines.append(f"outside the layers, per microbatch: {(before_f + before_b) * 1e3:.2f} ms "
                   f"counted with {self.plan.units[0]} (before it, and after its backward), "
                   f"{after * 1e3:.2f} ms with {self.plan.units[-1]} (after it: head, loss)")
    lines.append(self.plan.summary())
    return "\n".join(lines)

  def __str__(self) -> str:
    return self.summary()

  def to_dict(self) -> dict[str, Any]:
    """JSON-compatible: the plan (`Plan.to_dict`) and the layer class, to
    rebuild the same cut with `auto_stages_from_dict` without planning."""
    cls = self.layers.layer_type
    return {**self.plan.to_dict(), "schedule": self.plan.schedule.name if self.scheduled else None,
            "layer_type": f"{cls.__module__}:{cls.__qualname__}", "method": self.method,
            "num_layers": self.layers.calls, "layers": list(self.layers.descriptions),
            "partitioning_options": dict(self.config.partitioning_options or {})}


def _resolve(path: str) -> type:
  module, _, qualname = path.partition(":")
  try:
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
      obj = getattr(obj, part)
  except (ImportError, AttributeError) as e:
    raise PlanError(f"cannot import the layer class {path} ({e}): pass layer_type= (the "
                    "class whose calls are the layers)") from None
  if not isinstance(obj, type):
    raise PlanError(f"{path} is not a class: pass layer_type=")
  return obj


def auto_stages_from_dict(data: Mapping[str, Any], fun: Callable[..., Any],
                          topology: Mapping[str, jax.sharding.Mesh], *,
                          layer_type: type | None = None,
                          **make_config_kwargs: Any) -> tuple[Callable[..., Any], MpmdConfig]:
  """The labelled step and config of a cut saved with `AutoStages.to_dict`
  (nothing is traced or measured): ``mpmd.jit(*auto_stages_from_dict(...))``.

  Args:
    data: the saved dict.
    fun: the unlabelled step.
    topology: mesh name -> mesh, with the saved mesh names.
    layer_type: the layer class (default: imported from the saved
      ``module:qualname``).
  """
  cls = layer_type if layer_type is not None else _resolve(data["layer_type"])
  kwargs = {"partitioning_options": data.get("partitioning_options") or None} | make_config_kwargs
  config = config_from_dict(data, topology, **kwargs)
  return _labelled(fun, cls, int(data["num_layers"]), data.get("method", "__call__")), config


def auto_stages(fun: Callable[..., Any], topology: Mapping[str, jax.sharding.Mesh], *args: Any,
                layer_types: type | Sequence[type] | None = None, method: str = "__call__",
                microbatches: Sequence[int] | int | None = None,
                static_argnums: Sequence[int] = (), **plan_kwargs: Any) -> AutoStages:
  """Plans stages for an unlabelled training step over ``topology``.

  Finds the layers (`find_layers`: the module class called most often at the
  model's outermost level, or ``layer_types``), labels each call as a unit
  and plans with `mpmd.plan` (every keyword it takes is accepted: e.g.
  ``estimate="cost_analysis"`` to estimate instead of measuring,
  ``batch_argnums`` and several ``microbatches`` for a step with a
  microbatch loop, ``schedules``, ``memory_budget``).

  Args:
    fun: the training step (forward and backward of the model, update).
    topology: mesh name -> mesh, in pipeline order.
    *args: the step's arguments.
    layer_types: the layer class(es), instead of finding them.
    method: the method that runs a layer.
    microbatches: as for `mpmd.plan`; default 1 when no ``batch_argnums`` or
      ``args_for`` is given (the step as it is).
    static_argnums: static arguments of ``fun``.

  Returns:
    An `AutoStages`: ``.step`` and ``.config`` for `mpmd.jit` (or
    ``.jit()``), ``.summary()``, ``.to_dict()``.

  Raises:
    PlanError: no repeated layer, fewer layers than meshes, or the planner's
      errors.
  """
  if not topology:
    raise PlanError("the topology has no mesh")
  # One microbatch's step, so that each layer is called once per forward.
  if not args:
    probe = tuple(plan_kwargs["args_for"](1))
  elif plan_kwargs.get("batch_argnums") not in (None, ()):
    batch = plan_kwargs["batch_argnums"]
    probe = split_batch(args, (batch,) if isinstance(batch, int) else tuple(batch), 1)
  else:
    probe = args
  found = find_layers(fun, *probe, min_calls=max(2, len(topology)), layer_types=layer_types,
                      method=method, static_argnums=static_argnums)
  whole_batch = (microbatches is None and "batch_argnums" not in plan_kwargs
                 and "args_for" not in plan_kwargs)
  if whole_batch:
    # The step as it is, without a microbatch loop: stages run one after the
    # other (no schedule to choose; one stage per mesh).
    microbatches = 1
    # Every cut takes the same time then: keep the most even one by work
    # (the planner's min-max grouping, not refined by the simulated time).
    plan_kwargs = {"schedules": ["GPipe"], "virtual_stages": 1, "verify": 0,
                   "refine": 0} | plan_kwargs
  # The embedding, head and loss are not units: their measured work counts
  # with the first and last layer, whose meshes the compiler gives them.
  plan_kwargs = {"count_outside": True} | plan_kwargs
  labelled = _labelled(fun, found.layer_type, found.calls, method)
  loop = _control_flow_around_labels(
      jax.make_jaxpr(labelled, static_argnums=tuple(static_argnums))(*probe).jaxpr)
  if loop is not None:
    raise PlanError(
        f"the calls of {found.layer_type.__qualname__} run inside a {loop} body (e.g. nn.scan "
        "or lax.scan over the layers), which cannot be cut across meshes: unroll the layers, "
        "or label the model's parts with mpmd.named_computation and use mpmd.plan")
  units = [f"{UNIT_PREFIX}{k}" for k in range(found.calls)]
  result = plan(labelled, topology, *args, units=units, microbatches=microbatches,
                static_argnums=static_argnums, **plan_kwargs)
  config = result.config
  if whole_batch:
    config = make_config(topology, result.assignment,
                         partitioning_options=plan_kwargs.get("partitioning_options"))
  return AutoStages(step=labelled, config=config, plan=result, layers=found, method=method,
                    scheduled=not whole_batch)
