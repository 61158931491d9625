"""A GPT-2-sized training step, pipelined, side by side with `jax.jit`.

The model is GPT-2 124M as a flax linen module written the way a user writes
it (12 pre-LayerNorm blocks of width 768 with 12 heads, vocabulary 50257,
learned positions, the LM head tied to the token embedding), trained with
AdamW on cross-entropy over random tokens. Nothing in the model mentions
`mpmd`: each block's `__call__` is labelled from outside with flax's
`nn.intercept_methods` (block i -> `block{i}`, three blocks per stage, stage
s on mesh `m{s}`); the embedding, the final norm, the tied head and the loss
are placed by the compiler. The train state carries a typed PRNG key.

Settings (section (j) of RESULTS.md):

(1) equal arithmetic: 4 meshes x 1 CPU device against `jax.jit` on one
    device. Same arithmetic on the same cores: the ratio is mpmd's own cost.
(2) the user's setting: 4 meshes x 2 devices with each microbatch split
    over `data`, against `jax.jit` data-parallel over the same 8 devices.

On the CPU a case runs in a process with the virtual devices its setting
uses (4 or 8; a case of the other count runs in a child process): XLA's CPU
client sizes its thread pools by the device count, and idle devices' threads
slow both compilers down on a machine of few cores. `--devices N` (or an
XLA_FLAGS of your own) runs every case with N.

Each row reports step time (medians, the two compilers alternating in one
process), compile time, fragment calls and transfers per step, bytes moved
between meshes per step, and peak memory: the peak RSS of a fresh process
that compiles and runs the step alone (one per compiler), next to
`Compiled.memory_report()`'s estimate.

    python benchmarks/gpt2.py                      # both settings, GPT-2 124M
    python benchmarks/gpt2.py --settings equal --steps 3
    python benchmarks/gpt2.py --layers 4 --width 256 --vocab 8192 --quick   # a smaller model

`--cases hf-gpt2-equal` measures Hugging Face's `FlaxGPT2LMHeadModel` (124M, its own
blocks labelled from outside in the same way) at 8 microbatches of 2 x 32 tokens, and
`hf-gpt2-user` in the user's setting (8 microbatches of 4 x 32 tokens, each split over a
mesh's 2 devices); they need the `transformers` library with its flax models (`pip
install "transformers<5"`), and are not among the default cases.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import time

#: CPU devices each setting uses: a process gets those of its cases (a case
#: of another count runs in a child process), because XLA's CPU client sizes
#: its two thread pools by the device count: on a 2-core machine 8 virtual
#: devices, 4 of them idle, slowed both compilers' small-model steps by up to
#: 20% (RESULTS.md, section (j)).
DEVICES_FOR = {"equal": 4, "user": 8}
#: Whether the caller chose XLA_FLAGS (then every case runs in this process).
USER_XLA_FLAGS = "XLA_FLAGS" in os.environ


def _devices_of_this_process() -> int:
  """The CPU device count this process is started with: `--devices`, else
  the most any of `--cases` uses, else 8 (imported by another script)."""
  if __name__ != "__main__":
    return 8
  pre = argparse.ArgumentParser(add_help=False)
  pre.add_argument("--cases", default=None)
  pre.add_argument("--devices", type=int, default=None)
  known, _ = pre.parse_known_args()
  if known.devices:
    return known.devices
  cases = (known.cases or ",".join(DEFAULT_CASES)).split(",")
  return max((DEVICES_FOR[CASES[c][1]] for c in cases if c in CASES), default=8)


#: The cases a run measures: case -> (model, setting, microbatches, sizes that
#: differ from the model's SIZES).
CASES = {
    # Microbatches of one 64-token sequence: on a CPU each microbatch reads
    # every weight for 64 tokens' work, which makes any microbatched step
    # (jax.jit's too) slower than the whole batch; and of 2 x 128 tokens.
    "gpt2-equal": ("gpt2", "equal", 8, {}),
    "gpt2-equal-2x128": ("gpt2", "equal", 8, {"seq": 128, "batch": 16}),
    "gpt2-user": ("gpt2", "user", 8, {}),  # (16 sequences: 2 per microbatch, one per device)
    "small-1": ("small", "equal", 1, {}),
    "small-8": ("small", "equal", 8, {}),
    # Hugging Face's own GPT-2 (only when asked for: it needs `transformers`).
    "hf-gpt2-equal": ("hf-gpt2", "equal", 8, {"seq": 32, "batch": 16}),
    "hf-gpt2-user": ("hf-gpt2", "user", 8, {"seq": 32, "batch": 16}),  # (32 sequences)
}
#: The cases a run measures unless `--cases` names others.
DEFAULT_CASES = [c for c in CASES if CASES[c][0] != "hf-gpt2"]

os.environ.setdefault("XLA_FLAGS",
                      f"--xla_force_host_platform_device_count={_devices_of_this_process()}")
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import flax.linen as nn  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

import _common  # noqa: E402
import mpmd  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- the model (no mpmd in it)
class Attention(nn.Module):
  width: int
  heads: int

  @nn.compact
  def __call__(self, x):
    b, t, d = x.shape
    qkv = nn.Dense(3 * d, name="c_attn")(x).reshape(b, t, 3, self.heads, d // self.heads)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(d // self.heads)
    causal = jnp.tril(jnp.ones((t, t), bool))
    scores = jnp.where(causal, scores, jnp.finfo(scores.dtype).min)
    out = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v).reshape(b, t, d)
    return nn.Dense(d, name="c_proj")(out)


class Block(nn.Module):
  width: int
  heads: int

  @nn.compact
  def __call__(self, x):
    x = x + Attention(self.width, self.heads, name="attn")(nn.LayerNorm(name="ln_1")(x))
    h = nn.Dense(4 * self.width, name="c_fc")(nn.LayerNorm(name="ln_2")(x))
    return x + nn.Dense(self.width, name="c_proj")(nn.gelu(h))


class GPT2(nn.Module):
  vocab: int = 50257
  width: int = 768
  heads: int = 12
  layers: int = 12
  max_len: int = 1024

  @nn.compact
  def __call__(self, tokens):
    wte = nn.Embed(self.vocab, self.width, name="wte",
                   embedding_init=nn.initializers.normal(0.02))
    wpe = self.param("wpe", nn.initializers.normal(0.01), (self.max_len, self.width))
    h = wte(tokens) + wpe[:tokens.shape[1]]
    for i in range(self.layers):
      h = Block(self.width, self.heads, name=f"h_{i}")(h)
    return wte.attend(nn.LayerNorm(name="ln_f")(h))  # the tied LM head


class SmallBlock(nn.Module):
  """The small model's block: attention and an MLP of width 2 * D, each
  residual followed by a LayerNorm."""
  width: int
  heads: int

  @nn.compact
  def __call__(self, x):
    mask = nn.make_causal_mask(jnp.ones(x.shape[:2], jnp.int32))
    x = nn.LayerNorm()(x + nn.MultiHeadDotProductAttention(num_heads=self.heads)(x, mask=mask))
    h = nn.Dense(self.width)(nn.gelu(nn.Dense(2 * self.width)(x)))
    return nn.LayerNorm()(x + h)


class SmallRemat(nn.Module):
  """A small transformer whose blocks are wrapped in `nn.remat`."""
  vocab: int = 64
  width: int = 32
  heads: int = 4
  layers: int = 8
  max_len: int = 16

  @nn.compact
  def __call__(self, tokens):
    h = nn.Embed(self.vocab, self.width, name="embed")(tokens)
    h = h + self.param("positions", nn.initializers.normal(0.02), (self.max_len, self.width))
    for i in range(self.layers):
      h = nn.remat(SmallBlock)(self.width, self.heads, name=f"h_{i}")(h)
    return nn.Dense(self.vocab, name="head")(h)


class HFGPT2:
  """Hugging Face's `FlaxGPT2LMHeadModel` (the `transformers` library) as this
  script's models are used: `init`, `apply`, `layers`, and the module names
  of its blocks (`0` ... `11`, in its block collection). Dropout off."""

  def __init__(self, vocab: int, width: int, heads: int, layers: int, max_len: int):
    try:
      from transformers import FlaxGPT2LMHeadModel, GPT2Config  # noqa: PLC0415
    except ImportError as e:
      raise SystemExit(f"the hf-gpt2 cases need Hugging Face's flax GPT-2: pip install "
                       f"'transformers<5' ({e})") from e
    config = GPT2Config(vocab_size=vocab, n_embd=width, n_head=heads, n_layer=layers,
                        n_positions=max_len, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    self.hf = FlaxGPT2LMHeadModel(config, input_shape=(1, max_len), _do_init=False)
    self.layers = layers
    self.block_names = [str(i) for i in range(layers)]

  def init(self, key, tokens):
    return {"params": self.hf.init_weights(key, tokens.shape)}

  def apply(self, variables, tokens):
    return self.hf(tokens, params=variables["params"]).logits


# ---------------------------------------------------------------- the step
def block_names(model) -> list[str]:
  """The module names of the model's blocks, in order."""
  return getattr(model, "block_names", [f"h_{i}" for i in range(model.layers)])


