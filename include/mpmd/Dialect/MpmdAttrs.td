//===- MpmdAttrs.td - mpmd attributes ----------------------*- tablegen -*-===//

#ifndef MPMD_DIALECT_MPMDATTRS_TD
#define MPMD_DIALECT_MPMDATTRS_TD

include "mpmd/Dialect/MpmdBase.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Meshes and topology
//===----------------------------------------------------------------------===//

def Mpmd_MeshAxisAttr : Mpmd_Attr<"MeshAxis", "mesh_axis"> {
  let summary = "A named axis of a mesh with its size.";
  let description = [{ Printed as `"x"=4` inside a mesh. }];
  let parameters = (ins StringRefParameter<"axis name">:$name,
                        "int64_t":$size);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Mpmd_MeshAttr : Mpmd_Attr<"Mesh", "mesh"> {
  let summary = "The shape of a device mesh: named axes and sizes.";
  let description = [{
    Same textual form as Shardy's mesh: `<["x"=2, "y"=4]>`, optionally
    followed by `device_ids=[...]`. The number of devices is the product of
    the axis sizes.
  }];
  let parameters = (ins
    OptionalArrayRefParameter<"MeshAxisAttr">:$axes,
    OptionalArrayRefParameter<"int64_t">:$device_ids);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Number of devices of the mesh (product of axis sizes).
    int64_t getNumDevices() const;
    /// Size of the axis named `name`, or std::nullopt if the mesh has none.
    std::optional<int64_t> getAxisSize(llvm::StringRef name) const;
  }];
}

def Mpmd_NamedMeshAttr : Mpmd_Attr<"NamedMesh", "named_mesh"> {
  let summary = "A mesh with a name.";
  let parameters = (ins StringRefParameter<"mesh name">:$name,
                        "MeshAttr":$mesh);
  let assemblyFormat = "`<` $name `:` $mesh `>`";
}

def Mpmd_TopologyAttr : Mpmd_Attr<"Topology", "topology"> {
  let summary = "The ordered list of meshes of an MPMD program.";
  let description = [{
    `#mpmd.topology<<"m0" : <["x"=4]>>, <"m1" : <["x"=4]>>>`. The order is the
    mesh index used by schedules. Mesh names are unique.
  }];
  let parameters = (ins ArrayRefParameter<"NamedMeshAttr">:$meshes);
  let assemblyFormat = "`<` $meshes `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The mesh called `name`, or null.
    MeshAttr getMesh(llvm::StringRef name) const;
  }];
}

//===----------------------------------------------------------------------===//
// Origins
//===----------------------------------------------------------------------===//

def Mpmd_UserOriginAttr : Mpmd_Attr<"UserOrigin", "user_origin"> {
  let summary = "Identity of a named computation: name and transpose count.";
  let description = [{
    `#mpmd.user_origin<"stage0"(1)>`: the computation the user named
    `stage0`, transposed once by automatic differentiation (its backward).
    A transpose count of 0 is not printed. Inside fragment origins the short
    form `"stage0"(1)` is used.
  }];
  let parameters = (ins StringRefParameter<"user name">:$user_name,
                        DefaultValuedParameter<"int64_t", "0">:$transpose_count);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Mpmd_OriginAttr : Mpmd_Attr<"Origin", "origin"> {
  let summary = "Debug label of where a mesh assignment came from.";
  let parameters = (ins StringRefParameter<"origin label">:$origin_label);
  let assemblyFormat = "`<` $origin_label `>`";
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

def Mpmd_ReductionType : I32EnumAttr<"ReductionType", "cross-mesh reduction kind", [
    I32EnumAttrCase<"kNone", 0, "none">,
    I32EnumAttrCase<"kAdd", 1, "add">,
    I32EnumAttrCase<"kMax", 2, "max">,
    I32EnumAttrCase<"kMin", 3, "min">,
    I32EnumAttrCase<"kMul", 4, "mul">,
    I32EnumAttrCase<"kOr", 5, "or">,
    I32EnumAttrCase<"kAnd", 6, "and">]> {
  let cppNamespace = "::mlir::mpmd";
  let genSpecializedAttr = 0;
}

def Mpmd_ReductionAttr : Mpmd_Attr<"Reduction", "reduction"> {
  let summary = "A cross-mesh reduction kind: `#mpmd.reduction<add>`.";
  let parameters = (ins EnumParameter<Mpmd_ReductionType>:$reduction_type);
  let assemblyFormat = "`<` $reduction_type `>`";
  let constBuilderCall = "::mlir::mpmd::ReductionAttr::get($_builder.getContext(), $0)";
}

//===----------------------------------------------------------------------===//
// Shardings (Shardy's textual form, parsed only inside mesh tensor types)
//===----------------------------------------------------------------------===//

def Mpmd_AxisRefAttr : Mpmd_Attr<"AxisRef", "axis_ref"> {
  let summary = "A mesh axis or sub-axis of a sharding.";
  let parameters = (ins StringRefParameter<"axis name">:$name,
                        DefaultValuedParameter<"int64_t", "0">:$pre_size,
                        DefaultValuedParameter<"int64_t", "0">:$size);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    bool isSubAxis() const { return getSize() != 0; }
  }];
}

def Mpmd_DimShardingAttr : Mpmd_Attr<"DimSharding", "dim_sharding"> {
  let summary = "Sharding of one tensor dimension.";
  let parameters = (ins OptionalArrayRefParameter<"AxisRefAttr">:$axes,
                        "bool":$is_closed,
                        DefaultValuedParameter<"int64_t", "-1">:$priority);
  let hasCustomAssemblyFormat = 1;
}

def Mpmd_TensorShardingAttr : Mpmd_Attr<"TensorSharding", "sharding"> {
  let summary = "SPMD sharding of a tensor over a mesh (Shardy's form).";
  let description = [{
    Shardy's textual form, e.g. `<@mesh, [{"x"}, {?} ], replicated={"y"}>`:
    per dimension, the mesh axes it is split over; `?` marks an open
    dimension; then axes the tensor is explicitly replicated or unreduced on.
  }];
  let parameters = (ins StringRefParameter<"mesh symbol">:$mesh_name,
                        OptionalArrayRefParameter<"DimShardingAttr">:$dims,
                        OptionalArrayRefParameter<"AxisRefAttr">:$replicated,
                        OptionalArrayRefParameter<"AxisRefAttr">:$unreduced);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    /// Whether no dimension is split over any axis.
    bool isFullyReplicated() const;
  }];
}

#endif // MPMD_DIALECT_MPMDATTRS_TD
