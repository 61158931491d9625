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

    ```mlir
    %1 = mpmd.named_computation<"stage0"(1)> (%arg0) (%arg1: tensor<4x8xf32>) {
      %2 = stablehlo.add %arg1, %arg1 : tensor<4x8xf32>
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
}

def Mpmd_NamedTensorOp : Mpmd_Op<"named_tensor",
    [Pure, AllTypesMatch<["tensor", "result"]>]> {
  let summary = "Names a value so that it can be assigned to a mesh.";
  let description = [{
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
    ```mlir
    %1 = mpmd.broadcast %0 : tensor<4x8xf32>
    ```
    The transpose of a broadcast is an `mpmd.reduce<add>`.
  }];
  let arguments = (ins AnyTensor:$tensor);
  let results = (outs AnyTensor:$result);
  let assemblyFormat = "attr-dict $tensor `:` type($tensor)";
}

def Mpmd_ReduceOp : Mpmd_Op<"reduce", [Pure]> {
  let summary = "Cross-mesh reduction of values.";
  let description = [{
    ```mlir
    %2 = mpmd.reduce<add> %0, %1 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    ```
    `none` means all operands hold the same value; it takes exactly one.
  }];
  let arguments = (ins Variadic<AnyTensor>:$tensors,
                       DefaultValuedAttr<Mpmd_ReductionAttr,
                         "::mlir::mpmd::ReductionType::kNone">:$reduction);
  let results = (outs AnyTensor:$result);
  let assemblyFormat =
      "`` $reduction attr-dict $tensors `:` functional-type($tensors, results)";
  let hasVerifier = 1;
}

def Mpmd_CallOp : Mpmd_Op<"call", [DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "Calls an MPMD function (one microbatch or loop body).";
  let description = [{
    ```mlir
    %1 = mpmd.call @microbatch(%0) {call_counter = 0 : ui32} : (tensor<4xf32>) -> tensor<4xf32>
    ```
    The discardable `call_counter` (ui32) identifies the microbatch.
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
    ```mlir
    %0:2 = mpmd.for (%a, %b) {iterations = 3 : ui32, unroll_factor = 3 : ui32}
        (%x: tensor<4xf32>, %y: tensor<4xf32>, %index: tensor<ui32>) {
      mpmd.return %x, %y : tensor<4xf32>, tensor<4xf32>
    } : tensor<4xf32>, tensor<4xf32>
    ```
    The block takes the carried values and a trailing `tensor<ui32>` index.
  }];
  let arguments = (ins Variadic<AnyType>:$tensors, UI32Attr:$iterations,
                       OptionalAttr<UI32Attr>:$unroll_factor);
  let results = (outs Variadic<AnyType>:$results);
  let regions = (region SizedRegion<1>:$region);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Mesh-level program
//===----------------------------------------------------------------------===//

def Mpmd_FragmentOp : Mpmd_Op<"fragment", [IsolatedFromAbove, SingleBlock]> {
  let summary = "An SPMD computation placed on one mesh.";
  let description = [{
    Operands and results are `!mpmd.mesh_tensor`s of the fragment's mesh; the
    block arguments and returned values are their global tensor types. An
    empty `origin` marks a fragment inferred by the compiler.

    ```mlir
    %1 = mpmd.fragment<mesh="m0", origin=["stage0"(1)], stage=0> (%0) (%a: tensor<4xf32>) {
      mpmd.return %a : tensor<4xf32>
    } : (!mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m0", tensor<4xf32>>
    ```
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
    ```mlir
    %1 = mpmd.fragment_call<mesh="m0", origin=["stage0"]> @p0_stage0_fwd(%0)
        : (!mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m0", tensor<4xf32>>
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
    ```mlir
    %1 = mpmd.transfer %0 : (!mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    ```
  }];
  let arguments = (ins AnyType:$tensor);
  let results = (outs AnyType:$result);
  let assemblyFormat = "attr-dict $tensor `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mpmd_AssignOp : Mpmd_Op<"assign", [Pure,
    ParentOneOf<["::mlir::func::FuncOp", "ForOp"]>]> {
  let summary = "Places a local tensor on a mesh (temporary, during import).";
  let arguments = (ins AnyType:$tensor, OptionalAttr<StrAttr>:$origin);
  let results = (outs AnyType:$result);
  let assemblyFormat = "attr-dict $tensor `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mpmd_UnassignOp : Mpmd_Op<"unassign", [Pure,
    ParentOneOf<["::mlir::func::FuncOp", "ForOp"]>]> {
  let summary = "Takes a mesh tensor back to a local tensor (temporary).";
  let arguments = (ins AnyType:$tensor, OptionalAttr<StrAttr>:$origin);
  let results = (outs AnyType:$result);
  let assemblyFormat = "attr-dict $tensor `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Mpmd_ReturnOp : Mpmd_Op<"return", [Pure, Terminator, ReturnLike,
    ParentOneOf<["NamedComputationOp", "FragmentOp", "ForOp"]>]> {
  let summary = "Terminates the body of a named computation, fragment or loop.";
  let arguments = (ins Variadic<AnyType>:$results);
  // Same format as jaxlib's (an empty return prints a trailing space there).
  let assemblyFormat = "attr-dict $results (`:` type($results)^)?";
  let builders = [OpBuilder<(ins), [{ build($_builder, $_state, ::mlir::ValueRange()); }]>];
}

#endif // MPMD_DIALECT_MPMDOPS_TD