def block_labels(model) -> dict[str, str]:
  """Block name (`h_i`) -> label: GPT-2's blocks each under a name of their own
  (`block{i}`), the small model's under their stage's name (`stage{s}`, two
  blocks to a stage), as the issue measured them."""
  per = model.layers // 4
  if isinstance(model, (GPT2, HFGPT2)):
    return {name: f"block{i}" for i, name in enumerate(block_names(model))}
  return {name: f"stage{i // per}" for i, name in enumerate(block_names(model))}


def label_to_mesh(model) -> dict[str, str]:
  """Label -> mesh: consecutive blocks, a quarter of them on each of 4 meshes."""
  per = model.layers // 4
  labels = block_labels(model)
  return {labels[name]: f"m{i // per}" for i, name in enumerate(block_names(model))}


def labeller(labels: dict[str, str]):
  """A flax method interceptor: runs the `__call__` of each module named in
  `labels` as that named computation (the model's source is not touched)."""
  def intercept(next_fun, args, kwargs, context):
    label = labels.get(context.module.name)
    if label is not None and context.method_name == "__call__":
      return mpmd.named_computation(lambda *a: next_fun(*a, **kwargs), name=label)(*args)
    return next_fun(*args, **kwargs)
  return intercept


def make_step(model, optimizer, microbatches: int, labelled: bool, same: bool = False):
  """`step(state, tokens) -> (state, loss)`; `tokens` is [microbatches, b, t+1].

  Labelled: the pipelined step (`mpmd.call` per microbatch). Else jax.jit's
  step: the whole batch in one gradient, or with `same` the microbatched step
  mpmd runs, unlabelled, its microbatch loop a `lax.scan` (as a jax user
  accumulates gradients; unrolled, GPT-2's took 184 s to compile)."""
  intercept = labeller(block_labels(model))

  def loss_fn(params, tokens, key):
    del key  # (carried in the state as a real model's dropout key would be)
    if labelled:
      with nn.intercept_methods(intercept):
        logits = model.apply({"params": params}, tokens[:, :-1])
    else:
      logits = model.apply({"params": params}, tokens[:, :-1])
    return optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:]).mean()

  grad_fn = jax.jit(jax.value_and_grad(loss_fn))  # one microbatch, traced once

  def step(state, tokens):
    params, opt_state, key = state
    key, sub = jax.random.split(key)
    microbatched = (labelled or same) and microbatches > 1
    zeros = (jnp.zeros(()), jax.tree.map(jnp.zeros_like, params))
    if microbatched and labelled:
      loss, grads = zeros
      for i in range(microbatches):
        l, g = mpmd.call(grad_fn, call_counter=i)(params, tokens[i], sub)
        loss, grads = loss + l, jax.tree.map(jnp.add, grads, g)
    elif microbatched:
      def accumulate(carry, microbatch):
        l, g = grad_fn(params, microbatch, sub)
        return (carry[0] + l, jax.tree.map(jnp.add, carry[1], g)), None
      (loss, grads), _ = jax.lax.scan(accumulate, zeros, tokens)
    else:
      # No microbatches, or jax.jit's whole batch in one gradient: the same
      # arithmetic (the mean of equal-sized microbatches' mean losses is the
      # batch's mean loss).
      loss, grads = grad_fn(params, tokens.reshape(-1, tokens.shape[-1]), sub)
    if microbatched:
      loss, grads = loss / microbatches, jax.tree.map(lambda g: g / microbatches, grads)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state, key), loss

  return step


