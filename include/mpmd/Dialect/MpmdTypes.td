//===- MpmdTypes.td - mpmd types ---------------------------*- tablegen -*-===//

#ifndef MPMD_DIALECT_MPMDTYPES_TD
#define MPMD_DIALECT_MPMDTYPES_TD

include "mpmd/Dialect/MpmdAttrs.td"
include "mlir/IR/BuiltinTypeInterfaces.td"

def Mpmd_MeshTensorType : Mpmd_Type<"MeshTensor", "mesh_tensor"> {
  let summary = "A tensor placed on a named mesh.";
  let description = [{
    `!mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?} ]>,
    memory_kind="pinned_host">`: the global tensor type, the mesh it lives on,
    its optional SPMD sharding over that mesh (absent: fully replicated) and
    optional memory kind.
  }];
  let parameters = (ins
    StringRefParameter<"mesh name">:$mesh_name,
    "::mlir::RankedTensorType":$ranked_tensor_type,
    OptionalParameter<"TensorShardingAttr">:$sharding,
    OptionalParameter<"::mlir::StringAttr">:$memory_kind);
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
    /// Checks the sharding against `mesh`; reports through `emitError`.
    ::mlir::LogicalResult verifyForMesh(MeshAttr mesh,
        ::llvm::function_ref<::mlir::InFlightDiagnostic()> emitError) const;
  }];
}

#endif // MPMD_DIALECT_MPMDTYPES_TD
