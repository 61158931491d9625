//===- MpmdOps.td - mpmd operations ------------------------*- tablegen -*-===//
//
// Operations of the mpmd dialect. Names, attribute names and custom assembly
// match the dialect jaxlib ships bindings for, so modules built by
// `jax.extend.mlir.dialects.mpmd` parse here and what we print parses there.
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_DIALECT_MPMDOPS_TD
#define MPMD_DIALECT_MPMDOPS_TD

include "mpmd/Dialect/MpmdBase.td"
include "mpmd/Dialect/MpmdAttrs.td"
include "mpmd/Dialect/MpmdTypes.td"
include "mlir/IR/OpAsmInterface.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Mpmd_UserOriginArrayAttr
    : TypedArrayAttrBase<Mpmd_UserOriginAttr, "array of user origins">;

//===----------------------------------------------------------------------===//
// User-level labels
//===----------------------------------------------------------------------===//

def Mpmd_NamedComputationOp : Mpmd_Op<"named_computation",
    [IsolatedFromAbove, SingleBlock]> {
  let summary = "A sub-computation the user named, to be placed on a mesh.";
  let description = [{
    Labels a region of computation with a name (and the number of times
    automatic differentiation transposed it). Import maps each name to a mesh
    (and optionally a stage) and turns the op into an `mpmd.fragment`.

    The region is isolated from above: it takes its inputs as block
    arguments, whose types equal the operand types, and returns values of
    the result types with `mpmd.return`. Operands and results are local
    tensors (or tokens), never mesh tensors.

    ```mlir
    %1 = mpmd.named_computation<"stage0"(1)> (%arg0) (%arg1: tensor<4x8xf32>) {
      %2 = "stablehlo.add"(%arg1, %arg1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
      mpmd.return %2 : tensor<4x8xf32>
    } : (tensor<4x8xf32>) -> tensor<4x8xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$tensors,
                       Mpmd_UserOriginAttr:$origin);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$region);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

def Mpmd_NamedTensorOp : Mpmd_Op<"named_tensor",
    [Pure, AllTypesMatch<["tensor", "result"]>]> {
  let summary = "Names a value so that it can be assigned to a mesh.";
  let description = [{
    An identity on a local tensor that gives it a name. Import places the
    value on the mesh assigned to that name (as an `mpmd.assign` /
    `mpmd.unassign` pair), or drops the op when the name is not assigned.

    ```mlir
    %1 = mpmd.named_tensor %0 name="activations" : tensor<4x8xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$tensor, StrAttr:$name);
  let results = (outs AnyTensor:$result);
  let assemblyFormat = "$tensor `name` `` `=` `` $name attr-dict `:` type($tensor)";
  let hasVerifier = 1;
}

def Mpmd_BroadcastOp : Mpmd_Op<"broadcast",
    [Pure, AllTypesMatch<["tensor", "result"]>]> {
  let summary = "A value that may be made available on any mesh that uses it.";
  let description = [{
    An identity on a local tensor that lets mesh inference copy the value to
    every mesh that uses it (from the mesh it is computed on), instead of
    assigning it to one mesh.

    ```mlir
    %1 = mpmd.broadcast %0 : tensor<4x8xf32>
    ```

    The transpose of a broadcast is an `mpmd.reduce<add>`. Canonicalization
    folds `broadcast(broadcast(x))` into `broadcast(x)`.
  }];
  let arguments = (ins AnyTensor:$tensor);
  let results = (outs AnyTensor:$result);
  let assemblyFormat = "attr-dict $tensor `:` type($tensor)";
  let hasCanonicalizer = 1;
}

def Mpmd_ReduceOp : Mpmd_Op<"reduce", [Pure]> {
  let summary = "Cross-mesh reduction of values.";
  let description = [{
    Combines values that may be computed on different meshes with the
    reduction `reduction` (see `#mpmd.reduction`); mesh inference decides
    where the partial values and the result live. All operands have the
    result type.

    ```mlir
    %2 = mpmd.reduce<add> %0, %1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    %3 = mpmd.reduce<none> %2 : (tensor<4x8xf32>) -> tensor<4x8xf32>
    ```

    `none` (the default) means the value is the same wherever it is
    computed; it takes exactly one operand.

    Canonicalization flattens chains: `reduce<K>(reduce<K>(a, b), c)`
    becomes `reduce<K>(a, b, c)` when the inner reduce has no other use, and
    `reduce<none>(reduce<K>(...))` becomes `reduce<K>(...)`.
  }];
  let arguments = (ins Variadic<AnyTensor>:$tensors,
                       DefaultValuedAttr<Mpmd_ReductionAttr,
                         "::mlir::mpmd::ReductionType::kNone">:$reduction);
  let results = (outs AnyTensor:$result);
  let assemblyFormat =
      "`` $reduction attr-dict $tensors `:` functional-type($tensors, results)";
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

def Mpmd_CallOp : Mpmd_Op<"call", [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Calls an MPMD function (one microbatch or loop body).";
  let description = [{
    Calls a `func.func` of the module (typically one microbatch of a
    pipelined step, or a loop body) with local or mesh tensors; the operand
    and result types equal the callee's signature. Inlining copies the
    call's attributes onto the fragments of the callee.

    ```mlir
    %1 = mpmd.call @microbatch(%0) {call_counter = 0 : ui32} : (tensor<4xf32>) -> tensor<4xf32>
    ```

    The discardable `call_counter` (ui32) identifies the microbatch. A call
    is made in a function body or an `mpmd.for` body, not inside an op of
    another dialect; in a function with a `topology`, only the entry point
    (a public function) makes calls.
  }];
  let arguments = (ins Variadic<AnyType>:$tensors, FlatSymbolRefAttr:$callee);
  let results = (outs Variadic<AnyType>:$results);
  let assemblyFormat =
      "$callee `(` $tensors `)` attr-dict `:` functional-type($tensors, results)";
  let hasVerifier = 1;
}

def Mpmd_ForOp : Mpmd_Op<"for", [SingleBlock,
    DeclareOpInterfaceMethods<OpAsmOpInterface, ["getAsmBlockArgumentNames"]>]> {
  let summary = "A loop with a fixed number of iterations, to be unrolled.";
  let description = [{
    Runs its body `iterations` times, threading the carried values through
    the iterations; the results are the values after the last one. The
    block takes the carried values and a trailing `tensor<ui32>` iteration
    index, and returns the next carried values with `mpmd.return`. The
    carried values are all local tensors or all mesh tensors, and the result
    types equal the operand types.

    ```mlir
    %0:2 = mpmd.for (%a, %b) {iterations = 3 : ui32, unroll_factor = 3 : ui32}
        (%x: tensor<4xf32>, %y: tensor<4xf32>, %index: tensor<ui32>) {
      mpmd.return %x, %y : tensor<4xf32>, tensor<4xf32>
    } : tensor<4xf32>, tensor<4xf32>
    ```

    `unroll_factor`, when given, divides `iterations`: the body is
    replicated that many times.
  }];
  let arguments = (ins Variadic<AnyType>:$tensors, UI32Attr:$iterations,
                       OptionalAttr<UI32Attr>:$unroll_factor);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$region);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Mesh-level program
//===----------------------------------------------------------------------===//

def Mpmd_FragmentOp : Mpmd_Op<"fragment", [IsolatedFromAbove, SingleBlock]> {
  let summary = "An SPMD computation placed on one mesh.";
  let description = [{
    A computation that runs as one SPMD program on mesh `mesh` of the
    topology. Operands and results are `!mpmd.mesh_tensor`s of that mesh (or
    tokens); the block arguments and returned values are their global tensor
    types, and the region is isolated from above. `origin` lists the named
    computations merged into the fragment (empty: inferred by the compiler),
    `stage` its pipeline stage, and `in_shardings` / `out_shardings` optional
    Shardy shardings of the block arguments / results. Discardable
    attributes (e.g. `call_counter`) are printed between the operands and
    the block arguments.

    ```mlir
    %1 = mpmd.fragment<mesh="m0", origin=["stage0"(1)], stage=0> (%0) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
      %2 = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
      mpmd.return %2 : tensor<4xf32>
    } : (!mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m0", tensor<4xf32>>
    ```

    Canonicalization forwards the uses of a result that just returns a block
    argument of the same type as its operand to the operand; the result stays
    (-mpmd-fragment-dce drops results nobody uses).
  }];
  let arguments = (ins Variadic<AnyType>:$inputs,
                       Mpmd_UserOriginArrayAttr:$origin,
                       StrAttr:$mesh_name,
                       OptionalAttr<I64Attr>:$stage_id,
                       OptionalAttr<AnyAttr>:$in_shardings,
                       OptionalAttr<AnyAttr>:$out_shardings);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$region);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let hasCanonicalizer = 1;
  let extraClassDeclaration = [{
    /// Whether the user named this computation (it has an origin).
    bool isUserFragment() { return !getOrigin().empty(); }
    /// The terminator of the body.
    Operation *getTerminator() { return getRegion().front().getTerminator(); }
  }];
}

def Mpmd_FragmentCallOp : Mpmd_Op<"fragment_call",
    [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Calls an exported fragment function on a mesh.";
  let description = [{
    A fragment whose body was outlined into a function by export: runs the
    SPMD program `callee` on mesh `mesh` with mesh tensors of that mesh.
    `origin` is the origin list of the fragment it came from.

    ```mlir
    %1 = mpmd.fragment_call<mesh="m0", origin=["stage0"]> @p0_stage0_fwd.step(%0)
        : (!mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m0", tensor<4xf32>>
    func.func @p0_stage0_fwd.step(%arg0: tensor<4xf32>) -> tensor<4xf32>
        attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
      return %arg0 : tensor<4xf32>
    }
    ```

    The callee is a `func.func` with a `mesh_shape` attribute: the fragment
    body in the global view (XLA partitions it over the mesh), so its
    signature uses the global tensor types of the operands and results.
  }];
  let arguments = (ins Variadic<AnyType>:$tensors,
                       Mpmd_UserOriginArrayAttr:$origin,
                       StrAttr:$mesh_name,
                       FlatSymbolRefAttr:$callee);
  let results = (outs Variadic<AnyType>:$results);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

def Mpmd_TransferOp : Mpmd_Op<"transfer", [Pure]> {
  let summary = "Moves a value to another mesh (or reshards it in place).";
  let description = [{
    Copies a mesh tensor to another mesh (inter-mesh transfer), or reshards
    it or changes its memory kind on the same mesh (intra-mesh). The global
    tensor type is kept; both meshes are in the topology and memory kinds are
    `device` or `pinned_host`.

    ```mlir
    %1 = mpmd.transfer %0 : (!mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    %2 = mpmd.transfer %1 : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>)
        -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"} ]>>
    ```

    Canonicalization removes transfers whose result type is their operand
    type, and folds `transfer(transfer(x))` into `x` (same type) or a single
    transfer from `x` when `x`, the intermediate value and the result are
    all on one mesh. Chains through another mesh (m1 -> m2 -> m1) are kept,
    as in Shardy: they are explicit cross-mesh copies.
  }];
  let arguments = (ins AnyType:$tensor);
  let results = (outs AnyType:$result);
  let assemblyFormat = "attr-dict $tensor `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasCanonicalizer = 1;
}

def Mpmd_AssignOp : Mpmd_Op<"assign", [Pure,
    ParentOneOf<["::mlir::func::FuncOp", "ForOp"]>]> {
  let summary = "Places a local tensor on a mesh (temporary, during import).";
  let description = [{
    Turns a local tensor into a fully replicated mesh tensor of the same
    global type on a mesh of the topology. Import introduces it at the
    boundaries of mesh assignments and removes it once function arguments
    and results are mesh tensors. `origin` optionally names what decided the
    assignment (e.g. a named computation).

    ```mlir
    %1 = mpmd.assign {origin = "stage0"} %0 : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m0", tensor<4xf32>>
    ```

    `assign(unassign(x))` across two meshes is an `mpmd.transfer`.
  }];
  let arguments = (ins AnyType:$tensor, OptionalAttr<StrAttr>:$origin);
  let results = (outs AnyType:$result);
  let assemblyFormat = "attr-dict $tensor `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mpmd_UnassignOp : Mpmd_Op<"unassign", [Pure,
    ParentOneOf<["::mlir::func::FuncOp", "ForOp"]>]> {
  let summary = "Takes a mesh tensor back to a local tensor (temporary).";
  let description = [{
    The inverse of `mpmd.assign`: the local tensor of the global type of a
    mesh tensor. Temporary, during import.

    ```mlir
    %2 = mpmd.unassign {origin = "stage0"} %1 : (!mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> tensor<4xf32>
    ```
  }];
  let arguments = (ins AnyType:$tensor, OptionalAttr<StrAttr>:$origin);
  let results = (outs AnyType:$result);
  let assemblyFormat = "attr-dict $tensor `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mpmd_ReturnOp : Mpmd_Op<"return", [Pure, Terminator, ReturnLike,
    ParentOneOf<["NamedComputationOp", "FragmentOp", "ForOp"]>]> {
  let summary = "Terminates the body of a named computation, fragment or loop.";
  let description = [{
    Returns the values of the enclosing `mpmd.named_computation`,
    `mpmd.fragment` or `mpmd.for` (the next carried values of a loop).

    ```mlir
    mpmd.return %0, %1 : tensor<4xf32>, tensor<4xf32>
    mpmd.return
    ```
  }];
  let arguments = (ins Variadic<AnyType>:$results);
  // Same format as jaxlib's (an empty return prints a trailing space there).
  let assemblyFormat = "attr-dict $results (`:` type($results)^)?";
  let builders = [OpBuilder<(ins), [{ build($_builder, $_state, ::mlir::ValueRange()); }]>];
}

#endif // MPMD_DIALECT_MPMDOPS_TD
