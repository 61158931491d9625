//===- MpmdTypes.td - mpmd types ---------------------------*- tablegen -*-===//

#ifndef MPMD_DIALECT_MPMDTYPES_TD
#define MPMD_DIALECT_MPMDTYPES_TD

include "mpmd/Dialect/MpmdAttrs.td"
include "mlir/IR/BuiltinTypeInterfaces.td"

def Mpmd_MeshTensorType : Mpmd_Type<"MeshTensor", "mesh_tensor"> {
  let summary = "A tensor placed on a named mesh.";
  let description = [{
    A value of a ranked tensor type (its global type) that lives on the mesh
    named `mesh_name` of the enclosing function's topology, with an optional
    SPMD sharding over that mesh (absent: fully replicated; Shardy's
    textual form, see `#mpmd.sharding`) and an optional memory kind
    (`device`, `pinned_host` or `unpinned_host`).

    ```mlir
    !mpmd.mesh_tensor<"m1", tensor<4x8xf32>>
    !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?} ]>>
    !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?} ]>, memory_kind="pinned_host">
    ```

    The per-device (local) shape divides each dimension by the sizes of the
    mesh axes it is split over, rounding up: on a mesh `<["x"=2]>`, the
    second type above is `tensor<2x8xf32>` per device. The type is checked
    where it is used (as in Shardy): the ops that carry it (fragments,
    transfers, assign, unassign) report a sharding of another rank than the
    tensor's, an unknown memory kind, an axis their mesh lacks or a
    dimension its axes do not divide; every pass reports them in a
    function's signature.
  }];
  let parameters = (ins
    StringRefParameter<"mesh name">:$mesh_name,
    TypeParameter<"::mlir::RankedTensorType", "global tensor type">:$ranked_tensor_type,
    OptionalParameter<"TensorShardingAttr", "SPMD sharding (absent: replicated)">:$sharding,
    OptionalParameter<"::mlir::StringAttr", "memory kind (absent: default)">:$memory_kind);
  let builders = [
    TypeBuilder<(ins "::llvm::StringRef":$meshName,
                     "::mlir::RankedTensorType":$type), [{
      return $_get($_ctxt, meshName, type, TensorShardingAttr(), StringAttr());
    }]>
  ];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The global (unsharded) tensor type.
    ::mlir::RankedTensorType getGlobalTensorType() const { return getRankedTensorType(); }
    /// The per-device shard type on `mesh` (the global type when replicated).
    ::mlir::RankedTensorType getLocalTensorType(MeshAttr mesh) const;
    /// Checks what the type says on its own: a sharding of the tensor's rank
    /// and a known memory kind; reports through `emitError`. (Parsing and
    /// `get` accept any: the ops that use the type report it.)
    ::mlir::LogicalResult verifyLayout(
        ::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError) const;
    /// Checks the type where it is used on `mesh`: `verifyLayout`, then the
    /// sharding's axes and divisibility against `mesh`.
    ::mlir::LogicalResult verifyForMesh(MeshAttr mesh,
        ::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError) const;
  }];
}

#endif // MPMD_DIALECT_MPMDTYPES_TD