def _option_items(args) -> list[str]:
  """The `--option` values given (none where `args` was built without them:
  other benchmarks and tests make a `Side` from their own namespace)."""
  return getattr(args, "option", None) or []


def _option_args(args) -> list[str]:
  """The `--option` arguments again, for a child process."""
  return [a for item in _option_items(args) for a in ("--option", item)]


def partitioning_options(args) -> dict[str, bool]:
  """`--option NAME=true|false` as mpmd's partitioning options."""
  options = {}
  for item in _option_items(args):
    name, _, value = item.partition("=")
    if value.lower() not in ("true", "false"):
      raise SystemExit(f"--option {item}: give NAME=true or NAME=false")
    options[name] = value.lower() == "true"
  return options


def make_model(args):
  if args.model == "small":
    return SmallRemat(args.vocab, args.width, args.heads, args.layers, max_len=args.seq)
  if args.model == "hf-gpt2":
    return HFGPT2(args.vocab, args.width, args.heads, args.layers, max_len=args.seq)
  return GPT2(args.vocab, args.width, args.heads, args.layers, max_len=args.seq)


def init_state(model, optimizer, seq: int):
  params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, seq), jnp.int32))["params"]
  return params, optimizer.init(params), jax.random.key(1)


# ---------------------------------------------------------------- one side, in this process
def mesh_devices(per_mesh: int) -> tuple[np.ndarray, bool]:
  """(4 x per_mesh devices for the 4 meshes, whether they share devices).
  With fewer devices than that (one GPU), the meshes of one device each all
  use the first device (`make_config(shared_devices=True)`): equal
  arithmetic, the stages taking turns on it."""
  available = jax.devices()
  if len(available) >= 4 * per_mesh:
    return np.array(available[:4 * per_mesh]).reshape(4, per_mesh), False
  if per_mesh > 1:
    raise SystemExit(f"the user setting needs {4 * per_mesh} devices; {len(available)} found "
                     f"({available[0].platform}): run --cases gpt2-equal,small-1,small-8")
  return np.array(available[:1] * 4).reshape(4, 1), True


