//===- MpmdBase.td - mpmd dialect definition ---------------*- tablegen -*-===//
//
// The `mpmd` dialect: MPMD programs as fragments of SPMD computation placed on
// named meshes. Its textual form is compatible with the `mpmd` dialect that
// jaxlib ships Python bindings for (`jax.extend.mlir.dialects.mpmd`).
//
//===----------------------------------------------------------------------===//

#ifndef MPMD_DIALECT_MPMDBASE_TD
#define MPMD_DIALECT_MPMDBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Mpmd_Dialect : Dialect {
  let name = "mpmd";
  let cppNamespace = "::mlir::mpmd";
  let summary = "Multiple-program multiple-data (pipeline-parallel) programs.";
  let description = [{
    An MPMD program is a `func.func` carrying a `topology` attribute that names
    the meshes of the program. Computation is grouped into `mpmd.fragment`s,
    each an SPMD program placed on one mesh; values live on meshes
    (`!mpmd.mesh_tensor`) and move between meshes with `mpmd.transfer`.
    Before import, users label sub-computations with `mpmd.named_computation`
    and values with `mpmd.named_tensor`; passes map those names to meshes.

    ```mlir
    func.func @main(%arg0: !mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
        attributes {topology = #mpmd.topology<<"m0" : <["x"=2]>>, <"m1" : <["x"=2]>>>} {
      %0 = mpmd.fragment<mesh="m0", origin=["stage0"], stage=0> (%arg0) (%a: tensor<4xf32>) {
        %1 = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
        mpmd.return %1 : tensor<4xf32>
      } : (!mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m0", tensor<4xf32>>
      %2 = mpmd.transfer %0 : (!mpmd.mesh_tensor<"m0", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
      return %2 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    }
    ```

    The textual form is the one of the `mpmd` dialect that jaxlib ships
    bindings for (`jax.extend.mlir.dialects.mpmd`), so modules print and
    parse the same on both sides. StableHLO, Shardy and other dialects are
    carried as unregistered operations in generic form.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
    void registerTypes();
  }];
}

class Mpmd_Op<string mnemonic, list<Trait> traits = []>
    : Op<Mpmd_Dialect, mnemonic, traits>;
class Mpmd_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Mpmd_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}
class Mpmd_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Mpmd_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

#endif // MPMD_DIALECT_MPMDBASE_TD
