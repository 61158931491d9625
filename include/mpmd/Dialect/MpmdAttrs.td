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
  let description = [{
    One axis of a device mesh: a non-empty name and a positive number of
    devices along it. Inside a mesh it is written `"name"=size`:

    ```mlir
    #mpmd.mesh<["data"=2, "model"=4]>
    ```

    has two axes, `"data"` of size 2 and `"model"` of size 4. Standalone it
    is `#mpmd.mesh_axis<"data"=2>`.
  }];
  let parameters = (ins StringRefParameter<"axis name">:$name,
                        AttrParameter<"int64_t", "number of devices along the axis">:$size);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Mpmd_MeshAttr : Mpmd_Attr<"Mesh", "mesh"> {
  let summary = "The shape of a device mesh: named axes and sizes.";
  let description = [{
    The logical shape of the devices of one mesh: an ordered list of named
    axes, optionally followed by an explicit device order. Same textual form
    as Shardy's `#sdy.mesh` body, which is how it appears in a topology:

    ```mlir
    #mpmd.mesh<["x"=2, "y"=4]>
    #mpmd.mesh<["x"=2], device_ids=[1, 0]>
    #mpmd.mesh<[]>
    ```

    The number of devices is the product of the axis sizes (1 for no axis);
    axis names are unique, and `device_ids`, when given, lists exactly that
    many devices.
  }];
  let parameters = (ins
    OptionalArrayRefParameter<"MeshAxisAttr", "axes, major to minor">:$axes,
    OptionalArrayRefParameter<"int64_t", "explicit device order (empty: iota)">:$device_ids);
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
  let description = [{
    One element of a topology: the mesh name that mesh tensors, fragments and
    transfers refer to, and its shape.

    ```mlir
    #mpmd.named_mesh<"stage0" : <["x"=4]>>
    ```
  }];
  let parameters = (ins StringRefParameter<"mesh name">:$name,
                        AttrParameter<"MeshAttr", "shape of the mesh">:$mesh);
  let assemblyFormat = "`<` $name `:` $mesh `>`";
}

def Mpmd_TopologyAttr : Mpmd_Attr<"Topology", "topology"> {
  let summary = "The ordered list of meshes of an MPMD program.";
  let description = [{
    The meshes an MPMD program runs on, attached to its `func.func` as the
    `topology` attribute. The order is the mesh index used by schedules and
    by device numbering; mesh names are unique and there is at least one
    mesh.

    ```mlir
    func.func @main(%arg0: !mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
        attributes {topology = #mpmd.topology<<"m0" : <["x"=4]>>, <"m1" : <["x"=4]>>>} {
      %0 = mpmd.transfer %arg0 : (!mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
      return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    }
    ```
  }];
  let parameters = (ins ArrayRefParameter<"NamedMeshAttr", "meshes, in mesh-index order">:$meshes);
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
    Identifies a computation the user named (`mpmd.named_computation`) and
    how many times automatic differentiation transposed it: 0 for the
    forward computation, 1 for its backward, and so on.

    ```mlir
    #mpmd.user_origin<"stage0">      // forward (a count of 0 is not printed)
    #mpmd.user_origin<"stage0"(1)>   // its transpose (backward)
    ```

    Named computations carry one; fragments and fragment calls carry a list
    (the computations merged into them), written in the short form
    `origin=["stage0", "stage0"(1)]`.
  }];
  let parameters = (ins StringRefParameter<"user name">:$user_name,
                        DefaultValuedParameter<"int64_t", "0", "number of AD transposes">:$transpose_count);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Mpmd_OriginAttr : Mpmd_Attr<"Origin", "origin"> {
  let summary = "Debug label of where a mesh assignment came from.";
  let description = [{
    A human-readable label recording why a value or an op was assigned to a
    mesh (mesh inference uses labels such as `user_in`, `inferred_out`,
    `transfer` or `broadcast`). It is only used for debugging and in
    diagnostics.

    ```mlir
    #mpmd.origin<"user_in">
    ```

    Inside `#mpmd.mesh_with_origins` / `#mpmd.meshes_with_origins` an origin
    is written as its bare string: `"m1"["user_in", "transfer"]`.

    Compatibility note: jaxlib's assembly format for this attribute has no
    angle brackets, so it prints a standalone origin as
    `#mpmd.origin"user_in"`, which no MLIR parser can read back (only a
    `<...>` body may follow a dialect attribute name). We print the
    bracketed form above and accept both; inside meshes-with-origins lists,
    where the attribute is actually exchanged, both dialects use the bare
    string.
  }];
  let parameters = (ins StringRefParameter<"origin label">:$origin_label);
  let hasCustomAssemblyFormat = 1;
}

