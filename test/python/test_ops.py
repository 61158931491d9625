"""Tests of the labelling primitives (mpmd.trace.ops) and their lowerings."""

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import re  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from mpmd._jax import lowering as ji  # noqa: E402
from mpmd.trace import tracing  # noqa: E402
from mpmd.trace import ops  # noqa: E402


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _mlp_loss(params, x, labelled=True):
  w0, w1 = params

  def stage0(w, x):
    return jnp.tanh(x @ w)

  def stage1(w, h):
    return jnp.mean((h @ w) ** 2)

  if labelled:
    stage0 = ops.named_computation(stage0, name="stage0")
    stage1 = ops.named_computation(name="stage1")(stage1)
  return stage1(w1, stage0(w0, x))


def _params_and_x():
  k0, k1, k2 = jax.random.split(jax.random.key(0), 3)
  params = (jax.random.normal(k0, (8, 16)), jax.random.normal(k1, (16, 4)))
  x = jax.random.normal(k2, (4, 8))
  return params, x


def _named_computations(closed_jaxpr):
  """(name, transpose_count) of every named_computation eqn, recursively."""
  found = []

  def visit(jaxpr):
    for eqn in jaxpr.eqns:
      if eqn.primitive is ops.named_computation_p:
        found.append((eqn.params["name"], eqn.params["transpose_count"]))
      for sub in _subjaxprs(eqn.params):
        visit(sub)

  visit(closed_jaxpr.jaxpr)
  return found


def _subjaxprs(params):
  for v in params.values():
    vs = v if isinstance(v, (tuple, list)) else (v,)
    for u in vs:
      if isinstance(u, jax.extend.core.ClosedJaxpr):
        yield u.jaxpr
      elif isinstance(u, jax.extend.core.Jaxpr):
        yield u


def _origins(text):
  return re.findall(r'"mpmd\.named_computation".*?origin = (#mpmd\.user_origin<[^>]*>)',
                    text)


def _tree_allclose(a, b, **kw):
  la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
  assert len(la) == len(lb)
  for u, v in zip(la, lb):
    np.testing.assert_allclose(np.asarray(u), np.asarray(v), **kw)


# ---------------------------------------------------------------------------
# named_computation: semantics and AD
# ---------------------------------------------------------------------------


def test_plain_jit_value_and_grad_matches_unlabelled():
  params, x = _params_and_x()
  got = jax.jit(jax.value_and_grad(_mlp_loss))(params, x)
  want = jax.jit(jax.value_and_grad(
      lambda p, x: _mlp_loss(p, x, labelled=False)))(params, x)
  _tree_allclose(got, want, rtol=1e-6, atol=1e-6)
  # Eager (no jit) evaluation runs the body too.
  _tree_allclose(jax.value_and_grad(_mlp_loss)(params, x), want,
                 rtol=1e-5, atol=1e-6)


def test_decorator_and_pytrees():
  @ops.named_computation(name="p")
  def f(d, y):
    return {"a": d["x"] + y, "b": (d["x"] * 2, y)}

  out = f({"x": jnp.ones(2)}, 3.0)
  np.testing.assert_allclose(out["a"], [4.0, 4.0])
  np.testing.assert_allclose(out["b"][0], [2.0, 2.0])
  assert isinstance(out["b"][1], jax.Array)
  assert f.__name__ == "f"
  out_jit = jax.jit(f)({"x": jnp.ones(2)}, 3.0)
  _tree_allclose(out, out_jit)


def test_make_jaxpr_grad_has_forward_and_backward_named_computations():
  params, x = _params_and_x()
  jaxpr = jax.make_jaxpr(jax.grad(_mlp_loss))(params, x)
  found = _named_computations(jaxpr)
  assert sorted(found) == [("stage0", 0), ("stage0", 1), ("stage1", 0),
                           ("stage1", 1)]
  # Backward order: stage1's transpose before stage0's.
  assert found.index(("stage1", 1)) < found.index(("stage0", 1))
  text = str(jaxpr)
  assert "transpose_count=1" in text and "transpose_count=0" in text


