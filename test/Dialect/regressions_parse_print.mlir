// RUN: mpmd-opt %s -split-input-file | FileCheck %s
// RUN: mpmd-opt %s -split-input-file | mpmd-opt -split-input-file | FileCheck %s

// Names with quotes and spaces are escaped when printed, so they read back.

// CHECK-LABEL: func.func @escaped_strings
// CHECK-SAME: topology = #mpmd.topology<<"m \22a\22" : <["x\22y"=2]>>>
func.func @escaped_strings(%arg0: !mpmd.mesh_tensor<"m \"a\"", tensor<4xf32>, sharding=<@"my mesh", [{"x\"y"}]>>)
    -> !mpmd.mesh_tensor<"m \"a\"", tensor<4xf32>, sharding=<@"my mesh", [{"x\"y"}]>>
    attributes {topology = #mpmd.topology<<"m \"a\"" : <["x\"y"=2]>>>} {
  // CHECK-NEXT: mpmd.fragment<mesh="m \22a\22", origin=["a\22b"(1)]> (%arg0)
  // CHECK: } : (!mpmd.mesh_tensor<"m \22a\22", tensor<4xf32>, sharding=<@"my mesh", [{"x\22y"}]>>)
  %0 = mpmd.fragment<mesh="m \"a\"", origin=["a\"b"(1)]> (%arg0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m \"a\"", tensor<4xf32>, sharding=<@"my mesh", [{"x\"y"}]>>)
   -> !mpmd.mesh_tensor<"m \"a\"", tensor<4xf32>, sharding=<@"my mesh", [{"x\"y"}]>>
  return %0 : !mpmd.mesh_tensor<"m \"a\"", tensor<4xf32>, sharding=<@"my mesh", [{"x\"y"}]>>
}

// -----

// A loop without carried values prints no type list.

// CHECK-LABEL: func.func @for_without_carried_values
func.func @for_without_carried_values() {
  // CHECK-NEXT: mpmd.for () {iterations = 2 : ui32} (%index: tensor<ui32>) {
  // CHECK-NEXT:   mpmd.return
  // CHECK-NEXT: }
  // CHECK-NEXT: return
  "mpmd.for"() <{iterations = 2 : ui32}> ({
  ^bb0(%i: tensor<ui32>):
    "mpmd.return"() : () -> ()
  }) : () -> ()
  return
}

// -----

!s = !mpmd.mesh_tensor<"m1", tensor<4x8xf32>, sharding=<@mesh, [{"x"}, {}]>>

// A fragment_call callee is the global-view body: sharded operands are fine
// as long as the global types match.

// CHECK-LABEL: func.func @sharded_fragment_call
func.func @sharded_fragment_call(%arg0: !s) -> !s
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK-NEXT: mpmd.fragment_call<mesh="m1", origin=["f"]> @body(%arg0)
  %0 = mpmd.fragment_call<mesh="m1", origin=["f"]> @body(%arg0) : (!s) -> !s
  return %0 : !s
}
func.func @body(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> attributes {mesh_shape = #sdy.mesh<["x"=2]>} {
  return %arg0 : tensor<4x8xf32>
}