def Mpmd_MeshWithOriginsAttr : Mpmd_Attr<"MeshWithOrigins", "mesh_with_origins"> {
  let summary = "A mesh name with the origins that placed a value there.";
  let description = [{
    A mesh name (or the wildcard `"*"`, any mesh) and the optional list of
    `#mpmd.origin` labels that explain why a value is on that mesh. It is the
    element of `#mpmd.meshes_with_origins`, where it is written without the
    attribute name:

    ```mlir
    #mpmd.meshes_with_origins<"m1", "m2"["user_in", "transfer"]>
    ```

    holds two of them: `"m1"` without origins, and `"m2"` with two.

    Standalone, it is printed `#mpmd.mesh_with_origins<"m2"["user_in"]>`.
    jaxlib prints it `#mpmd.mesh_with_origins"m2"["user_in"]`, a form no MLIR
    parser (jaxlib's included) can read back; we accept both bodies. An empty
    origin list `"m1"[]` is rejected, as in jaxlib: write `"m1"`.
  }];
  let parameters = (ins
    StringRefParameter<"mesh name, or \"*\" for any mesh">:$mesh_name,
    OptionalArrayRefParameter<"OriginAttr", "origin labels (may be empty)">:$origins);
  let builders = [
    AttrBuilder<(ins "::llvm::StringRef":$meshName), [{
      return $_get($_ctxt, meshName, ::llvm::ArrayRef<OriginAttr>());
    }]>
  ];
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    /// Whether this is the wildcard mesh `"*"` (any mesh).
    bool isWildcard() const { return getMeshName() == "*"; }
    /// Parses the form used inside `#mpmd.meshes_with_origins`:
    /// `"m1"` or `"m1"["origin", ...]`.
    static MeshWithOriginsAttr parseShort(::mlir::AsmParser &parser);
    /// Prints the form used inside `#mpmd.meshes_with_origins`.
    void printShort(::mlir::AsmPrinter &printer) const;
  }];
}

def Mpmd_MeshesWithOriginsAttr : Mpmd_Attr<"MeshesWithOrigins", "meshes_with_origins"> {
  let summary = "A list of meshes, each with its origins (mesh-inference use/src sets).";
  let description = [{
    The set of meshes where a value is used or may come from, as computed by
    mesh inference (the discardable `mpmd.use_set` and `mpmd.src_set`
    attributes). Each element is a `#mpmd.mesh_with_origins` in its short
    form; `"*"` stands for any mesh. The list keeps the order and duplicates
    it was given.

    ```mlir
    %0 = "stablehlo.add"(%arg0, %arg0) {mpmd.use_set = #mpmd.meshes_with_origins<"m1", "m2"["user_in"]>}
        : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %1 = "stablehlo.abs"(%0) {mpmd.use_set = #mpmd.meshes_with_origins<>,
                              mpmd.src_set = #mpmd.meshes_with_origins<"*">}
        : (tensor<4xf32>) -> tensor<4xf32>
    ```
    The empty list `<>` is the empty set; `<"*">` is any mesh.

    Same syntax as jaxlib's (`ArrayOfAttr` of mesh-with-origins).
  }];
  let parameters = (ins OptionalArrayRefParameter<"MeshWithOriginsAttr", "the meshes, in order">:$value);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    auto begin() const { return getValue().begin(); }
    auto end() const { return getValue().end(); }
    bool empty() const { return getValue().empty(); }
    size_t size() const { return getValue().size(); }
    /// Whether `meshName` is in the list (the wildcard `"*"` matches any mesh).
    bool containsMesh(::llvm::StringRef meshName) const;
  }];
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
  let summary = "A cross-mesh reduction kind.";
  let description = [{
    How `mpmd.reduce` combines the values of its operands (which may live on
    different meshes): `none` (all operands hold the same value; exactly one
    operand), `add`, `max`, `min`, `mul`, `or` or `and`.

    ```mlir
    %2 = mpmd.reduce<add> %0, %1 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    ```

    Standalone it is written `#mpmd.reduction<add>`.
  }];
  let parameters = (ins EnumParameter<Mpmd_ReductionType>:$reduction_type);
  let assemblyFormat = "`<` $reduction_type `>`";
  let constBuilderCall = "::mlir::mpmd::ReductionAttr::get($_builder.getContext(), $0)";
}