def test_vjp_linearize_jvp_consistent():
  params, x = _params_and_x()
  ref = lambda p, x: _mlp_loss(p, x, labelled=False)
  y, vjp = jax.vjp(_mlp_loss, params, x)
  y_ref, vjp_ref = jax.vjp(ref, params, x)
  _tree_allclose(vjp(1.0), vjp_ref(1.0), rtol=1e-5, atol=1e-6)
  _, lin = jax.linearize(_mlp_loss, params, x)
  _, lin_ref = jax.linearize(ref, params, x)
  np.testing.assert_allclose(lin(params, x), lin_ref(params, x), rtol=1e-5)
  out, tan = jax.jvp(_mlp_loss, (params, x), (params, x))
  out_ref, tan_ref = jax.jvp(ref, (params, x), (params, x))
  np.testing.assert_allclose(tan, tan_ref, rtol=1e-5)
  # JVP keeps the label.
  jaxpr = jax.make_jaxpr(lambda p, x, t: jax.jvp(_mlp_loss, (p, x), (t, x)))(
      params, x, params)
  assert sorted(set(_named_computations(jaxpr))) == [("stage0", 0),
                                                     ("stage1", 0)]


def test_hessian_and_linear_transpose():
  f = lambda x: jnp.sum(ops.named_computation(
      lambda a: jnp.sin(a) ** 3, name="h")(x))
  ref = lambda x: jnp.sum(jnp.sin(x) ** 3)
  np.testing.assert_allclose(jax.jit(jax.hessian(f))(jnp.ones(2)),
                             jax.hessian(ref)(jnp.ones(2)), rtol=1e-5)
  lt = jax.linear_transpose(
      lambda x: ops.named_computation(lambda a: 2 * a, name="l")(x),
      jnp.ones(3))
  np.testing.assert_allclose(lt(jnp.ones(3))[0], [2.0, 2.0, 2.0])
  assert _named_computations(jax.make_jaxpr(lt)(jnp.ones(3))) == [("l", 1)]


def test_checkpoint_around_named_computation():
  params, x = _params_and_x()
  want = jax.grad(lambda p, x: _mlp_loss(p, x, labelled=False))(params, x)
  for policy in (None, jax.checkpoint_policies.dots_saveable):
    f = jax.checkpoint(_mlp_loss, policy=policy)
    _tree_allclose(jax.jit(jax.grad(f))(params, x), want, rtol=1e-5,
                   atol=1e-6)
    found = _named_computations(jax.make_jaxpr(jax.grad(f))(params, x))
    # Known and staged halves of the partial evaluation keep their labels.
    assert set(found) == {("stage0", 0), ("stage0", 1), ("stage1", 0),
                          ("stage1", 1)}
  text = tracing.trace_and_lower(
      jax.grad(jax.checkpoint(_mlp_loss)), (params, x), None).text
  assert set(_origins(text)) >= {
      '#mpmd.user_origin<"stage0">', '#mpmd.user_origin<"stage0"(1)>',
      '#mpmd.user_origin<"stage1">', '#mpmd.user_origin<"stage1"(1)>'}


def test_checkpoint_inside_named_computation():
  w, x = jnp.ones((8, 16)) * 0.1, jnp.ones((4, 8))
  body = lambda w, x: jnp.tanh(jnp.sin(x @ w))
  f = lambda w, x: jnp.sum(ops.named_computation(jax.checkpoint(body),
                                                 name="s0")(w, x))
  ref = lambda w, x: jnp.sum(body(w, x))
  np.testing.assert_allclose(jax.jit(jax.grad(f))(w, x), jax.grad(ref)(w, x),
                             rtol=1e-5)
  assert sorted(_named_computations(jax.make_jaxpr(jax.grad(f))(w, x))) == [
      ("s0", 0), ("s0", 1)]


def test_vmap():
  f = ops.named_computation(lambda a, b: jnp.sin(a) * b, name="v")
  xs, b = jnp.arange(12.0).reshape(3, 4), jnp.ones(4)
  np.testing.assert_allclose(jax.vmap(f, in_axes=(0, None))(xs, b),
                             jnp.sin(xs) * b, rtol=1e-6)
  jaxpr = jax.make_jaxpr(jax.vmap(f, in_axes=(0, None)))(xs, b)
  (eqn,) = [e for e in jaxpr.eqns if e.primitive is ops.named_computation_p]
  assert eqn.params["name"] == "v"
  assert eqn.outvars[0].aval.shape == (3, 4)
  # vmap of grad.
  g = jax.vmap(jax.grad(lambda a: jnp.sum(f(a, b))))(xs)
  np.testing.assert_allclose(g, jnp.cos(xs), rtol=1e-6)


