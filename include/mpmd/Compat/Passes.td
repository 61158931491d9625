//===- Passes.td - the compatibility wing's passes ----------*- tablegen -*-===//
//
// Passes the driver's pipeline never runs: they serve `mpmd-opt` on files
// written for Shardy:MPMD (its pass names and behaviours). Built into their
// own library (lib/Compat, MpmdCompat) that only `mpmd-opt` links; tested
// under test/Compat.
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_COMPAT_PASSES_TD
#define MPMD_COMPAT_PASSES_TD

include "mlir/Pass/PassBase.td"

def CopyTopologyFromMainPass : Pass<"mpmd-copy-topology-from-main", "ModuleOp"> {
  let summary = "Give each function an entry point calls by mpmd.call the entry point's meshes.";
  let description = [{
    A function called by `mpmd.call` from an entry point (a public function
    with a `topology`) runs on the entry point's meshes: it gets the entry
    point's `topology` and becomes private (mesh inference gives a callee's
    arguments and results mesh types, which an entry point's users could
    not call). A callee that has another topology already, or is called
    from entry points of different topologies, is an error naming both.
    Functions no `mpmd.call` calls (a `func.call` does not count) are left
    as they are. The topologies' meshes may differ in shape.

    For programs that keep their calls (mesh inference through `mpmd.call`
    needs each callee's topology); `-mpmd-import-pipeline` inlines calls
    instead.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def MapInputOutputToMeshPass : Pass<"mpmd-map-input-output-to-mesh", "ModuleOp"> {
  let summary = "Put the assigned inputs and outputs of entry functions on their meshes.";
  let description = [{
    Only the signature and its boundary: in each public function with a
    `topology`, an input assigned by `input-assignment` (`i@mesh`, or
    `i@mesh#memory_kind` with `device` or `pinned_host`) gets the mesh tensor
    type of that mesh (and memory kind) and is read back as a plain tensor
    by an `mpmd.unassign {origin = "user_in"}` at the top of the body (one
    per input, in input order); an output assigned by `output-assignment` is
    returned through an `mpmd.assign {origin = "user_out"}`. Everything else
    is left as it is, for `-mpmd-infer-mesh-assignment` to place: it reads
    these ops as it reads any other `unassign`/`assign` (an output returned
    through an `assign` keeps that mesh and memory kind), so the two passes
    one after the other give the fragments and transfers that
    `-mpmd-infer-mesh-assignment` gives with the same assignments. Private
    functions are not changed. A matching `mhlo.memory_kind` on an assigned
    input or output is dropped (the type carries it); a different one is an
    error, as is a mesh that is not in the topology, an index past the end
    of the signature, or an input or output that is not a plain ranked
    tensor (already on a mesh, or a token).
  }];
  let options = [
    ListOption<"inputAssignment", "input-assignment", "std::string",
               "Function input index to mesh: i@mesh or i@mesh#memory_kind">,
    ListOption<"outputAssignment", "output-assignment", "std::string",
               "Function output index to mesh: i@mesh or i@mesh#memory_kind">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def FragmentDcePass : Pass<"mpmd-fragment-dce", "func::FuncOp"> {
  let summary = "Remove fragment results, arguments, ops and fragments that nothing needs.";
  let description = [{
    Dead code across fragment boundaries, repeated until nothing changes: a
    fragment result nobody uses is dropped, then the ops of the body that
    only computed it, then block arguments nothing reads (with their
    operands), then fragments and transfers whose results are all unused
    and whose bodies have no side effects. A chain of fragments that only
    fed dropped values goes too.

    StableHLO and CHLO ops count as side-effect free except custom calls,
    send/recv, infeed/outfeed, tokens, collectives, random number
    generation and while loops, which stay. A fragment with result (or
    argument) shardings keeps its results (arguments): the shardings are
    opaque to this pass.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def CopyConstantsPass : Pass<"mpmd-copy-constants", "func::FuncOp"> {
  let summary = "Compute a constant again in each fragment that reads it.";
  let description = [{
    A fragment result that is a constant (its body returns the result of a
    `stablehlo.constant`) is computed again in each fragment that reads it,
    directly or through a chain of transfers (onto another mesh and back
    included): the reader no longer waits for the value to arrive, and XLA
    folds the constant into what reads it. The producer keeps its constant;
    the operands, transfers and results are left as they are (the block
    arguments that received the constant are no longer read), for
    `-mpmd-fragment-dce` to drop.

    Mesh inference already computes an unlabelled constant on every mesh
    that uses it; this is for constants a named computation returns (e.g.
    zeros a stage hands to the next).
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def MergeTransfersPass : Pass<"mpmd-merge-transfers", "func::FuncOp"> {
  let summary = "Send the small values one fragment sends to another mesh's fragment as one.";
  let description = [{
    Every transfer is a message between meshes with a fixed cost however
    small the value. The values of at most `max-elements` elements (of an
    integer or floating-point type, static shape, without sharding or
    memory kind) that one fragment sends to one fragment of another mesh,
    with transfers of one type, are sent as one when there are several:
    the producer also returns them flattened and concatenated
    (`stablehlo.reshape`, `stablehlo.concatenate`), one
    `mpmd.transfer {concat_transfer}` moves that buffer, and the consumer
    takes it as its last operand and slices and reshapes each value back
    (`stablehlo.slice`, `stablehlo.reshape`) where its transfer arrived.
    Fragments with shardings or argument/result attributes are left alone.
    The separate transfers, results and operands stay, for
    `-mpmd-fragment-dce` to drop. Between two fragments of one mesh,
    `-mpmd-pack-fragment-values` packs values the same way.
  }];
  let options = [
    Option<"maxElements", "max-elements", "int64_t", /*default=*/"1",
           "Largest value, in elements, whose transfer is merged">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def EraseUnusedCalleeBlockArgumentsPass
    : Pass<"mpmd-erase-unused-callee-block-arguments", "ModuleOp"> {
  let summary = "Drop the arguments and forwarding results of functions mpmd.call calls.";
  let description = [{
    For a private function that only `mpmd.call` calls: a result that just
    returns an argument is dropped (each call's uses of it read the call's
    operand instead), then the arguments nothing reads any more are dropped
    from the function and from every call. A call of a function left with
    an empty body (no results, nothing to compute) is erased, and so is the
    function. Functions called otherwise, public or uncalled ones are left
    as they are. For programs that keep their calls; the import pipeline
    inlines them.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def CheckInlinablePass : Pass<"mpmd-check-inlinable", "ModuleOp"> {
  let summary = "Reject the ops MLIR's inliner cannot look into (mpmd-opt's -inline runs it first).";
  let description = [{
    MLIR's inliner (`-inline`) reads every symbol use of the module, and
    MLIR cannot read the symbol uses inside an op of no loaded dialect that
    has one region (it might be a symbol table of its own): there the
    inliner crashes. `mpmd-opt` carries StableHLO, CHLO and Shardy ops
    unregistered, so `stablehlo.reduce`, `stablehlo.sort`,
    `stablehlo.all_reduce`, ... are such ops, in a function or in a
    fragment. This pass reports the first of them, with how many more the
    module has, and fails; it changes nothing. `mpmd-opt`'s `-inline` is
    this pass, then MLIR's inliner with the options given to `-inline`.
    `-mpmd-inline-func-calls` inlines `func.call`s without that analysis.
  }];
}

def FragmentDedupPass : Pass<"mpmd-fragment-dedup", "func::FuncOp"> {
  let summary = "Read each fragment operand once and use each returned value once.";
  let description = [{
    A value passed to a fragment at several positions is read inside the
    body through the block argument of its first position; a value the body
    returns at several positions with the same result type is used outside
    through its first result. The duplicates are left unused, for
    `-mpmd-fragment-dce` to drop. Operands or results whose types differ
    (e.g. other shardings of the same tensor) are not duplicates.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def RemoveTransferCyclesPass : Pass<"mpmd-remove-transfer-cycles", "func::FuncOp"> {
  let summary = "Use the value a chain of transfers brings back where it already was.";
  let description = [{
    A chain of transfers that brings a value back to a mesh tensor type it
    already had (`m1 -> m2 -> m3 -> m1`, same sharding and memory kind) is
    cut: the uses of the transfer that closes the cycle take the value that
    left, and the replaced transfers are erased (others left unused are
    `-mpmd-fragment-dce`'s). A chain through host memory (a memory kind other
    than "device") is kept: that round trip is an offload.
  }];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

def RuleBasedSchedulePass : Pass<"mpmd-rule-based-schedule", "func::FuncOp"> {
  let summary = "Run given fragments one after another (Shardy's rules).";
  let description = [{
    Each rule, in Shardy's notation, is a chain of fragments to run in that
    order:
    `FragmentScheduleRule(ordered_fragments=[FragmentInfo(origins=["f"],mesh_name="m1",call_counter=0)->FragmentInfo(origins=["g"(1)],mesh_name="m1")])`
    (rules separated by `,`). A `FragmentInfo` names one fragment by its
    origins (in order, with transpose counts), mesh and, when given, call
    counter and stage; one that names several fragments is an error, one
    that names none is left out of its chain (a rule may be written for
    several programs). The function's ops are then put in an order that
    keeps every data dependency and every chain, otherwise as close to the
    order they had as possible. A link that contradicts the data (the later
    fragment computes what the earlier one reads) is not applied, with a
    warning naming both fragments.

    Our own schedules order scheduling units per mesh
    (`-mpmd-pipeline-schedule`, `mpmd.schedule`); this pass reads Shardy's
    programs and rules.
  }];
  let options = [
    Option<"rules", "rules", "std::string", /*default=*/"\"\"",
           "FragmentScheduleRule(ordered_fragments=[FragmentInfo(...)->...]), separated by ','">,
  ];
  let dependentDialects = ["::mlir::mpmd::MpmdDialect"];
}

#endif // MPMD_COMPAT_PASSES_TD
