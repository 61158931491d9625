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

def InferMeshAssignmentPass : Pass<"mpmd-infer-mesh-assignment", "func::FuncOp"> {
  let summary = "Place unlabelled ops, function inputs and outputs on meshes.";
  let description = [{
    Every op of an MPMD function that is not on a mesh yet is placed by where
    its results are used (meshes of consuming fragments) and where its
    operands come from (meshes of producing fragments):

    * an op used on exactly one mesh runs on that mesh;
    * an op that depends only on function inputs and constants runs on every
      mesh that uses it (cloned, so no transfer is needed);
    * an op used on several meshes whose operands all come from one mesh runs
      there and its results are transferred;
    * an op whose results are only returned runs where its operands are.

    Anything else is an error naming the op, its source location and the
    meshes involved. Each placed op is wrapped in an inferred fragment
    (`origin=[]`). Function inputs go to the mesh that uses them first in
    topology order (or as `input-assignment` says), outputs stay where they are
    computed (or move as `output-assignment` says). Transfers are created where
    a value is needed on another mesh.
  }];
  let options = [
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