def test_scan_and_cond():
  def h(w, xs, labelled=True):
    cell = lambda c, x, w: jnp.tanh(c * w + x)
    if labelled:
      cell = ops.named_computation(cell, name="cell")
    c, _ = jax.lax.scan(lambda c, x: (cell(c, x, w), None), jnp.zeros(4), xs)
    return jnp.sum(c)
  w, xs = jnp.ones(4) * 0.5, jnp.ones((5, 4))
  np.testing.assert_allclose(jax.jit(jax.grad(h))(w, xs),
                             jax.grad(lambda w, xs: h(w, xs, False))(w, xs),
                             rtol=1e-5)
  # Scan's partial evaluation leaves an empty (dead) "cell" call behind; with
  # keep_unused=True nothing DCEs it, and the MPMD lowering must drop it.
  text = tracing.trace_and_lower(jax.grad(h), (w, xs), None,
                                  keep_unused=True).text
  assert _origins(text) == ['#mpmd.user_origin<"cell">',
                            '#mpmd.user_origin<"cell"(1)>']
  ji.parse_module(text)
  k = lambda x, p: jax.lax.cond(
      p, ops.named_computation(jnp.sin, name="s"), lambda x: x, x).sum()
  np.testing.assert_allclose(jax.jit(jax.grad(k))(jnp.ones(3), True),
                             jnp.cos(jnp.ones(3)), rtol=1e-6)


def test_dce_drops_unused_outputs():
  def f(x):
    a, _ = ops.named_computation(lambda x: (x + 1, x * 2), name="d")(x)
    return a
  text = tracing.trace_and_lower(f, (jnp.ones(3),), None).text
  (line,) = [l for l in text.splitlines() if '"mpmd.named_computation"' in l]
  assert re.search(r'%\d+ = "mpmd\.named_computation"', line)  # one result


# ---------------------------------------------------------------------------
# lowering
# ---------------------------------------------------------------------------


def test_mpmd_lowering_of_value_and_grad():
  params, x = _params_and_x()
  res = tracing.trace_and_lower(jax.value_and_grad(_mlp_loss), (params, x),
                                 None)
  origins = _origins(res.text)
  assert origins == [
      '#mpmd.user_origin<"stage0">', '#mpmd.user_origin<"stage1">',
      '#mpmd.user_origin<"stage1"(1)>', '#mpmd.user_origin<"stage0"(1)>']
  assert res.text.count('"mpmd.return"') == 4
  # Generic form with debug locations.
  assert '"func.func"' in res.text and "loc(" in res.text
  assert res.in_tree == jax.tree.structure(((params, x), {}))
  assert [a.shape for a in res.in_avals] == [(8, 16), (16, 4), (4, 8)]
  assert [a.shape for a in res.out_avals] == [(), (8, 16), (16, 4)]
  assert res.out_tree == jax.tree.structure((0.0, (0, 0)))
  assert res.kept_var_idx == (0, 1, 2)
  assert res.donated_invars == (False, False, False)

  # Custom form, as mpmd-opt prints it.
  pretty = ji.parse_module(res.text).operation.get_asm()
  assert re.search(
      r'mpmd\.named_computation<"stage1"\(1\)> \(%\S+, .*\) \(%arg\d+: '
      r'tensor<16x4xf32>', pretty), pretty
  assert "mpmd.return" in pretty

  # Plain jax.jit of the same function: no mpmd op anywhere, before or after.
  plain = jax.jit(jax.value_and_grad(_mlp_loss)).lower(params, x)
  for t in (plain.as_text(), plain.as_text(debug_info=True)):
    assert "mpmd.named_computation" not in t and "#mpmd." not in t
    assert not re.search(r"\bmpmd\.(named_tensor|broadcast|reduce|return)", t)
  res2 = tracing.trace_and_lower(jax.value_and_grad(_mlp_loss), (params, x),
                                  None)
  assert _origins(res2.text) == origins


