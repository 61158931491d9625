//===- Passes.td - mpmd passes -----------------------------*- tablegen -*-===//

#ifndef MPMD_TRANSFORMS_PASSES_TD
#define MPMD_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"
// MpmdFlag_<name>: the rows of MPMD_PARTITION_FLAGS (include/mpmd/Pipeline.h) as
// options, written by the build (tools/mpmd-flag-options).
include "mpmd/Transforms/FlagOptions.td"

//===----------------------------------------------------------------------===//
// Import
//===----------------------------------------------------------------------===//

def SetTopologyPass : Pass<"mpmd-set-topology", "ModuleOp"> {
  let summary = "Give the entry function its meshes; check there is work for the import.";
  let description = [{
    With `topology` (e.g. `topology="m0:data=4;m1:data=4"`: meshes separated
    by `;`, each `name:axis=size,axis=size`), the function `func` (default
    `main`) gets that `#mpmd.topology` attribute; it is an error if it has
    another one already. Then the module must have a function with a
    `topology` (else nothing would happen: an error says how to give one),
    and no such function may be imported already (fragments and no named
    computations: an error says to run the later passes instead). The first
    pass of `-mpmd-import-pipeline`, whose `topology` option it takes.
  }];
  let options = [
    Option<"topology", "topology", "std::string", /*default=*/"\"\"",
           "Meshes: name:axis=size,...;name:...">,
    Option<"func", "func", "std::string", /*default=*/"\"main\"",
           "The function that gets the topology">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def InlineFuncCallsPass : Pass<"mpmd-inline-func-calls", "ModuleOp"> {
  let summary = "Inline func.call ops (JAX's nested jit calls) into their callers.";
  let description = [{
    JAX lowers nested `jax.jit` functions (e.g. `jax.nn.relu`) to private
    functions called with `func.call`. Their bodies are StableHLO, which this
    tool carries as unregistered operations that MLIR's generic inliner will
    not touch, so this pass inlines single-block callees itself, including
    calls nested inside named computations, and erases private functions left
    without uses.

    Before anything is inlined, the size of each function with every call
    expanded (recursively) is checked against `max-inlined-ops` (default
    1,000,000): a chain of calls that doubles at each level is an error
    naming the function and its inlined size, instead of a run that exhausts
    memory.
  }];
  let options = [
    Option<"maxInlinedOps", "max-inlined-ops", "uint64_t", /*default=*/"1000000",
           "Most ops a function may have once its calls are inlined (0: no limit)">,
  ];
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

def UnrollForLoopsPass : Pass<"mpmd-unroll-for-loops", "func::FuncOp"> {
  let summary = "Fully unroll mpmd.for loops, numbering the iterations' calls.";
  let description = [{
    Every `mpmd.for` (which must be fully unrollable: `unroll_factor` absent
    or equal to `iterations`) is replaced by `iterations` copies of its body,
    each taking the previous copy's returned values and, as its index, a
    `stablehlo.constant` of type `tensor<ui32>`. The `mpmd.call`,
    `mpmd.named_computation` and `mpmd.named_tensor` ops of copy `i` get
    `call_counter = i` unless they already have one, so each iteration is a
    microbatch for the pipeline schedules. Nested loops are unrolled from the
    outside in.

    Before anything is unrolled, the size of the unrolled function (ops,
    nested ones included, with each loop's body counted `iterations` times)
    is checked against `max-unrolled-ops` (default 1,000,000): a larger
    result is an error naming the loop, its iterations and its unrolled size,
    instead of a run that exhausts memory. Loops nested more than 256 deep
    are an error too (unrolling copies each level's inner levels).
  }];
  let options = [
    Option<"maxUnrolledOps", "max-unrolled-ops", "uint64_t", /*default=*/"1000000",
           "Most ops the unrolled function may have (0: no limit)">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def InlineMpmdCallsPass : Pass<"mpmd-call-inline", "ModuleOp"> {
  let summary = "Inline mpmd.call ops, tagging their named computations with the call's counter.";
  let description = [{
    Every `mpmd.call @f(...) {call_counter = i : ui32}` is replaced by the
    body of `@f`; the discardable attributes of the call (`call_counter`, the
    microbatch index) are copied onto every `mpmd.named_computation`,
    `mpmd.named_tensor` and `mpmd.fragment` of the inlined body that does not
    already carry them. Nested calls are inlined too; callees left without
    uses are erased.

    As in `-mpmd-inline-func-calls`, the inlined size of each function is
    checked first against `max-inlined-ops` (default 1,000,000): calls in
    unrolled loops that call loops again cannot exhaust memory.
  }];
  let options = [
    Option<"maxInlinedOps", "max-inlined-ops", "uint64_t", /*default=*/"1000000",
           "Most ops a function may have once its calls are inlined (0: no limit)">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def MapNamedOpsToMpmdOpsPass : Pass<"mpmd-map-named-ops-to-mpmd-ops", "func::FuncOp"> {
  let summary = "Turn named computations into fragments on their assigned meshes.";
  let description = [{
    In every function with a `topology`, each `mpmd.named_computation` whose
    name is assigned to a mesh becomes an `mpmd.fragment` on that mesh, its
    operands wrapped in `mpmd.assign` and its results in `mpmd.unassign`.
    It is simplified first, so that values it does not compute do not travel
    to its mesh: a result that returns an argument unchanged is replaced by
    the argument's operand, a result repeating an earlier one by that one,
    and an operand passed twice, or no longer used, is passed once or not at
    all.
    A `mpmd.named_tensor` whose name is assigned becomes `assign`+`unassign`;
    one whose name is not assigned is erased. A named computation whose name is
    not assigned, or a name the function uses assigned to a mesh not in its
    topology, is an error. An assigned name that no op of the function uses
    is an error with `fail-on-unused-names` (what `mpmd.jit` runs: its
    assignment describes one program, so such a name is misspelt; its mesh
    is checked too) and is ignored without it (an assignment given on the
    command line may serve several functions, each using some of its names).

    Assignment entries are `name@mesh` or `name@mesh/stage`. A named tensor
    may name a memory kind after its mesh, `name@mesh#pinned_host` (or
    `#device`): its `assign` and `unassign` then carry it in their mesh type.
    A memory kind on a named computation is ignored with a warning (it runs
    in device memory; the driver's pass makes it an error); a kind other than
    `device` or `pinned_host` is an error.
  }];
  let options = [
    ListOption<"assignment", "assignment", "std::string",
               "Name to mesh assignment: name@mesh, name@mesh/stage, name@mesh#memory_kind">,
    Option<"failOnUnusedNames", "fail-on-unused-names", "bool", "false",
           "Report an assigned name that no named op of the function uses">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def IntroduceTransfersPass : Pass<"mpmd-introduce-transfers", "ModuleOp"> {
  let summary = "Replace assign(unassign(x)) across meshes by mpmd.transfer.";
  let description = [{
    `mpmd.assign` of a value produced by `mpmd.unassign` on the same mesh is
    folded away; on other meshes it becomes one `mpmd.transfer` per
    destination, chained in topology order (m1 -> m2 -> m3) where the first
    of those assigns was, so the source sends the value once. An assign of a tree of
    single-use `stablehlo.add`s of unassigned values runs the additions on
    the assigned mesh (one inferred fragment each). A callee argument that
    every `mpmd.call` passes unassigned from the same mesh tensor type, and
    that the callee assigns, is assigned to that type at the callee's entry.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def InferMeshConvertReduceOpsPass : Pass<"mpmd-infer-mesh-convert-reduce-ops", "func::FuncOp"> {
  let summary = "Turn reduce<none> of a sum into one cross-mesh reduce<add>.";
  let description = [{
    JAX differentiates `mpmd.broadcast(x)` used on several meshes into
    `mpmd.reduce<none>(stablehlo.add(ct1, stablehlo.add(ct2, ct3)))`. The
    single-use additions under the reduce are flattened into one
    `mpmd.reduce<add>(ct1, ct2, ct3)`, whose operands mesh inference may move
    to the mesh where the sum is computed.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def InferMeshAssignmentPass : Pass<"mpmd-infer-mesh-assignment", "ModuleOp"> {
  let summary = "Place unlabelled ops, function inputs and outputs on meshes.";
  let description = [{
    Every op of an MPMD function that is not on a mesh yet is placed from
    `src` (the meshes all its inputs are on: every mesh for function inputs
    and constants) and `use` (the meshes its results are consumed on):

    * an op that depends only on function inputs and constants runs on every
      mesh that uses it (cloned: no transfer), except a `stablehlo.slice` or
      `stablehlo.dynamic_slice` of a function input, which runs where the
      input lives, so that only the slice crosses to the meshes using it (not
      the whole input, e.g. a stacked batch);
    * any other op runs where its inputs are, on a mesh that uses it if there
      is one, so values cross meshes where the labels put the boundaries;
    * an op whose inputs come from several meshes runs on the mesh using it;
    * a `stablehlo.optimization_barrier` whose results only named
      computations read (the barrier `jax.checkpoint` puts over what a
      recomputation reads) runs on the meshes reading it, split by the mesh
      reading each result: it computes nothing, and where its operands are it
      would send each value a second time. Any other barrier over values of several meshes is split by
      the meshes its operands come from.

    Transfers are classified. Implied by the labels: into a named
    computation, an input (or such a slice of one) copied to another mesh
    that uses it, an output moved
    by `output-assignment`, the operand of `mpmd.broadcast`, the operands of
    `mpmd.reduce`, the operands of such a barrier, and the operands of a `stablehlo.add` whose results only
    feed named computations (a gradient summed from several meshes). Any other
    transfer is inferred: an error naming the op, the value, both meshes and
    their source locations, unless `infer-transfers` is set. With
    `infer-cross-mesh-reductions` (implied by `infer-transfers`), an
    elementwise add/max/min/mul/and/or of values from different meshes becomes
    a cross-mesh reduction computed once. A value the labels already
    transferred to a mesh (into a named computation) is read there from that
    transfer, not sent again; that transfer does not make another reader's
    need implied.

    Each placed op is wrapped in an inferred fragment (`origin=[]`). Function
    inputs go to the first mesh (in topology order) that uses them, or as
    `input-assignment` says; outputs stay where they are computed, or move as
    `output-assignment` says. `annotate-only` just writes the analysis
    (`mpmd.src_set`, `mpmd.use_set`, `mpmd.placement`) on each op.

    Memory kinds: an input or output assigned as `i@mesh#pinned_host` (or
    `#device`) carries the kind in its mesh type; an input in host memory is
    moved to device memory by a transfer at the entry, an output into its
    kind by a transfer before the return, and a value an `assign` puts in
    host memory (a named tensor) is moved there by a transfer, and back to
    device memory for the ops that read it. A matching `mhlo.memory_kind` on
    such an input or output is dropped; a different one is an error.

    Calls (`mpmd.call`, kept rather than inlined, as Shardy's programs keep
    one function per microbatch or layer): every call of a function runs one
    placement of its body, so each argument and each result of a callee
    gets one mesh, shared by all call sites. A result goes where the callee
    computes it (preferring a mesh its call sites use it on), else where the
    call sites use it; an argument where the callee uses it (preferring a
    mesh every call site has it on), else where the call sites have it. Each
    choice is written into the IR at once (mesh types on the callee's
    signature and the calls), so a result feeding another call takes that
    call's argument mesh, and so on. A call boundary that would need a
    transfer no label implies is an error on the callee naming the calls,
    unless `infer-transfers`: call sites passing an argument from
    different meshes, or a call passing a result of the callee to the next
    call of it (a value carried as in a loop) that is not used where it
    arrives. Calls must be made directly in a function body; a callee must
    be private, have a body and a topology naming the caller's meshes
    (`-mpmd-copy-topology-from-main` sees to both), and be referred to only
    by `mpmd.call`. `annotate-only` does not place
    calls. Entry points (functions no call calls) get `input-assignment`
    and `output-assignment`; callees get their meshes from their calls.
  }];
  let options = [
    MpmdFlag_infer_transfers,
    MpmdFlag_infer_cross_mesh_reductions,
    Option<"annotateOnly", "annotate-only", "bool", /*default=*/"false",
           "Only annotate ops with the analysis (src/use sets, placement)">,
    ListOption<"inputAssignment", "input-assignment", "std::string",
               "Function input index to mesh: i@mesh or i@mesh#memory_kind">,
    ListOption<"outputAssignment", "output-assignment", "std::string",
               "Function output index to mesh: i@mesh or i@mesh#memory_kind">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def SumAtSourcePass : Pass<"mpmd-sum-at-source", "func::FuncOp"> {
  let summary = "Sum the values one mesh sends another before sending them.";
  let description = [{
    A weight used on two meshes (a tied embedding: the token lookup on the
    first mesh, the LM head on the last) gets a gradient term on each, and
    the terms meet in an unlabelled add on one mesh; accumulated over
    microbatches, that is one transfer of a full gradient per microbatch.
    This pass finds trees of inferred single-`stablehlo.add` fragments on
    one mesh (each inner sum used once, by the next add) whose leaves
    include two or more transfers from the same other mesh (each used only
    by its add), and sums those values where they are made: on the sending
    mesh, a chain of add fragments accumulates them in program order
    (each placed where its transfer was), the adds on the receiving mesh
    drop those terms, and one transfer after the tree's root brings the
    sum over, added to the root's value for the root's users. Sums of
    floating-point values are reassociated (the result equals the original
    up to rounding). Trees whose transferred values differ in type are left
    alone.

    Runs after mesh inference, before inferred fragments are merged.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def MergeInferredFragmentsPass : Pass<"mpmd-merge-inferred-fragments", "func::FuncOp"> {
  let summary = "Merge inferred fragments into neighbouring fragments on the same mesh.";
  let description = [{
    An inferred fragment (empty origin) is merged into the closest fragment on
    the same mesh that produces one of its operands, when all its other
    operands are available there; otherwise into its first consumer on the
    same mesh, when no other use of its results comes earlier and, if that
    consumer belongs to a microbatch (`call_counter`), no fragment of another
    microbatch uses its results (work done once for several microbatches,
    such as slicing a stacked batch, stays a fragment of its own instead of
    giving the first microbatch a program of its own). Likewise, work done
    once after the last microbatch (an optimizer update after the gradients
    are accumulated: an inferred fragment whose producer is a microbatch's
    fragment, with no inferred fragment of the same body after that
    computation's fragments of other microbatches) is not merged into the
    last microbatch's fragment. Two inferred fragments are not merged when
    one of them feeds one microbatch only and the other feeds other
    microbatches (slice i of a stacked batch and slice j, or the reshape that
    feeds every slice): each slice then merges into its own microbatch's
    fragment, where the slices of all microbatches differ only in their
    offsets, instead of all slices making one program with a result per
    microbatch. Two user fragments are never merged with each other. A
    fragment of optimization barriers only (`jax.checkpoint`'s barrier over
    what a recomputation reads) tries its first consumer before its
    producer: in the producer (the forward) it would return each value once
    more, a copy per microbatch. An operand that only a later transfer brings
    to the mesh does not keep a fragment from its producer: the transfer (and
    the transfers it reads) moves up before the producer where what it reads
    exists there. Repeats to a fixed point.

    The merged fragment returns the kept results of the earlier fragment,
    then those of the later one; a fragment with one operand and one result,
    read only by the other, merges in place (the other keeps its operands,
    with that operand where the result was). Its `call_counter` is the
    counters' common value, or the user fragment's where they differ, or the
    one that has one; its `mpmd.inferred_by` lists the passes of both.

    `merge-sideways` (off by default; `mpmd.jit` does not use it): after
    that, an inferred fragment still on its own merges with the next
    fragment of its mesh whatever the data flow between them (neither may
    need the other's results in between), at the later one's position where
    nothing reads its results before, else at its own.
    `merge-any-consumer` is accepted as Shardy spells it and changes
    nothing: what it adds there (a fragment merging with a later consumer
    than its first, when the first is a user fragment like itself) this
    pass does from the inferred fragment's side, which merges into its
    closest producer.
  }];
  let options = [
    Option<"mergeAnyConsumer", "merge-any-consumer", "bool", /*default=*/"false",
           "Shardy's option; accepted, and what it asks for is always done here.">,
    Option<"mergeSideways", "merge-sideways", "bool", /*default=*/"false",
           "Merge a fragment left on its own with the next fragment of its mesh.">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

//===----------------------------------------------------------------------===//
// Optimize (scheduling and what depends on it)
//===----------------------------------------------------------------------===//

def MergeUserFragmentsIntoSchedulingUnitsPass
    : Pass<"mpmd-merge-user-fragments-into-scheduling-units", "func::FuncOp"> {
  let summary = "Merge the user fragments of one scheduling unit into one fragment.";
  let description = [{
    However finely a model is labelled (one named computation per
    transformer block, three blocks to a stage), a mesh should run one
    forward and one backward program per microbatch. A user fragment is
    merged with the closest user fragment on the same mesh that consumes
    one of its results (program order) when both are forward (all
    transpose counts 0) or both backward (all >= 1), have the same
    `call_counter` (or neither has one) and the same stage (or neither has
    one). The merged fragment runs the producer's body then the consumer's,
    carries the union of their origins and returns the consumer's results
    and those of the producer still used elsewhere; it is placed at the
    consumer's position when every other use of the producer's results
    comes after it, else at the producer's when all the consumer's operands
    are available there, else the pair stays apart (e.g. the producer's
    result crosses to another mesh whose answer the consumer waits for).
    Repeats until nothing merges, so a chain of blocks becomes one fragment.
    A forward fragment that runs again a label its microbatch (or, without
    microbatches, the program) already ran forward on the mesh, and whose
    results only the backward of that unit reads (`jax.checkpoint`'s
    recomputation), belongs to the backward unit: its origins get transpose
    count 1, it is marked `remat`, and it merges into the backward call.

    Runs before the schedule, whose units are then single fragments.
    Inferred fragments are left to `-mpmd-merge-inferred-fragments`. A
    `call_counter` that is not a ui32 integer is an error.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def PipelineSchedulePass : Pass<"mpmd-pipeline-schedule", "func::FuncOp"> {
  let summary = "Order fragments by an explicit per-mesh pipeline schedule.";
  let description = [{
    A scheduling unit is the set of user fragments of one mesh with the same
    microbatch (`call_counter`), kind and stage: `F` (forward, transpose count
    0), `B` (backward, or its activation-gradient part after
    `-mpmd-split-bwd-fragments`) or `W` (the weight-gradient part). The
    `order` option gives, for every mesh, the total order of its units, one
    line per mesh (lines separated by newlines or `;`) in the text form of
    `mpmd.schedule`: `m0: F0 F1 B0 F2 B1 B2` (`F3.s4` names stage 4 when a
    mesh holds several stages; `.` is an idle slot; `#` starts a comment). Without a stage, a unit's stage is the
    index of its mesh.

    The block is reordered by a stable topological sort honouring both data
    dependencies and each mesh's order, so program order becomes the
    schedule. An order that contradicts the data flow is an error naming the
    two units that wait on each other and the dependency path; a unit of the
    schedule missing from the program, or a unit of the program missing from
    the schedule, is an error too. Fragments without a `call_counter` are not
    scheduling units and keep their place among the data dependencies.
  }];
  let options = [
    Option<"order", "order", "std::string", /*default=*/"\"\"",
           "Per mesh, the order of its units, meshes separated by ';' or newlines: "
           "'m0: F0 F1 B0 B1; m1: F0 B0 F1 B1'">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def BuiltinSchedulePass : Pass<"mpmd-builtin-schedule", "func::FuncOp"> {
  let summary = "Order fragments by a pipeline schedule given by name.";
  let description = [{
    Writes down, for every mesh, the order of its scheduling units under a
    built-in schedule and orders the fragments by it as
    `-mpmd-pipeline-schedule` does (with its checks against the data flow).
    With `t` 0 for a forward unit and 1 for a backward one, `mb` its
    microbatch, `s` its stage, `N` the number of meshes of the topology and
    `i` the index of the mesh in it, each mesh's units are sorted by:

    * `GPipe`: `(t, mb)`, every forward, then every backward;
    * `1F1B`: `(mb + (N - i) * t, -t)`, `N - i` forwards, then a backward
      and a forward in turn;
    * `GPipeBut1F1BForLastMesh`: 1F1B on the last mesh, GPipe elsewhere;
    * `Circular`: forwards by `(mb / N, s, mb)`, then backwards by
      `(mb / N, -s, mb)`: microbatches in rounds of `N`, each round through
      the mesh's stages;
    * `CircularWithReversedBackward`: backwards in the reverse of the
      forward order;
    * `none`: the program order is kept.

    A unit that needs another unit of its mesh (e.g. after a merge tied two
    microbatches together) comes after it whatever the key says: each
    mesh's order is the list schedule of its units by the key under their
    data dependencies.

    Names are case-insensitive. Other schedules (zero-bubble ones, which
    need weight-gradient units) are given as orders to
    `-mpmd-pipeline-schedule` or through `mpmd.jit`'s `pipeline_schedule`.
  }];
  let options = [
    Option<"schedule", "schedule", "std::string", /*default=*/"\"1F1B\"",
           "The schedule's name: GPipe, 1F1B, GPipeBut1F1BForLastMesh, Circular, "
           "CircularWithReversedBackward or none">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def RuleBasedMergePass : Pass<"mpmd-rule-based-merge", "func::FuncOp"> {
  let summary = "Merge the fragments of given scheduling units into one program.";
  let description = [{
    Each rule names scheduling units of one mesh that must run as a single
    program (e.g. the forward and backward of a microbatch on the last stage,
    or JaxPP's fused tasks): `m3: F0 B0` (units as in
    `-mpmd-pipeline-schedule`; rules separated by `;` or newlines). The
    fragments of the rule's units are merged in program order, each merge at
    a position where every value is available before its uses; origins are
    united. Runs after scheduling, so the merged program keeps the schedule's
    order. A unit missing from the program, or units that cannot be merged
    without reordering other work, is an error naming the rule and units.
  }];
  let options = [
    Option<"rules", "rules", "std::string", /*default=*/"\"\"",
           "Merge rules, separated by ';' or newlines: 'm3: F0 B0; m3: F1 B1'">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

//===----------------------------------------------------------------------===//
// Optimize: split, remat, merge
//===----------------------------------------------------------------------===//

def SplitBwdFragmentsPass : Pass<"mpmd-split-bwd-fragments", "func::FuncOp"> {
  let summary = "Split backward fragments into activation- and weight-gradient parts.";
  let description = [{
    Zero-bubble schedules (ZeroBubbleH1, ZeroBubbleH2*, ZBV, DualPipeV) run
    the part of a backward that the previous stage waits for (the
    activation gradient, B) as early as possible and the rest (the weight
    gradient, W) later, to fill bubbles. This pass makes that split; run it
    after the scheduling units are formed and before scheduling.

    In every function with a `topology`, each backward user fragment (all
    origins with transpose count >= 1) is split in two fragments with the
    same origin, mesh, stage and discardable attributes (`call_counter`):

    * B, in place of the original, marked `split_keep_transferred`: exactly
      the ops in the backward slice of the activation gradients (results
      used by an `mpmd.transfer`, i.e. sent to another mesh, by the
      backward fragment of another stage on the same mesh, as in V-shaped
      schedules, or by the backward of another labelled block of the same
      stage and microbatch), returning those results, then the values it computes that
      W needs (residuals, typed fully replicated on the mesh);
    * W, right after B, marked `split_drop_transferred`: every other op,
      taking the operands it needs and B's residuals, returning all the
      other results.

    A backward fragment with no transferred result (the first stage) still
    gets both parts: B is then empty (no operands, ops or results). Ops with
    regions move as a whole, with the values their regions use; every op is
    treated as pure data flow, so an op with no results goes to W.

    Fragments already split (carrying either attribute), forward, mixed and
    inferred fragments are left alone, so the pass is idempotent. It is an
    error to split a fragment with `in_shardings`/`out_shardings` (run this
    pass before shardings are assigned) or one whose parts would have to
    pass a value that is not a ranked tensor (e.g. a token).
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def BatchWeightGradientsPass : Pass<"mpmd-batch-weight-gradients", "func::FuncOp"> {
  let summary = "Compute a mesh's weight gradients once for a run of microbatches.";
  let description = [{
    With small microbatches, each weight-gradient unit (W, made by
    -mpmd-split-bwd-fragments) reads every weight gradient's inputs for a
    few tokens only, and then adds its gradients into the accumulators: a
    product `x.T @ dy` from 64 tokens costs a CPU a fifth of one from 512,
    and the accumulation reads and writes every gradient once per
    microbatch. This pass replaces a run of W units of one computation on
    one mesh by one fragment, at the last unit's position, that computes
    the run's gradients from its units' inputs concatenated along their
    dimension 0 (the batch): one large product per weight, one addition
    into the accumulators the run's first unit was given.

    A run is consecutive W units (`split_drop_transferred`) of the same
    mesh, origin and stage whose bodies are the same (up to value names),
    whose results are summed from unit to unit and read by nothing else:
    each unit after the first takes the previous one's results as its
    accumulators, or each result goes to an inferred fragment of one
    `stablehlo.add` with the previous unit's sum (as the import leaves
    `jax.tree.map(jnp.add, grads, g)`; the last one's sum is then the run's
    sum added to what the first addition started from). First, an inferred
    fragment that is the only reader of a unit's result and reads otherwise
    only values made before the unit (an embedding's scatter-add of the rows
    the backward returns) is merged into the unit. Operands that differ
    between units only as zeros made for each, as copies through fragments
    that return an operand (through the optimization barrier
    `jax.checkpoint` puts over a recomputation's parameters), or as the same
    result of fragments with the same body computed from such operands (a
    weight each forward returns transposed, a constant each backward
    computes) are one value.
    The body is
    checked op by op: a value is invariant (the same operand for every
    unit, constants, what is computed from those only), concatenated along
    one dimension (an operand that differs between units, and elementwise
    ops, broadcasts, reshapes, transposes, slices, reductions over other
    dimensions, lookups by its indices of it), a sum over the microbatches
    (a `dot_general` contracting or an add-reduction or a scatter-add into
    zeros over the concatenated dimension, and sums, differences, negations,
    conversions, reshapes and scalings of such sums), an accumulator, or an
    accumulator plus a sum. An invariant operand of an op on concatenated
    values of its shape (a causal mask) is repeated along the dimension.
    A value of one row per microbatch broadcast over the microbatch's rows
    (a weight's view saved per microbatch) is repeated row by row. The run
    is batched when every op is covered by these rules and every result read
    after the run (or by the next unit) is a sum (its own accumulator plus a
    sum, for accumulators inside the units) or invariant; each rule is an identity of the op on
    concatenated operands, so the fragment computes what the units computed,
    up to the order of the additions. Anything else leaves the run as it
    is (`verbose` says why, as a remark on the run's last unit).

    Only meshes of one device are batched (concatenating a batch split over
    a mesh's devices would move it between them), and units with per-value
    shardings or attributes are left alone. The saved activations of the
    run's microbatches live until the run's last unit. The new fragment
    keeps the last unit's attributes; its `mpmd.unit` names the units it
    runs (`W1+W2+W3`). Run after the schedule, before inferred fragments
    are merged. `mpmd.jit` runs it with `mpmd_batch_weight_gradients=True`
    (which splits backwards into B and W units).

    ```mlir
    // before: W1 and W2, each adding its microbatch's x.T @ dy to %acc
    %w1 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%acc0, %x1, %dy1) {call_counter = 1 : ui32, split_drop_transferred} (...)
    %w2 = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%w1, %x2, %dy2) {call_counter = 2 : ui32, split_drop_transferred} (...)
    // after: one product over both microbatches' 2 x 8 rows
    %w = mpmd.fragment<mesh="m0", origin=["s"(1)], stage=0> (%acc0, %x1, %x2, %dy1, %dy2) {call_counter = 2 : ui32, mpmd.unit = "W1+W2", split_drop_transferred} (%a, %x1, %x2, %d1, %d2) {
      %x = "stablehlo.concatenate"(%x1, %x2) <{dimension = 0 : i64}> : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>
      ...
    }
    ```
  }];
  let options = [
    Option<"verbose", "verbose", "bool", /*default=*/"false",
           "Say, as a remark, why a run of units is left as it is">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def RematFragmentPass : Pass<"mpmd-remat-fragment", "func::FuncOp"> {
  let summary = "Recompute forward fragments right before the backward that uses them.";
  let description = [{
    Trades compute for memory: instead of keeping a forward fragment's
    results (activations) alive until its backward runs, the forward is run
    again right before the backward. Run it after scheduling (the clones
    need no scheduling of their own): with the fragments of a mesh in
    execution order, for each forward user fragment F (all transpose counts
    0) and each backward user fragment B (all transpose counts >= 1) that
    uses a result of F, has the same `call_counter`, mesh and stage, and is
    not the next fragment of that mesh after F (otherwise nothing would be
    saved), F is cloned immediately before B and only B uses the clone's
    results. Each such B gets its own clone, marked with the unit attribute
    `remat`; the clone returns only what B uses and keeps only the ops and
    operands those results need (a clone with `in_shardings` or
    `out_shardings` is kept whole). Ops without results are kept, and so
    run again: rematerialization assumes the forward has no side effects.

    With `merge-remat-fragments`, each clone is merged into its backward
    fragment, which then carries both origins and `remat`.

    Fragments without `call_counter` are not scheduling units and are left
    alone, as are clones made by a previous run (the pass is idempotent).
    A `call_counter` that is not a ui32 integer is an error.
  }];
  let options = [
    MpmdFlag_merge_remat_fragments,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def MergeForwardWithBackwardPass
    : Pass<"mpmd-merge-forward-with-backward", "func::FuncOp"> {
  let summary = "Merge a forward fragment with the backward that runs right after it.";
  let description = [{
    The last stage of a 1F1B schedule runs the backward of a microbatch
    right after its forward; one program then saves a dispatch and lets XLA
    fuse across the boundary and free activations inside the program. Run
    it after scheduling.

    A forward user fragment F (all transpose counts 0) whose next fragment
    on the same mesh (program order, skipping other meshes' fragments and
    transfers) is a backward user fragment B (all transpose counts >= 1)
    with the same `call_counter` and stage that uses a result of F, is
    merged with B: the merged fragment runs F's body then B's, carries the
    union of their origins, and returns B's results and those of F still
    used elsewhere. It is placed at B's position when every other use of
    F's results comes after B, else at F's position when all of B's
    operands are available there; otherwise the pair is left alone (e.g.
    F's activation is transferred to another mesh whose result B waits
    for). The merged fragment names the two units it runs in `mpmd.unit`
    (`"F3+B3"`, `"F3.s5+B3.s5"`), which its call keeps.

    Two fragments without `call_counter` (a program that is not
    microbatched) pair like two of one microbatch; one with a
    `call_counter` never pairs with one without. A `call_counter` that is
    not a ui32 integer is an error.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def MergeBackToBackUnitsPass
    : Pass<"mpmd-merge-back-to-back-units", "func::FuncOp"> {
  let summary = "Run a mesh's back-to-back units as one program where a call costs more than the work.";
  let description = [{
    Every program call costs the mesh a fixed time (host dispatch, device
    launch) besides its work. Where a fragment B runs on a mesh right after
    a fragment A of that mesh (program order, skipping other meshes'
    fragments and transfers between other meshes) and nothing arrives on
    the mesh between them (no transfer to it), A and B can run as one
    program: that saves one call, and delays what A sends to other meshes
    by B's run time. The pass merges B into A where B's estimated run time
    is at most `call-cost`: the merge then delays no other mesh by more
    than the time it saves. Runs of several units merge one after another
    (a GPipe forward run on the first mesh: `F0+F1+F2+F3`).

    B's run time is estimated from its body: `kernel-cost` for each op of
    it (at least one) but those XLA folds into their neighbours (constants,
    reshapes, broadcasts, conversions, tuples), plus its arithmetic at
    `gflops` (a dot product: 2 x result size x contracted size; another op:
    one per result element). A fragment
    with a loop (`stablehlo.while`) is never merged: its run time is not
    known. The driver gives the figures measured for the meshes' platform
    (`mpmd.partition.dispatch_cost`); `call-cost=0` (the default) merges
    nothing. The merged fragment names the units it runs in `mpmd.unit`
    (`"F0+F1"`), which its call keeps; its `call_counter` is the second's.

    ```mlir
    // before (m0 runs F0 then F1 with nothing arriving in between)
    %f0 = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%x0) {call_counter = 0 : ui32} ...
    %t0 = mpmd.transfer %f0 : (!m0) -> !m1
    %f1 = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%x1) {call_counter = 1 : ui32} ...
    // after, with call-cost=30 kernel-cost=5 gflops=1000
    %f:2 = mpmd.fragment<mesh="m0", origin=["s"], stage=0> (%x0, %x1) {call_counter = 1 : ui32, mpmd.unit = "F0+F1"} ...
    %t0 = mpmd.transfer %f#0 : (!m0) -> !m1
    ```
  }];
  let options = [
    Option<"callCost", "call-cost", "double", /*default=*/"0.0",
           "What one program call costs on the meshes' platform, in microseconds (0: merge nothing)">,
    Option<"kernelCost", "kernel-cost", "double", /*default=*/"0.0",
           "What each op of a program adds to its run time, in microseconds">,
    Option<"gflops", "gflops", "double", /*default=*/"0.0",
           "The platform's arithmetic rate, in billions of flops per second (0: arithmetic not counted)">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

//===----------------------------------------------------------------------===//
// Export
//===----------------------------------------------------------------------===//

def RecomputeOperandViewsPass
    : Pass<"mpmd-recompute-operand-views", "func::FuncOp"> {
  let summary = "Recompute, where it is read, a result that is a view of an operand.";
  let description = [{
    JAX's differentiation saves what a backward reads from its forward, and a
    forward often reads a weight through a view of it: `x @ w.T` (a Hugging
    Face `Conv1D`, a tied embedding as the output head) saves `w.T`, a
    transposed copy of the weight. Split into a forward and a backward
    fragment, the forward writes that copy for every microbatch and hands it
    over as one more buffer, although the backward's mesh holds the weight
    itself.

    For each fragment operand that an earlier fragment of the same mesh
    returns as a view of one of its own operands (a chain of
    `stablehlo.transpose`, `reshape`, `broadcast_in_dim` and `convert` ops,
    each making at least as many bytes as it reads), the reading fragment
    takes that operand instead and computes the view itself; the producer
    stops returning results nobody reads any more. Nothing is computed
    twice that costs more than the copy it replaces, no buffer lives longer
    than the larger view would have, and XLA folds the view into the ops
    that read it (`transpose(transpose(w))` is `w`). A view smaller than
    `min-new-operand-bytes` is recomputed only by a fragment that already
    takes its operand: handed over, it travels packed with the producer's
    other values (-mpmd-pack-fragment-values), where as an operand of its own
    it would be one more buffer for the call. Fragments with per-value
    shardings or attributes and values in host memory are left alone. Off
    with `mpmd_recompute_operand_views=False`.

    ```mlir
    // before: the forward returns its weight transposed for the backward
    %f:2 = mpmd.fragment<mesh="m0", origin=["f"]> (%w, %x) (%a: tensor<4x8xf32>, %b: tensor<2x8xf32>) {
      %t = "stablehlo.transpose"(%a) <{permutation = array<i64: 1, 0>}> : (tensor<4x8xf32>) -> tensor<8x4xf32>
      %y = "stablehlo.dot"(%b, %t) : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
      mpmd.return %y, %t : tensor<2x4xf32>, tensor<8x4xf32>
    } : (!w, !x) -> (!y, !wt)
    %g = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%f#1, %dy) (%t: tensor<8x4xf32>, %d: tensor<2x4xf32>) {...}
    // after: the backward transposes the weight it is given
    %f = mpmd.fragment<mesh="m0", origin=["f"]> (%w, %x) (...) {
      ...
      mpmd.return %y : tensor<2x4xf32>
    } : (!w, !x) -> !y
    %g = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%dy, %w) (%d: tensor<2x4xf32>, %a: tensor<4x8xf32>) {
      %t = "stablehlo.transpose"(%a) <{permutation = array<i64: 1, 0>}> : (tensor<4x8xf32>) -> tensor<8x4xf32>
      ...
    }
    ```
    (with `min-new-operand-bytes=0`: the example's view is 128 bytes.)
  }];
  let options = [
    Option<"minNewOperandBytes", "min-new-operand-bytes", "int64_t", /*default=*/"16384",
           "The smallest view recomputed by a fragment that must take its operand as a new one">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def DelayArgumentTransfersPass
    : Pass<"mpmd-delay-argument-transfers", "func::FuncOp"> {
  let summary = "Move each transfer of a function argument right before its first user.";
  let description = [{
    A transfer whose operand is an argument of the MPMD function (a value
    the caller passes in, such as an optimizer's step count that every
    stage's update reads) can run at any time, and the import pipeline puts
    it at the top of the function. The runtime issues the program in order,
    so those copies would delay the first fragment of the step. This pass
    moves each such transfer right before the first op that reads its
    result (transfers moved before the same op keep their order). It runs
    first in the export pipeline, so that the donation marks are read off
    the final order.

    ```mlir
    // before
    %0 = mpmd.transfer %count : (!m0_i32) -> !m1_i32
    %1 = mpmd.fragment_call<mesh="m0", origin=["f"]> @f(%x) : (!m0) -> !m0
    %2 = mpmd.transfer %1 : (!m0) -> !m1
    %3 = mpmd.fragment_call<mesh="m1", origin=["g"]> @g(%2, %0) : (!m1, !m1_i32) -> !m1
    // after
    %1 = mpmd.fragment_call<mesh="m0", origin=["f"]> @f(%x) : (!m0) -> !m0
    %2 = mpmd.transfer %1 : (!m0) -> !m1
    %0 = mpmd.transfer %count : (!m0_i32) -> !m1_i32
    %3 = mpmd.fragment_call<mesh="m1", origin=["g"]> @g(%2, %0) : (!m1, !m1_i32) -> !m1
    ```
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def ParameterizeFragmentConstantsPass
    : Pass<"mpmd-parameterize-fragment-constants", "func::FuncOp"> {
  let summary = "Turn the constants that tell microbatches apart into operands.";
  let description = [{
    Fragments that differ only in scalar constants (an unrolled loop's index)
    or in the offsets of a static slice (`xs[i]` on a stacked batch,
    `treduce`'s microbatch slices) would each become a program of their own,
    so compile cost would grow with the number of microbatches. This pass
    groups the fragments of an MPMD function by their body with such values
    masked; within a group of several distinct bodies, every constant whose
    value differs becomes a new operand of each fragment, and every slice
    whose offsets differ becomes a `stablehlo.dynamic_slice` whose differing
    start indices are new operands (`tensor<i32>`). The operands are new
    arguments of the function, one per (mesh, value), marked with their value
    in the `mpmd.constant` argument attribute; the runtime places them on
    their mesh once. Afterwards the fragments of a group have one body, which
    -mpmd-lower-to-fragment-calls outlines into one function.

    First, the first microbatch's fragment often differs from the others'
    in its structure: its accumulators start from zeros (`0 + g`) where the
    later microbatches add to the running sum (`acc + g`, `acc` an operand).
    Among the fragments of one computation on one mesh that differ only in
    their `call_counter` (same origin, stage and markers), a fragment whose
    body has splats (a splat `stablehlo.constant`, or a
    `stablehlo.broadcast_in_dim` of a 0-d one) in excess compared with a
    sibling gets those splats as operands, in the sibling's operand order,
    when that makes the two bodies equal up to the values parameterized
    below (the bodies are compared with their arguments in first-use order;
    otherwise nothing changes). Each lifted splat is a new argument of the
    function marked `mpmd.constant` (its value, with its shape) and
    `jax.buffer_donor`: the runtime places it once and passes a fresh copy to
    the call, which consumes it as the later microbatches consume their
    accumulators.

    Only 0-d constants of 1 to 32-bit integer or 16/32-bit float type are
    parameterized, and only splats of those element types are lifted (so the
    runtime's arrays have the same type with or without 64-bit mode);
    anything else that differs keeps the fragments apart.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def LowerToFragmentCallsPass : Pass<"mpmd-lower-to-fragment-calls", "ModuleOp"> {
  let summary = "Outline fragments into functions called by mpmd.fragment_call.";
  let description = [{
    Each fragment of an MPMD function becomes a `func.func` carrying the
    `mesh_shape` of its mesh (global-view SPMD program), and is replaced by an
    `mpmd.fragment_call`. Fragments with identical bodies on meshes of the same
    shape share one function, so compile cost grows with the number of
    distinct programs, not with the number of microbatches. Functions are named
    `p<index>_<origins>.<program>`: the origins' names (`inferred` for an
    inferred fragment), followed by `_fwd`, `_bwd` or `_fwd_bwd` when the MPMD
    function has a backward pass, and the module's name without JAX's `jit_`
    prefix (`main` for a module without a name), e.g. `p0_stage0_fwd.step`.
    A call of a scheduling unit carries its name in `mpmd.unit` (e.g. `"B3"`,
    `"F0.s5"`). A fragment's `arg_attrs` and `res_attrs` become its
    function's argument and result attributes, and its `reserved_hbm_bytes`
    (see `-mpmd-mark-fragment-reserved-memory`) the function's: the largest
    of the calls that share it. With `verbose-logging`, the pass prints to
    stderr, for each mesh, the functions it calls in program order and the
    origins of each call.
    The operands in a fragment's `mpmd.donated_operands` (see
    `-mpmd-mark-aliasing-and-donation`) become donated arguments of its
    function: `tf.aliasing_output = j` when result `j` is computed from the
    argument by elementwise ops and has its type (a gradient accumulator
    `acc + g`, an update `p - lr * g`; each result takes the nearest such
    argument); a result computed otherwise takes, with `tf.aliasing_output`,
    a donated argument of its type whose every use is an op the result is
    computed from (a stashed activation the backward pass read early). Any
    other donated argument is a `jax.buffer_donor` when no result of its type
    is left unpaired or it is returned as it is, and is not marked at all
    otherwise (the runtime frees it after the call): XLA pairs buffer donors
    with the remaining results by position, and copies a donor that is still
    read after its result is written (pairing accumulators by position when a
    backward pass returns them in another order than it takes them made XLA
    copy each one twice per call). These marks are part of what makes two
    bodies identical.
  }];
  let options = [
    Option<"verboseLogging", "verbose-logging", "bool", /*default=*/"false",
           "Print each mesh's fragment calls and their origins to stderr.">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect", "::mlir::func::FuncDialect"];
}

def PackFragmentValuesPass : Pass<"mpmd-pack-fragment-values", "func::FuncOp"> {
  let summary = "Hand the values one fragment passes to another of its mesh over as one buffer.";
  let description = [{
    A fragment call costs host time for each buffer it takes and makes (on a
    GPU several microseconds each), and a pipeline hands many small buffers
    from one call to the next on a mesh: a microbatch's gradient
    accumulators from one backward to the next, the activations a forward
    saves for its backward. For each fragment on a mesh of one device, its
    operands that are results of one other fragment and read by nothing
    else (or splat `mpmd.constant` arguments the runtime makes afresh for it,
    such as the zeros the first microbatch's accumulators start from) are
    packed into one buffer per element type: the producer returns them
    flattened and concatenated (`stablehlo.reshape`, `stablehlo.concatenate`)
    as its last result, the consumer takes that buffer as its last operand
    and slices and reshapes the values back (`stablehlo.slice`,
    `stablehlo.reshape`); packed constants become one constant of the packed
    shape. Members are ordered by the consumer's operands, so fragments that
    shared a body before still share one. Values with a sharding or memory
    kind, of dynamic shape or non-numeric type, fragments with shardings or
    argument/result attributes, and meshes of several devices are left
    alone (a packed buffer cannot keep a per-value layout). XLA fuses the
    packing into the ops that compute the values where it can; where it
    cannot, the packed values are copied once more on the device.
    The export pipeline runs it before donation is decided
    (`mpmd_pack_fragment_values`).
  }];
  let options = [
    Option<"minValues", "min-values", "unsigned", /*default=*/"2",
           "Fewest values worth packing into one buffer">,
    Option<"maxValueBytes", "max-value-bytes", "uint64_t", /*default=*/"0",
           "Largest value (bytes) to pack (0: no limit)">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def MarkFragmentReservedMemoryPass
    : Pass<"mpmd-mark-fragment-reserved-memory", "func::FuncOp"> {
  let summary = "Mark each fragment with the bytes other arrays hold on its mesh while it runs.";
  let description = [{
    Walks each MPMD function in program order and writes on every fragment
    `reserved_hbm_bytes`: the bytes, per device (the local shape under the
    value's sharding), of the arrays alive on the fragment's mesh while it
    runs, other than its operands and results. A value is alive from the op
    that makes it to the last op that reads it, or to the end when the
    function returns it; an argument of the function is alive throughout
    unless the caller donated it (`jax.buffer_donor` or `tf.aliasing_output`),
    then to its last use. Values in host memory (a `memory_kind` other than
    `device` in their type, or JAX's `mhlo.memory_kind` on the function
    argument or in the `res_attrs` of the fragment that makes them) and
    values nothing reads hold no device memory.
    The export pipeline runs it; `-mpmd-lower-to-fragment-calls` moves the
    figure onto the fragment's function.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def MarkAliasingAndDonationPass : Pass<"mpmd-mark-aliasing-and-donation", "ModuleOp"> {
  let summary = "Mark the fragment operands and transfers that may consume their input buffer.";
  let description = [{
    Walks each MPMD function in program order. An operand of a fragment whose
    last use in the program is that fragment is donated: the fragment may
    reuse its buffer for a result (XLA decides which). Such an operand must be
    the result of an op of the program, or an argument of the function that
    the caller donated (`jax.buffer_donor` or `tf.aliasing_output` on the
    argument, as JAX writes for `donate_argnums`); a value passed twice to the
    same fragment, or returned by the function, is never donated; nor is a
    value that fragments of the same computation in other microbatches also
    read (a stacked batch every microbatch slices): donated to the last of
    them only, it would give that microbatch a program of its own.

    Fragments get `mpmd.donated_operands = array<i64: ...>` (operand indices);
    `-mpmd-lower-to-fragment-calls` turns it into donation marks on
    the outlined function's arguments, so calls that donate differently get
    different functions. A transfer whose operand it is the last use of gets
    the unit attribute `mpmd.donate` (the runtime frees the source once the
    copy is done).
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect", "::mlir::func::FuncDialect"];
}

def ValidateProgramPass : Pass<"mpmd-validate-program", "ModuleOp"> {
  let summary = "Check that the exported program only calls fragments and transfers values.";
  let description = [{
    After export, the body of an MPMD function must hold only
    `mpmd.fragment_call`, `mpmd.transfer` and the return, on values of mesh
    types. Any other op was left without a mesh (for instance by a pass that
    failed to place it): it is an error naming the op and its source location.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect", "::mlir::func::FuncDialect"];
}

def MarkPartialSumsPass : Pass<"mpmd-mark-partial-sums", "ModuleOp"> {
  let summary = "Decide which gradient accumulators a step holds as unreduced partial sums.";
  let description = [{
    On a mesh of several devices that splits each microbatch over an axis, a
    backward program makes a gradient as one partial sum per device. Held
    reduced, every microbatch's accumulator update costs an all-reduce; held
    *unreduced*, the partial sums of all microbatches add up on each device
    and one reduction happens in the call that first reads the sum whole
    (the optimizer update), as in `jax.jit` of the whole batch.

    Runs on the exported program (fragment calls and transfers). An
    *accumulator chain* starts at the value a call on a mesh of more than one
    device adds a term to (a result `stablehlo.add` of an argument and
    another value: `FragmentFunction::accumulated`): a donated constant
    argument of the function (the zeros the first microbatch's accumulator
    starts from, made by -mpmd-parameterize-fragment-constants) or a value an
    earlier call on the same mesh made (the first microbatch's gradient). It
    goes on through each call that adds a term to the chain's last value. A
    chain is held unreduced only when every value in it stays on its mesh
    and is read only by calls there: a value read anywhere else (a transfer,
    a result of the function) must be whole, so the
    last value of a chain read so is reduced by the call that makes it, and a
    chain read elsewhere midway is held reduced throughout.

    Marks what it decides, for the runtime to lay out: a call gets
    `mpmd.partial_results = array<i64: ...>` (the result indices it holds
    unreduced) and `mpmd.partial_sources = array<i64: ...>` (for each, the
    operand index it adds a term to; -1 where the call starts the chain); a
    constant argument a chain starts from gets the unit attribute
    `mpmd.partial_sum`. Which mesh axes a value is unreduced over is the
    runtime's: the axes its call does not split the value over.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect", "::mlir::func::FuncDialect"];
}

def ValidateFragmentsPass : Pass<"mpmd-validate-fragments", "func::FuncOp"> {
  let summary = "Report inferred fragments left on their own and fragments that only reshard.";
  let description = [{
    Checks the fragments a program brings to export, each report at the
    fragment's source location:

    - with `warn-on-inferred-fragments` (a warning) or
      `fail-on-inferred-fragments` (an error): an inferred fragment (empty
      origin) that no merge took into a user fragment, naming the passes
      that made it (`mpmd.inferred_by`). It runs as a program of its own,
      one more call per step; label the computation it belongs to, or merge
      inferred fragments.
    - with `fail-on-reshard-only-fragments`: a fragment that computes
      nothing and returns one of its operands with another sharding or
      memory kind, naming both types: it only moves data within its mesh,
      usually an unintended reshard.

    Without options it checks nothing. The export pipeline runs it first when
    given Shardy's `fail-on-inferred-fragments` (true: errors; false:
    warnings) or `fail-on-reshard-only-fragments`; `mpmd.jit` does not run it
    (its optimizer updates are inferred fragments on purpose).
  }];
  let options = [
    Option<"warnOnInferredFragments", "warn-on-inferred-fragments", "bool", /*default=*/"false",
           "Warn about each inferred fragment left on its own">,
    Option<"failOnInferredFragments", "fail-on-inferred-fragments", "bool", /*default=*/"false",
           "Make each inferred fragment left on its own an error">,
    Option<"failOnReshardOnlyFragments", "fail-on-reshard-only-fragments", "bool",
           /*default=*/"false", "Make each fragment that only reshards an operand an error">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def ValidateNoBackwardDepsPass : Pass<"mpmd-validate-no-backward-deps", "ModuleOp"> {
  let summary = "Check that a forward-only program flows from earlier to later meshes.";
  let description = [{
    In a forward-only program (no fragment has an origin with a non-zero
    transpose count, e.g. inference; inferred fragments count as forward),
    every fragment call should read only values computed on its own mesh or
    on meshes earlier in the topology: that is what makes it a pipeline. A
    call that reads (through transfers) a value computed by a fragment on a
    later mesh is reported, naming both calls and meshes: a warning by
    default (wrap-around inference pipelines do this on purpose), an error
    with `fail-on-backward-deps`. Programs with backward fragments are not
    checked, except that `fail-on-backward-deps`, which says the program must
    be forward-only, makes one an error at its function.
  }];
  let options = [
    MpmdFlag_fail_on_backward_deps,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect", "::mlir::func::FuncDialect"];
}

#endif // MPMD_TRANSFORMS_PASSES_TD
