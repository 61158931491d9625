// RUN: mpmd-opt %s -split-input-file -mpmd-pack-fragment-values | FileCheck %s
// RUN: mpmd-opt %s -split-input-file -mpmd-pack-fragment-values -mpmd-lower-to-fragment-calls | FileCheck %s --check-prefix=OUTLINED

!a = !mpmd.mesh_tensor<"m0", tensor<2x3xf32>>
!b = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!c = !mpmd.mesh_tensor<"m0", tensor<f32>>
!i = !mpmd.mesh_tensor<"m0", tensor<2xi32>>

// A forward hands three f32 values and one i32 value to its backward alone:
// the f32 ones become one buffer of 6 + 6 + 1 elements, in the forward's
// result order; the single i32 value stays as it is (one value is not worth
// packing). The value the function returns is not packed, nor is the result
// nobody reads.

// CHECK-LABEL: func.func @residuals
func.func @residuals(%x: !a) -> (!a, !c)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  // CHECK: %[[F:.*]]:4 = mpmd.fragment<mesh="m0", origin=["f"]> (%arg0) (%[[X:.*]]: tensor<2x3xf32>) {
  // CHECK-NEXT: %[[N:.*]] = "stablehlo.negate"(%[[X]])
  // CHECK-NEXT: %[[R:.*]] = "stablehlo.reduce_precision"
  // CHECK-NEXT: %[[S:.*]] = "stablehlo.constant"() <{value = dense<2.000000e+00> : tensor<f32>}>
  // CHECK-NEXT: %[[K:.*]] = "stablehlo.constant"() <{value = dense<[1, 2]> : tensor<2xi32>}>
  // CHECK-NEXT: %[[P0:.*]] = "stablehlo.reshape"(%[[N]]) : (tensor<2x3xf32>) -> tensor<6xf32>
  // CHECK-NEXT: %[[P1:.*]] = "stablehlo.reshape"(%[[R]]) : (tensor<2x3xf32>) -> tensor<6xf32>
  // CHECK-NEXT: %[[P2:.*]] = "stablehlo.reshape"(%[[S]]) : (tensor<f32>) -> tensor<1xf32>
  // CHECK-NEXT: %[[P:.*]] = "stablehlo.concatenate"(%[[P0]], %[[P1]], %[[P2]]) <{dimension = 0 : i64}> : (tensor<6xf32>, tensor<6xf32>, tensor<1xf32>) -> tensor<13xf32>
  // CHECK-NEXT: mpmd.return %[[X]], %[[S]], %[[K]], %[[P]] : tensor<2x3xf32>, tensor<f32>, tensor<2xi32>, tensor<13xf32>
  // CHECK-NEXT: } : (!mpmd.mesh_tensor<"m0", tensor<2x3xf32>>) -> (!mpmd.mesh_tensor<"m0", tensor<2x3xf32>>, !mpmd.mesh_tensor<"m0", tensor<f32>>, !mpmd.mesh_tensor<"m0", tensor<2xi32>>, !mpmd.mesh_tensor<"m0", tensor<13xf32>>)
  %0:6 = mpmd.fragment<mesh="m0", origin=["f"]> (%x) (%arg: tensor<2x3xf32>) {
    %n = "stablehlo.negate"(%arg) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %r = "stablehlo.reduce_precision"(%arg) <{exponent_bits = 5 : i32, mantissa_bits = 10 : i32}> : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %s = "stablehlo.constant"() <{value = dense<2.0> : tensor<f32>}> : () -> tensor<f32>
    %k = "stablehlo.constant"() <{value = dense<[1, 2]> : tensor<2xi32>}> : () -> tensor<2xi32>
    mpmd.return %arg, %n, %r, %s, %k, %s : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<f32>, tensor<2xi32>, tensor<f32>
  } : (!a) -> (!a, !a, !a, !c, !i, !c)
  // CHECK: mpmd.fragment<mesh="m0", origin=["f"(1)]> (%[[F]]#2, %[[F]]#3) (%[[K2:.*]]: tensor<2xi32>, %[[W:.*]]: tensor<13xf32>) {
  // CHECK-NEXT: %[[V1:.*]] = "stablehlo.slice"(%[[W]]) <{limit_indices = array<i64: 6>, start_indices = array<i64: 0>, strides = array<i64: 1>}> : (tensor<13xf32>) -> tensor<6xf32>
  // CHECK-NEXT: %[[U1:.*]] = "stablehlo.reshape"(%[[V1]]) : (tensor<6xf32>) -> tensor<2x3xf32>
  // CHECK-NEXT: %[[V2:.*]] = "stablehlo.slice"(%[[W]]) <{limit_indices = array<i64: 12>, start_indices = array<i64: 6>, strides = array<i64: 1>}> : (tensor<13xf32>) -> tensor<6xf32>
  // CHECK-NEXT: %[[U2:.*]] = "stablehlo.reshape"(%[[V2]]) : (tensor<6xf32>) -> tensor<2x3xf32>
  // CHECK-NEXT: %[[V0:.*]] = "stablehlo.slice"(%[[W]]) <{limit_indices = array<i64: 13>, start_indices = array<i64: 12>, strides = array<i64: 1>}> : (tensor<13xf32>) -> tensor<1xf32>
  // CHECK-NEXT: %[[U0:.*]] = "stablehlo.reshape"(%[[V0]]) : (tensor<1xf32>) -> tensor<f32>
  // CHECK-NEXT: "stablehlo.add"(%[[U1]], %[[U2]])
  // CHECK: "stablehlo.multiply"(%[[U0]], %{{.*}})
  %1 = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%0#5, %0#1, %0#4, %0#2) (%s: tensor<f32>, %n: tensor<2x3xf32>, %k: tensor<2xi32>, %r: tensor<2x3xf32>) {
    %sum = "stablehlo.add"(%n, %r) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %red = "stablehlo.reduce"(%sum, %s) <{dimensions = array<i64: 0, 1>}> ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %t = "stablehlo.add"(%p, %q) : (tensor<f32>, tensor<f32>) -> tensor<f32>
      "stablehlo.return"(%t) : (tensor<f32>) -> ()
    }) : (tensor<2x3xf32>, tensor<f32>) -> tensor<f32>
    %m = "stablehlo.multiply"(%s, %red) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %kf = "stablehlo.convert"(%k) : (tensor<2xi32>) -> tensor<2xf32>
    mpmd.return %m : tensor<f32>
  } : (!c, !a, !i, !a) -> !c
  return %0#0, %1 : !a, !c
}

