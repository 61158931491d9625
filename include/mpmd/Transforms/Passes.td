//===- Passes.td - mpmd passes -----------------------------*- tablegen -*-===//

#ifndef MPMD_TRANSFORMS_PASSES_TD
#define MPMD_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Import
//===----------------------------------------------------------------------===//

def InlineFuncCallsPass : Pass<"mpmd-inline-func-calls", "ModuleOp"> {
  let summary = "Inline func.call ops (JAX's nested jit calls) into their callers.";
  let description = [{
    JAX lowers nested `jax.jit` functions (e.g. `jax.nn.relu`) to private
    functions called with `func.call`. Their bodies are StableHLO, which this
    tool carries as unregistered operations that MLIR's generic inliner will
    not touch, so this pass inlines single-block callees itself, including
    calls nested inside named computations, and erases private functions left
    without uses.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

def MapNamedOpsToMpmdOpsPass : Pass<"mpmd-map-named-ops-to-mpmd-ops", "func::FuncOp"> {
  let summary = "Turn named computations into fragments on their assigned meshes.";
  let description = [{
    In every function with a `topology`, each `mpmd.named_computation` whose
    name is assigned to a mesh becomes an `mpmd.fragment` on that mesh, its
    operands wrapped in `mpmd.assign` and its results in `mpmd.unassign`.
    A `mpmd.named_tensor` whose name is assigned becomes `assign`+`unassign`;
    one whose name is not assigned is erased. A named computation whose name is
    not assigned, a mesh not in the topology, or an assigned name that no op
    uses is an error.

    Assignment entries are `name@mesh` or `name@mesh/stage`.
  }];
  let options = [
    ListOption<"assignment", "assignment", "std::string",
               "Name to mesh assignment: name@mesh or name@mesh/stage">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def IntroduceTransfersPass : Pass<"mpmd-introduce-transfers", "func::FuncOp"> {
  let summary = "Replace assign(unassign(x)) across meshes by mpmd.transfer.";
  let description = [{
    `mpmd.assign` of a value produced by `mpmd.unassign` on the same mesh is
    folded away; on another mesh it becomes one `mpmd.transfer` (at most one
    per value and destination mesh), placed right after the producer.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def ConvertReduceOpsPass : Pass<"mpmd-infer-mesh-convert-reduce-ops", "func::FuncOp"> {
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

def InferMeshAssignmentPass : Pass<"mpmd-infer-mesh-assignment", "func::FuncOp"> {
  let summary = "Place unlabelled ops, function inputs and outputs on meshes.";
  let description = [{
    Every op of an MPMD function that is not on a mesh yet is placed from
    `src` (the meshes all its inputs are on: every mesh for function inputs
    and constants) and `use` (the meshes its results are consumed on):

    * an op that depends only on function inputs and constants runs on every
      mesh that uses it (cloned: no transfer);
    * any other op runs where its inputs are, on a mesh that uses it if there
      is one, so values cross meshes where the labels put the boundaries;
    * an op whose inputs come from several meshes runs on the mesh using it.

    Transfers are classified. Implied by the labels: into a named
    computation, an input copied to another mesh that uses it, an output moved
    by `output-assignment`, the operand of `mpmd.broadcast`, the operands of
    `mpmd.reduce`, and the operands of a `stablehlo.add` whose results only
    feed named computations (a gradient summed from several meshes). Any other
    transfer is inferred: an error naming the op, the value, both meshes and
    their source locations, unless `infer-transfers` is set. With
    `infer-cross-mesh-reductions` (implied by `infer-transfers`), an
    elementwise add/max/min/mul/and/or of values from different meshes becomes
    a cross-mesh reduction computed once.

    Each placed op is wrapped in an inferred fragment (`origin=[]`). Function
    inputs go to the first mesh (in topology order) that uses them, or as
    `input-assignment` says; outputs stay where they are computed, or move as
    `output-assignment` says. `annotate-only` just writes the analysis
    (`mpmd.src_set`, `mpmd.use_set`, `mpmd.placement`) on each op.
  }];
  let options = [
    Option<"inferTransfers", "infer-transfers", "bool", /*default=*/"false",
           "Create transfers that no label implies instead of reporting them">,
    Option<"inferCrossMeshReductions", "infer-cross-mesh-reductions", "bool",
           /*default=*/"false",
           "Treat elementwise reductions of values from several meshes as cross-mesh reductions">,
    Option<"annotateOnly", "annotate-only", "bool", /*default=*/"false",
           "Only annotate ops with the analysis (src/use sets, placement)">,
    ListOption<"inputAssignment", "input-assignment", "std::string",
               "Function input index to mesh: i@mesh">,
    ListOption<"outputAssignment", "output-assignment", "std::string",
               "Function output index to mesh: i@mesh">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def MergeInferredFragmentsPass : Pass<"mpmd-merge-inferred-fragments", "func::FuncOp"> {
  let summary = "Merge inferred fragments into neighbouring fragments on the same mesh.";
  let description = [{
    An inferred fragment (empty origin) is merged into the closest fragment on
    the same mesh that produces one of its operands, when all its other
    operands are available there; otherwise into its first consumer on the
    same mesh, when no other use of its results comes earlier. Two user
    fragments are never merged with each other. Repeats to a fixed point.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

//===----------------------------------------------------------------------===//
// Export
//===----------------------------------------------------------------------===//

def LowerToFragmentCallsPass : Pass<"mpmd-lower-to-fragment-calls", "ModuleOp"> {
  let summary = "Outline fragments into functions called by mpmd.fragment_call.";
  let description = [{
    Each fragment of an MPMD function becomes a `func.func` carrying the
    `mesh_shape` of its mesh (global-view SPMD program), and is replaced by an
    `mpmd.fragment_call`. Fragments with identical bodies on meshes of the same
    shape share one function, so compile cost grows with the number of
    distinct programs, not with the number of microbatches. Functions are named
    `p<index>_<origin>_<fwd|bwd|fwd_bwd>` or `p<index>_inferred`.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect", "::mlir::func::FuncDialect"];
}

#endif // MPMD_TRANSFORMS_PASSES_TD