//===----------------------------------------------------------------------===//
// Shardings (Shardy's textual form, parsed only inside mesh tensor types)
//===----------------------------------------------------------------------===//

def Mpmd_AxisRefAttr : Mpmd_Attr<"AxisRef", "axis_ref"> {
  let summary = "A mesh axis or sub-axis of a sharding.";
  let description = [{
    A reference to a mesh axis in a sharding, Shardy's syntax: `"x"` is the
    whole axis; `"x":(2)4` is a sub-axis of size 4 whose pre-size (the
    product of the sizes of the more-major parts of `"x"`) is 2: an axis
    `"x"=16` splits as 2 x 4 x 2 and this is the middle part.

    ```mlir
    !mpmd.mesh_tensor<"m1", tensor<8x8xf32>, sharding=<@mesh, [{"x":(1)2}, {"y"} ]>>
    ```
  }];
  let parameters = (ins StringRefParameter<"axis name">:$name,
                        DefaultValuedParameter<"int64_t", "0", "sub-axis pre-size (0: whole axis)">:$pre_size,
                        DefaultValuedParameter<"int64_t", "0", "sub-axis size (0: whole axis)">:$size);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    bool isSubAxis() const { return getSize() != 0; }
  }];
}

def Mpmd_DimShardingAttr : Mpmd_Attr<"DimSharding", "dim_sharding"> {
  let summary = "Sharding of one tensor dimension.";
  let description = [{
    The axes one dimension is split over, major to minor, Shardy's syntax:
    `{}` (not split, closed), `{"x", "y"}` (split over x then y), `{?}` or
    `{"x", ?}` (open: propagation may add axes) and an optional priority
    suffix `p<N>`.

    ```mlir
    !mpmd.mesh_tensor<"m1", tensor<8x8xf32>, sharding=<@mesh, [{"x", ?}p0, {} ]>>
    ```
  }];
  let parameters = (ins OptionalArrayRefParameter<"AxisRefAttr", "axes, major to minor">:$axes,
                        AttrParameter<"bool", "false when open (`?`)">:$is_closed,
                        DefaultValuedParameter<"int64_t", "-1", "priority (-1: none)">:$priority);
  let hasCustomAssemblyFormat = 1;
}

def Mpmd_TensorShardingAttr : Mpmd_Attr<"TensorSharding", "sharding"> {
  let summary = "SPMD sharding of a tensor over a mesh (Shardy's form).";
  let description = [{
    How a mesh tensor is laid out over the devices of its mesh, in Shardy's
    textual form (so the `sharding=` of a mesh tensor is what
    `#sdy.sharding` prints): the mesh symbol, one dimension sharding per
    tensor dimension, then optionally the axes the tensor is explicitly
    replicated or unreduced on.

    ```mlir
    !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {?} ], replicated={"y"}>>
    ```

    Standalone it is written `#mpmd.sharding<@mesh, [{"x"}, {?} ]>`. A
    missing sharding, or one whose dimensions are all `{}`/`{?}`, means
    fully replicated.
  }];
  let parameters = (ins StringRefParameter<"mesh symbol">:$mesh_name,
                        OptionalArrayRefParameter<"DimShardingAttr", "one per tensor dimension">:$dims,
                        OptionalArrayRefParameter<"AxisRefAttr", "explicitly replicated axes">:$replicated,
                        OptionalArrayRefParameter<"AxisRefAttr", "unreduced axes">:$unreduced);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    /// Whether no dimension is split over any axis.
    bool isFullyReplicated() const;
  }];
}

#endif // MPMD_DIALECT_MPMDATTRS_TD