class Side:
  """One compiler's step for one setting, compiled and ready to run."""

  def __init__(self, args, setting: str, compiler: str):
    self.model = make_model(args)
    self.optimizer = optax.adamw(1e-4)
    self.compiler = compiler
    m, b, t = args.microbatches, args.batch // args.microbatches, args.seq
    tokens = jax.random.randint(jax.random.key(2), (m, b, t + 1), 0, args.vocab, jnp.int32)
    per_mesh = 1 if setting == "equal" else 2
    devices, shared = mesh_devices(per_mesh)
    data_spec = P(None, "data") if per_mesh > 1 else P()
    state = init_state(self.model, self.optimizer, t)
    t0 = time.perf_counter()
    if compiler == "mpmd":
      topology = {f"m{s}": Mesh(devices[s], ("data",)) for s in range(4)}
      config = mpmd.make_config(
          topology, label_to_mesh(self.model),
          pipeline_schedule=args.schedule if m > 1 else None,
          partitioning_options={"mpmd_infer_cross_mesh_reductions": True,
                                **partitioning_options(args)},
          shared_devices=shared)
      step = make_step(self.model, self.optimizer, m, labelled=True)
      self.fn = mpmd.jit(step, config, in_shardings=(None, data_spec), donate_argnums=(0,))
      self.compiled = self.fn.lower(state, tokens).compile()
      state_sh, tokens_sh = self.compiled.input_shardings[0]
      self.state, self.tokens = jax.device_put(state, state_sh), jax.device_put(tokens, tokens_sh)
    else:
      step = make_step(self.model, self.optimizer, m, labelled=False,
                       same=compiler == "jax-same")
      # The user's setting: data-parallel over all the devices, each device a
      # whole microbatch's share of the batch (mpmd's meshes split each
      # microbatch instead). Equal arithmetic: ONE device (a mesh of the four
      # meshes' devices with the state replicated would run the step four
      # times over, once on each).
      data_spec = P("data") if per_mesh > 1 else P()
      used = list(dict.fromkeys(devices.flat)) if per_mesh > 1 else [devices.flat[0]]
      mesh = Mesh(np.array(used), ("data",))
      replicated = NamedSharding(mesh, P())
      self.fn = jax.jit(step, in_shardings=(replicated, NamedSharding(mesh, data_spec)),
                        donate_argnums=(0,))
      self.compiled = self.fn.lower(state, tokens).compile()
      self.state = jax.device_put(state, replicated)
      self.tokens = jax.device_put(tokens, NamedSharding(mesh, data_spec))
    # The first call runs any remaining setup (mpmd's warm-up); compile
    # time counts it, as a user waits for it.
    self.state, self.loss = self.run(self.state)
    self.compile_seconds = time.perf_counter() - t0

  def run(self, state):
    out = self.fn(state, self.tokens)
    jax.block_until_ready(out)
    return out

  def counts(self) -> dict:
    """Fragment calls, transfers and bytes moved between meshes per step."""
    if self.compiler != "mpmd":
      return {}
    program, sig = self.compiled.program, self.compiled.signature
    aval_of = dict(zip(program.input_ids, sig.kept_avals))
    calls = transfers = moved = 0
    for inst in program.instructions:
      if type(inst).__name__ == "CallInstruction":
        calls += 1
        aval_of.update(zip(inst.results, inst.fragment.out_avals))
      else:
        transfers += 1
        aval = aval_of.get(inst.operands[0])
        if aval is not None:
          moved += int(np.prod(aval.shape)) * np.dtype(aval.dtype).itemsize
          aval_of[inst.results[0]] = aval
    return {"calls": calls, "transfers": transfers, "moved": moved}

  def memory(self, state) -> dict:
    """`Compiled.memory_report`'s largest per-device peaks: estimated, and
    measured by running the step once more on copies of `state`."""
    report = self.compiled.memory_report(state, self.tokens)
    return {"estimate": max(m.estimated_peak for m in report.meshes),
            "between": max(m.estimated_live_peak for m in report.meshes),
            "measured": max(m.measured_peak for m in report.meshes)}