def test_named_computation_region_is_isolated():
  c = np.arange(12, dtype=np.float32).reshape(3, 4)

  def f(x, y):
    # The body closes over an outer traced value and a numpy constant, and
    # calls a nested jit.
    inner = jax.jit(lambda z: z + 1.0)
    return ops.named_computation(lambda a: inner(jnp.sin(a) * c + y),
                                 name="iso")(x)

  res = tracing.trace_and_lower(f, (jnp.ones((3, 4)), jnp.ones((3, 4))), None)
  # Re-parsing in JAX's context runs the verifier (IsolatedFromAbove).
  module = ji.parse_module(res.text)
  pretty = module.operation.get_asm()
  assert 'mpmd.named_computation<"iso">' in pretty
  np.testing.assert_allclose(
      jax.jit(f)(jnp.ones((3, 4)), jnp.ones((3, 4))),
      jnp.sin(1.0) * c + 2.0, rtol=1e-6)


def test_named_tensor_broadcast_reduce():
  def f(x):
    y = ops.named_tensor(x, "act")
    return ops.reduce(ops.broadcast(y) * 2.0)

  x = jnp.arange(4.0)
  np.testing.assert_allclose(jax.jit(f)(x), 2 * x)
  np.testing.assert_allclose(f(x), 2 * x)
  assert not re.search(r"\bmpmd\.", jax.jit(f).lower(x).as_text())
  text = tracing.trace_and_lower(f, (x,), None).text
  assert '"mpmd.named_tensor"(%arg0) <{name = "act"}>' in text
  assert '"mpmd.broadcast"' in text
  assert re.search(r'"mpmd\.reduce"\(%\d+\) <\{reduction = #mpmd\.reduction<none>\}>',
                   text)
  ji.parse_module(text)

  # Transposes: named_tensor -> named_tensor, broadcast <-> reduce.
  g = lambda x: jnp.sum(f(x))
  np.testing.assert_allclose(jax.jit(jax.grad(g))(x), 2 * jnp.ones(4))
  jaxpr = jax.make_jaxpr(jax.grad(g))(x)
  prims = [e.primitive for e in jaxpr.eqns]
  fwd = [ops.named_tensor_p, ops.broadcast_p, ops.reduce_p]
  bwd = [ops.broadcast_p, ops.reduce_p, ops.named_tensor_p]
  labels = [p for p in prims if p in fwd]
  assert labels == fwd + bwd
  names = [e.params["name"] for e in jaxpr.eqns
           if e.primitive is ops.named_tensor_p]
  assert names == ["act", "act"]
  # vmap.
  np.testing.assert_allclose(jax.vmap(f)(jnp.ones((2, 4))), 2 * jnp.ones((2, 4)))


@pytest.mark.parametrize("bad, msg", [
    ("", "non-empty"),
    ("main", "reserved"),
    (3, "must be a str"),
    (None, "must be a str"),
])
def test_bad_names(bad, msg):
  with pytest.raises(ValueError, match=msg):
    ops.named_computation(lambda x: x, name=bad)
  with pytest.raises(ValueError, match=msg):
    ops.named_computation(name=bad)
  with pytest.raises(ValueError, match=msg):
    ops.named_tensor(jnp.ones(2), bad)