// -----

!acc = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!w = !mpmd.mesh_tensor<"m0", tensor<2x2xf32>>

// Gradient accumulators: the first microbatch's start from donated splat
// constants (made afresh by the runtime), which become one packed constant;
// each backward hands the running sums to the next as one buffer, and the
// last one to the update. Both backwards keep one body, so one program
// serves them.

// CHECK-LABEL: func.func @accumulators
// CHECK-SAME: (%arg0: !mpmd.mesh_tensor<"m0", tensor<4xf32>>, %[[Z:.*]]: !mpmd.mesh_tensor<"m0", tensor<8xf32>> {jax.buffer_donor = true, mpmd.constant = dense<0.000000e+00> : tensor<8xf32>})
// CHECK: %[[B0:.*]] = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%arg0, %[[Z]]) {call_counter = 0 : ui32}
// CHECK: %[[B1:.*]] = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%arg0, %[[B0]]) {call_counter = 1 : ui32}
// CHECK: mpmd.fragment<mesh="m0", origin=[]> (%[[B1]]) (%{{.*}}: tensor<8xf32>)
// CHECK: } : (!mpmd.mesh_tensor<"m0", tensor<8xf32>>) -> !mpmd.mesh_tensor<"m0", tensor<2x2xf32>>
func.func @accumulators(%g: !acc, %z0: !acc {mpmd.constant = dense<0.0> : tensor<4xf32>, jax.buffer_donor = true},
                        %z1: !acc {mpmd.constant = dense<0.0> : tensor<4xf32>, jax.buffer_donor = true}) -> !w
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  %0:2 = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%g, %z0, %z1) {call_counter = 0 : ui32} (%x: tensor<4xf32>, %a: tensor<4xf32>, %b: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %t = "stablehlo.add"(%b, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s, %t : tensor<4xf32>, tensor<4xf32>
  } : (!acc, !acc, !acc) -> (!acc, !acc)
  %1:2 = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%g, %0#0, %0#1) {call_counter = 1 : ui32} (%x: tensor<4xf32>, %a: tensor<4xf32>, %b: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %t = "stablehlo.add"(%b, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s, %t : tensor<4xf32>, tensor<4xf32>
  } : (!acc, !acc, !acc) -> (!acc, !acc)
  %2 = mpmd.fragment<mesh="m0", origin=[]> (%1#0, %1#1) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    %s = "stablehlo.subtract"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %r = "stablehlo.reshape"(%s) : (tensor<4xf32>) -> tensor<2x2xf32>
    mpmd.return %r : tensor<2x2xf32>
  } : (!acc, !acc) -> !w
  return %2 : !w
}

// OUTLINED-LABEL: func.func @accumulators
// OUTLINED: mpmd.fragment_call<mesh="m0", origin=["f"(1)]> @[[BWD:[^(]*]](%arg0, %arg1)
// OUTLINED-NEXT: mpmd.fragment_call<mesh="m0", origin=["f"(1)]> @[[BWD]](
// OUTLINED: func.func @[[BWD]](%arg0: tensor<4xf32>, %arg1: tensor<8xf32>{{.*}}) -> tensor<8xf32>

// -----

!v = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
!vs = !mpmd.mesh_tensor<"m0", tensor<4xf32>, sharding=<@mesh, [{"x"}]>>
!u = !mpmd.mesh_tensor<"u", tensor<4xf32>>

// Left alone: values read by two fragments, values with a sharding, meshes
// of several devices, and splat constants the caller may not consume.

// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: stablehlo.concatenate
// CHECK-NOT: stablehlo.slice
// CHECK: return
func.func @left_alone(%x: !v, %y: !u, %c0: !v {mpmd.constant = dense<1.0> : tensor<4xf32>},
                      %c1: !v {mpmd.constant = dense<1.0> : tensor<4xf32>})
    -> (!v, !v, !vs, !u)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>, <"u" : <["x"=2]>>>} {
  %0:3 = mpmd.fragment<mesh="m0", origin=["f"]> (%x) (%a: tensor<4xf32>) {
    mpmd.return %a, %a, %a : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  } : (!v) -> (!v, !v, !vs)
  %1 = mpmd.fragment<mesh="m0", origin=["g"]> (%0#0, %0#1, %c0, %c1) (%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<4xf32>, %d: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!v, !v, !v, !v) -> !v
  %2 = mpmd.fragment<mesh="m0", origin=["h"]> (%0#1, %0#2) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!v, !vs) -> !v
  %3:2 = mpmd.fragment<mesh="u", origin=["f"]> (%y) (%a: tensor<4xf32>) {
    mpmd.return %a, %a : tensor<4xf32>, tensor<4xf32>
  } : (!u) -> (!u, !u)
  %4 = mpmd.fragment<mesh="u", origin=["g"]> (%3#0, %3#1) (%a: tensor<4xf32>, %b: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!u, !u) -> !u
  return %1, %2, %0#2, %4 : !v, !v, !vs, !u
}

// -----

!acc = !mpmd.mesh_tensor<"m0", tensor<4xf32>>

// Siblings are packed alike or not at all. The two microbatches' backwards
// share one body; the first's accumulators start from constants, the
// second's come from the first. The second hands its sums to the function's
// results, which cannot take a packed buffer, so neither backward packs (one
// program still serves both), while the forward hands its two saved values
// to each backward in the same way, so every forward packs them. The
// constants the first backward reads separately stay as they are.

// CHECK-LABEL: func.func @siblings
// CHECK-SAME: %arg1: !mpmd.mesh_tensor<"m0", tensor<4xf32>> {jax.buffer_donor = true, mpmd.constant
// CHECK-SAME: %arg2: !mpmd.mesh_tensor<"m0", tensor<4xf32>> {jax.buffer_donor = true, mpmd.constant
// CHECK: %[[F0:.*]] = mpmd.fragment<mesh="m0", origin=["f"]> (%arg0) {call_counter = 0 : ui32}
// CHECK: "stablehlo.concatenate"
// CHECK: %[[B0:.*]]:2 = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%arg1, %arg2, %[[F0]]) {call_counter = 0 : ui32}
// CHECK: %[[F1:.*]] = mpmd.fragment<mesh="m0", origin=["f"]> (%arg0) {call_counter = 1 : ui32}
// CHECK: "stablehlo.concatenate"
// CHECK: %[[B1:.*]]:2 = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%[[B0]]#0, %[[B0]]#1, %[[F1]]) {call_counter = 1 : ui32}
// CHECK: return %[[B1]]#0, %[[B1]]#1

// OUTLINED-LABEL: func.func @siblings
// OUTLINED-COUNT-2: mpmd.fragment_call<mesh="m0", origin=["f"]> @p0_f_fwd.main
// OUTLINED-NOT: @p2_
func.func @siblings(%x: !acc, %z0: !acc {mpmd.constant = dense<0.0> : tensor<4xf32>, jax.buffer_donor = true},
                    %z1: !acc {mpmd.constant = dense<0.0> : tensor<4xf32>, jax.buffer_donor = true}) -> (!acc, !acc)
    attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  %f0:2 = mpmd.fragment<mesh="m0", origin=["f"]> (%x) {call_counter = 0 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %e = "stablehlo.exponential"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n, %e : tensor<4xf32>, tensor<4xf32>
  } : (!acc) -> (!acc, !acc)
  %b0:2 = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%z0, %z1, %f0#0, %f0#1) {call_counter = 0 : ui32} (%a: tensor<4xf32>, %b: tensor<4xf32>, %n: tensor<4xf32>, %e: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %n) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %t = "stablehlo.add"(%b, %e) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s, %t : tensor<4xf32>, tensor<4xf32>
  } : (!acc, !acc, !acc, !acc) -> (!acc, !acc)
  %f1:2 = mpmd.fragment<mesh="m0", origin=["f"]> (%x) {call_counter = 1 : ui32} (%a: tensor<4xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    %e = "stablehlo.exponential"(%a) : (tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %n, %e : tensor<4xf32>, tensor<4xf32>
  } : (!acc) -> (!acc, !acc)
  %b1:2 = mpmd.fragment<mesh="m0", origin=["f"(1)]> (%b0#0, %b0#1, %f1#0, %f1#1) {call_counter = 1 : ui32} (%a: tensor<4xf32>, %b: tensor<4xf32>, %n: tensor<4xf32>, %e: tensor<4xf32>) {
    %s = "stablehlo.add"(%a, %n) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %t = "stablehlo.add"(%b, %e) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    mpmd.return %s, %t : tensor<4xf32>, tensor<4xf32>
  } : (!acc, !acc, !acc, !acc) -> (!acc, !acc)
  return %b1#0, %b1#1 : !acc, !acc
}
