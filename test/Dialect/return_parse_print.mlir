// RUN: mpmd-opt %s | FileCheck %s
// RUN: mpmd-opt %s | mpmd-opt | FileCheck %s
// RUN: mpmd-opt %s --mlir-print-op-generic | mpmd-opt | FileCheck %s

// `mpmd.return` terminates named computations, fragments and loops, with zero
// or more values of any type.

// CHECK-LABEL: func.func @return_in_named_computation
func.func @return_in_named_computation(%arg0: tensor<4xf32>, %arg1: !stablehlo.token) -> (tensor<4xf32>, !stablehlo.token) {
  // CHECK:      mpmd.return %{{.*}}, %{{.*}} : tensor<4xf32>, !stablehlo.token
  // CHECK-NEXT: } : (tensor<4xf32>, !stablehlo.token) -> (tensor<4xf32>, !stablehlo.token)
  %0:2 = mpmd.named_computation<"f"> (%arg0, %arg1) (%arg2: tensor<4xf32>, %arg3: !stablehlo.token) {
    mpmd.return %arg2, %arg3 : tensor<4xf32>, !stablehlo.token
  } : (tensor<4xf32>, !stablehlo.token) -> (tensor<4xf32>, !stablehlo.token)
  return %0#0, %0#1 : tensor<4xf32>, !stablehlo.token
}

// CHECK-LABEL: func.func @empty_return
func.func @empty_return() {
  // CHECK:      mpmd.named_computation<"f"> () () {
  // CHECK-NEXT:   mpmd.return {{$}}
  // CHECK-NEXT: } : () -> ()
  mpmd.named_computation<"f"> () () {
    mpmd.return
  } : () -> ()
  return
}

// CHECK-LABEL: func.func @return_with_attrs
func.func @return_with_attrs(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK: mpmd.return {foo} %{{.*}} : tensor<4xf32>
  %0 = mpmd.named_computation<"f"> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return {foo} %arg1 : tensor<4xf32>
  } : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// CHECK-LABEL: func.func @return_in_fragment
func.func @return_in_fragment(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // CHECK: mpmd.return %{{.*}} : tensor<4xf32>
  %0 = mpmd.fragment<mesh="m1", origin=[]> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// CHECK-LABEL: func.func @return_in_for
func.func @return_in_for(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK: mpmd.return %{{.*}} : tensor<4xf32>
  %0 = mpmd.for (%arg0) {iterations = 2 : ui32} (%arg1: tensor<4xf32>, %index: tensor<ui32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : tensor<4xf32>
  return %0 : tensor<4xf32>
}