def _alone(args, setting: str, compiler: str) -> dict:
  """Compiles and runs one side in a fresh process; its peak RSS and counts."""
  cmd = [sys.executable, __file__, "--child", f"{setting}:{compiler}", *_size_args(args)]
  out = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=ROOT,
                       env={**os.environ})
  if out.returncode:
    raise SystemExit(f"{' '.join(cmd)} failed:\n{out.stderr[-4000:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def _size_args(args) -> list[str]:
  return ["--model", args.model, "--layers", str(args.layers), "--width", str(args.width),
          "--heads", str(args.heads), "--vocab", str(args.vocab), "--seq", str(args.seq),
          "--batch", str(args.batch), "--microbatches", str(args.microbatches),
          "--schedule", args.schedule, "--steps", str(args.steps),
          *_option_args(args)]


def _peak_rss() -> int:
  """This process's peak resident set (VmHWM). Not `ru_maxrss`, which after
  fork and exec keeps the parent's peak."""
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith("VmHWM:"):
        return int(line.split()[1]) * 1024
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child(args) -> None:
  setting, compiler = args.child.split(":")
  side = Side(args, setting, compiler)
  state = side.state
  times = []
  for _ in range(max(2, args.steps // 2)):
    t0 = time.perf_counter()
    state, loss = side.run(state)
    times.append(time.perf_counter() - t0)
  peak = _peak_rss()
  # (after the peak is read: the report runs the step on copies of the state)
  memory = side.memory(state) if compiler == "mpmd" else {}
  print(json.dumps({"peak_rss": peak, "step": statistics.median(times),
                    "compile": side.compile_seconds, "loss": float(loss), **memory}))


def _relative_difference(a, b) -> float:
  """Normwise relative difference of two parameter trees."""
  a, b = jax.device_get(a), jax.device_get(b)
  num = sum(float(np.sum((np.asarray(x, np.float64) - np.asarray(y, np.float64)) ** 2))
            for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
  den = sum(float(np.sum(np.asarray(y, np.float64) ** 2)) for y in jax.tree.leaves(b))
  return (num / den) ** 0.5


def compare(args, setting: str, same: bool) -> dict:
  """mpmd.jit, jax.jit of the whole batch and (with `same`) jax.jit of the
  same microbatched step, in this process, taking turns step by step."""
  names = ["mpmd", "jax"] + (["jax-same"] if same else [])
  sides = {name: Side(args, setting, name) for name in names}
  states = {name: side.state for name, side in sides.items()}
  losses, times = {}, {name: [] for name in names}
  for i in range(args.steps + 1):
    for name, side in sides.items():
      t0 = time.perf_counter()
      states[name], losses[name] = side.run(states[name])
      if i:  # (the first round warms every side up)
        times[name].append(time.perf_counter() - t0)
  out = {"counts": sides["mpmd"].counts()}
  for name in names:
    out[name] = statistics.median(times[name])
    out[f"{name} compile"] = sides[name].compile_seconds
    if name != "mpmd":
      out[f"{name} ratio"] = statistics.median(a / b for a, b in zip(times["mpmd"], times[name]))
      out[f"{name} loss"] = abs(float(losses["mpmd"]) - float(losses[name]))
      out[f"{name} params"] = _relative_difference(states["mpmd"][0], states[name][0])
  return out


SIZES = {"gpt2": dict(layers=12, width=768, heads=12, vocab=50257, seq=64, batch=8),
         "hf-gpt2": dict(layers=12, width=768, heads=12, vocab=50257, seq=64, batch=8),
         "small": dict(layers=8, width=32, heads=4, vocab=64, seq=16, batch=16)}
SETTINGS = {"equal": "4 meshes x 1 device vs jax.jit on 1 device (equal arithmetic)",
            "user": "4 meshes x 2 devices, batch over `data`, vs jax.jit data-parallel on 8"}


def _describe(args) -> str:
  model = make_model(args)
  params = jax.eval_shape(lambda: init_state(model, optax.adamw(1e-4), args.seq)[0])
  count = sum(x.size for x in jax.tree.leaves(params)) / 1e6
  if args.model == "hf-gpt2":
    what = (f"Hugging Face's FlaxGPT2LMHeadModel ({args.layers} blocks, width {args.width}, "
            f"{args.heads} heads, vocabulary {args.vocab}, tied head")
  elif args.model == "gpt2":
    what = (f"GPT-2-shaped ({args.layers} blocks, width {args.width}, {args.heads} heads, "
            f"vocabulary {args.vocab}, tied head")
  else:
    what = (f"small remat'd transformer ({args.layers} blocks in `nn.remat`, width "
            f"{args.width}, {args.heads} heads, vocabulary {args.vocab}")
  mb = (f"{args.microbatches} microbatches, {args.schedule}" if args.microbatches > 1
        else "no microbatches")
  return f"{what}; {count:.1f}M parameters), {args.batch} x {args.seq} tokens, {mb}"


def measure_case(args, case: str) -> tuple[str, list[str], list[str] | None]:
  """One case measured in this process: (its description, its row of the
  step table, its row of the memory table or None)."""
  model, setting, microbatches, sizes = CASES[case]
  run = argparse.Namespace(**vars(args))
  run.model, run.microbatches = model, microbatches
  for name, value in {**SIZES[model], **sizes}.items():
    if getattr(args, name) is None:
      setattr(run, name, value)
  if setting == "user" and args.batch is None:
    run.batch = 2 * run.batch  # (a microbatch split over the 2 devices of a mesh)
  if run.steps is None:
    run.steps = 100 if model == "small" else 6
  what = (f"- {case}: {_describe(run)} ({len(jax.devices())} "
          f"{jax.devices()[0].platform} devices in the process).")
  same = setting == "equal" and microbatches > 1
  r = compare(run, setting, same)
  counts = r["counts"]
  row = [case, SETTINGS[setting], f"{r['mpmd'] * 1e3:.1f}", f"{r['jax'] * 1e3:.1f}",
         f"{r['mpmd'] / r['jax']:.3f}x", f"{r['jax ratio']:.3f}x",
         f"{r['jax-same'] * 1e3:.1f}" if same else "-",
         f"{r['mpmd'] / r['jax-same']:.3f}x" if same else "-",
         f"{r['mpmd compile']:.1f}", f"{r['jax compile']:.1f}",
         f"{counts['calls']}", f"{counts['transfers']}",
         f"{counts['moved'] / 2**20:.1f}", f"{r['jax loss']:.1e}",
         f"{r['jax params']:.1e}"]
  memory_row = None
  if not args.no_memory:
    a, b = _alone(run, setting, "mpmd"), _alone(run, setting, "jax")
    memory_row = [case, f"{a['peak_rss'] / 2**30:.2f}", f"{b['peak_rss'] / 2**30:.2f}",
                  f"{a['peak_rss'] / b['peak_rss']:.2f}x",
                  f"{a['estimate'] / 2**30:.3f}", f"{a['between'] / 2**30:.3f}",
                  f"{a['measured'] / 2**30:.3f}",
                  f"{a['between'] / a['measured'] - 1:+.0%}"]
  return what, row, memory_row


def _case_in_child(args, case: str, devices: int) -> tuple[str, list[str], list[str] | None]:
  """`measure_case` in a child process with `devices` CPU devices."""
  cmd = [sys.executable, __file__, "--row-of", case, "--devices", str(devices),
         "--schedule", args.schedule]
  for name in ("layers", "width", "heads", "vocab", "seq", "batch", "steps"):
    if getattr(args, name) is not None:
      cmd += [f"--{name}", str(getattr(args, name))]
  if args.no_memory:
    cmd.append("--no-memory")
  cmd += _option_args(args)
  env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
  out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=False, cwd=ROOT, env=env)
  if out.returncode:
    raise SystemExit(f"{' '.join(cmd)} failed (exit status {out.returncode})")
  what, row, memory_row = json.loads(out.stdout.strip().splitlines()[-1])
  return what, row, memory_row


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--cases", default=",".join(DEFAULT_CASES),
                      help=f"comma-separated, of {', '.join(CASES)} (default: all but "
                      f"the hf-gpt2 ones)")
  parser.add_argument("--model", choices=SIZES, default="gpt2", help=argparse.SUPPRESS)
  for name in ("layers", "width", "heads", "vocab", "seq", "batch"):
    parser.add_argument(f"--{name}", type=int, default=None,
                        help="override the model's size (GPT-2 124M / the small model)")
  parser.add_argument("--microbatches", type=int, default=None, help=argparse.SUPPRESS)
  parser.add_argument("--schedule", default="1F1B")
  parser.add_argument("--steps", type=int, default=None,
                      help="timed steps per compiler (default 6 for GPT-2, 100 for the small model)")
  parser.add_argument("--no-memory", action="store_true", help="skip the peak-RSS processes")
  parser.add_argument("--option", action="append", metavar="NAME=true|false",
                      help="a partitioning option of mpmd's side (repeatable), e.g. "
                      "mpmd_recompute_operand_views=false")
  parser.add_argument("--quick", action="store_true", help="print, do not write RESULTS.md")
  parser.add_argument("--output", default=None, help="results file (default RESULTS.md)")
  parser.add_argument("--devices", type=int, default=None,
                      help="CPU devices of the process, for every case (default: each case "
                      "runs with those its setting uses, 4 or 8)")
  parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
  parser.add_argument("--row-of", default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.child:
    child(args)
    return 0
  if args.row_of:
    print(json.dumps(measure_case(args, args.row_of)))
    return 0
  rows, memory_rows, described = [], [], []
  here = len(jax.devices())
  for case in args.cases.split(","):
    need = DEVICES_FOR[CASES[case][1]]
    if (jax.default_backend() == "cpu" and need != here and not USER_XLA_FLAGS
        and not args.devices):
      what, row, memory_row = _case_in_child(args, case, need)
    else:
      what, row, memory_row = measure_case(args, case)
    described.append(what)
    rows.append(row)
    print(rows[-1], flush=True)
    if memory_row:
      memory_rows.append(memory_row)
      print(memory_rows[-1], flush=True)
  table = _common.markdown_table(
      ["case", "setting", "mpmd step (ms)", "jax.jit step (ms)", "ratio of medians",
       "median of step ratios", "jax.jit, same microbatched step (ms)", "ratio to it",
       "mpmd compile (s)", "jax.jit compile (s)", "fragment calls", "transfers", "MiB moved",
       "|loss diff|", "params rel. diff"], rows)
  body = (f"{_common.provenance(_common.command_line(__file__, argv))}\n"
          + "\n".join(described) + "\n\n"
          "AdamW, the training state donated on both sides, a typed PRNG key in the state; "
          "blocks labelled from outside the model (`nn.intercept_methods`), a quarter of them on "
          "each mesh. The reference is `jax.jit` of the whole batch in one gradient (the same "
          "arithmetic: without a pipeline there is no use for microbatches), and in the equal "
          "setting with microbatches also `jax.jit` of the microbatched step mpmd runs "
          "(unlabelled, its microbatch loop a `lax.scan`); the fairest baseline is the faster "
          "of the two. Step times are medians of the timed steps, the compilers taking turns "
          "step by step in one process; the ratio columns after the first are medians of "
          "per-step ratios. Compile time counts the first call. Fragment calls, transfers and "
          "bytes moved are per step, from the compiled program; loss and parameter differences "
          "are against the whole-batch `jax.jit` after the last step.\n\n" + table)
  if memory_rows:
    body += ("\nPeak memory: each compiler alone in a fresh process (peak RSS of the whole "
             "process, all devices), and for mpmd `Compiled.memory_report()`'s largest "
             "per-device peaks: estimated with each call's scratch space (XLA's temp "
             "buffers), estimated for the arrays alive between calls, and measured between "
             "calls by an instrumented run (which cannot see scratch space); the last "
             "column compares the like with the like:\n\n" + _common.markdown_table(
                 ["case", "mpmd peak RSS (GiB)", "jax.jit peak RSS (GiB)", "ratio",
                  "estimate with scratch (GiB)", "estimate between calls (GiB)",
                  "measured between calls (GiB)", "estimate vs measured"], memory_rows))
  print(body)
  if not args.quick:
    path = _common.write_section("j", body, args.output)
    print(f"wrote section (j) of {path}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