def test_trace_and_lower_args_on_different_meshes():
  devs = jax.devices()
  assert len(devs) == 8
  m1 = Mesh(np.array(devs[:4]), ("x",))
  m2 = Mesh(np.array(devs[4:]), ("x",))
  a = jax.device_put(jnp.ones((8, 4)), NamedSharding(m1, P("x")))
  b = jax.device_put(jnp.ones((4, 2)), NamedSharding(m2, P()))

  def f(a, unused, b, scale, *, c):
    h = ops.named_computation(lambda a: a * 2, name="s0")(a)
    return ops.named_computation(lambda h, b: h @ b * scale, name="s1")(h, b) + c

  args = (a, jnp.ones(3), b, 2.0)
  kwargs = {"c": jnp.zeros((8, 2))}
  res = tracing.trace_and_lower(f, args, kwargs, donate_argnums=(0,),
                                 static_argnums=(3,))
  assert res.kept_var_idx == (0, 2, 3)
  assert res.donated_invars == (True, False, False, False)
  assert res.in_tree == jax.tree.structure(((a, a, a), {"c": a}))
  assert [a.shape for a in res.in_avals] == [(8, 4), (3,), (4, 2), (8, 2)]
  assert [a.shape for a in res.out_avals] == [(8, 2)]
  assert all(isinstance(a, jax.ShapeDtypeStruct) for a in res.in_avals)
  main = [l for l in res.text.splitlines() if 'sym_name = "main"' in l][0]
  assert ("function_type = (tensor<8x4xf32>, tensor<4x2xf32>, "
          "tensor<8x2xf32>) -> tensor<8x2xf32>") in main
  res_all = tracing.trace_and_lower(f, args, kwargs, static_argnums=(3,),
                                     keep_unused=True)
  assert res_all.kept_var_idx == (0, 1, 2, 3)


def test_text_reparses_in_jax_context():
  params, x = _params_and_x()
  res = tracing.trace_and_lower(jax.value_and_grad(_mlp_loss), (params, x),
                                 None)
  ctx = ji.make_ir_context()
  module = ji.parse_module(res.text, ctx)
  ops_seen = []

  def walk(op):
    ops_seen.append(op.name)
    for region in op.regions:
      for block in region.blocks:
        for inner in block.operations:
          walk(inner.operation)

  walk(module.operation)
  assert ops_seen.count("mpmd.named_computation") == 4
  # Round trip: printing the parsed module generically gives the same ops.
  again = module.operation.get_asm(print_generic_op_form=True,
                                   enable_debug_info=True)
  assert _origins(again) == _origins(res.text)


# ---------------------------------------------------------------------------
# The call-primitive helpers are generic: a call_counter-carrying call
# primitive lowering to `mpmd.call @callee` (what `mpmd.call` will be).
# ---------------------------------------------------------------------------

_test_call_p = ji.make_call_primitive("test_counter_call")


def _test_call_mpmd_lowering(ctx, *args, call_jaxpr, call_counter):
  from jax.extend.mlir import ir
  from jax.extend.mlir.dialects import mpmd as mpmd_dialect
  callee = ji.lower_jaxpr_as_function(ctx, "test_callee", call_jaxpr)
  op = mpmd_dialect.CallOp(ji.ir_types_for_avals(ctx, ctx.avals_out),
                           list(args), callee)
  op.operation.attributes["call_counter"] = ir.IntegerAttr.get(
      ir.IntegerType.get_unsigned(32), call_counter)
  return list(op.results)


ji.register_mpmd_lowering(_test_call_p, _test_call_mpmd_lowering)


def test_generic_call_primitive_helpers():
  def f(w, x):
    body = lambda w, x: jnp.sin(x * w)
    y = ji.bind_call(_test_call_p, body, (w, x), debug_name="c",
                     call_counter=0)
    z = ji.bind_call(_test_call_p, body, (w, y), debug_name="c",
                     call_counter=1)
    return jnp.sum(z)

  w, x = jnp.ones(3) * 0.5, jnp.arange(3.0)
  ref = lambda w, x: jnp.sum(jnp.sin(jnp.sin(x * w) * w))
  np.testing.assert_allclose(jax.jit(jax.grad(f))(w, x), jax.grad(ref)(w, x),
                             rtol=1e-6)
  jaxpr = jax.make_jaxpr(jax.grad(f))(w, x)
  counters = [e.params["call_counter"] for e in jaxpr.eqns
              if e.primitive is _test_call_p]
  assert counters == [0, 1, 1, 0]  # forward 0, 1; transposes keep counters
  text = tracing.trace_and_lower(jax.grad(f), (w, x), None).text
  assert len(re.findall(r'"mpmd\.call"', text)) == 4
  assert text.count("call_counter = 0 : ui32") == 2
  assert text.count("call_counter = 1 : ui32") == 2
  ji.parse_module(text)
  assert not re.search(r"\bmpmd\.", jax.jit(jax.grad(f)).lower(w, x).as_text())
