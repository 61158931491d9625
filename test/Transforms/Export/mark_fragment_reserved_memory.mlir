// RUN: mpmd-opt %s -split-input-file -mpmd-mark-fragment-reserved-memory | FileCheck %s

// A tensor<2x8xf32> is 64 bytes.
!a = !mpmd.mesh_tensor<"m1", tensor<2x8xf32>>
!b = !mpmd.mesh_tensor<"m2", tensor<2x8xf32>>

// Arguments the caller keeps are alive throughout; values made by the program
// from their definition to their last use; a fragment's operands are not
// counted, nor values on other meshes.

// CHECK-LABEL: func.func @chain
func.func @chain(%x: !a, %y: !a, %z: !b) -> (!a, !b)
    attributes {topology = #mpmd.topology<<"m1" : <["d"=2]>>, <"m2" : <["d"=2]>>>} {
  // %y is alive (an argument); %z is on m2.
  // CHECK: mpmd.fragment<mesh="m1", origin=["p"]> (%arg0) {reserved_hbm_bytes = 64 : i64}
  %0 = mpmd.fragment<mesh="m1", origin=["p"]> (%x) (%a: tensor<2x8xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<2x8xf32>) -> tensor<2x8xf32>
    mpmd.return %n : tensor<2x8xf32>
  } : (!a) -> !a
  // %x and %y (arguments) and %0 (read again below).
  // CHECK: mpmd.fragment<mesh="m1", origin=["q"]> (%arg1) {reserved_hbm_bytes = 128 : i64}
  %1 = mpmd.fragment<mesh="m1", origin=["q"]> (%y) (%a: tensor<2x8xf32>) {
    %n = "stablehlo.abs"(%a) : (tensor<2x8xf32>) -> tensor<2x8xf32>
    mpmd.return %n : tensor<2x8xf32>
  } : (!a) -> !a
  // %x, %y and %1 (returned); %0 is read here for the last time.
  // CHECK: mpmd.fragment<mesh="m1", origin=["r"]> (%{{.*}}) {reserved_hbm_bytes = 192 : i64}
  %2 = mpmd.fragment<mesh="m1", origin=["r"]> (%0) (%a: tensor<2x8xf32>) {
    %n = "stablehlo.abs"(%a) : (tensor<2x8xf32>) -> tensor<2x8xf32>
    mpmd.return %n : tensor<2x8xf32>
  } : (!a) -> !a
  // On m2 only %z, its operand.
  // CHECK: mpmd.fragment<mesh="m2", origin=["s"]> (%arg2) {reserved_hbm_bytes = 0 : i64}
  %3 = mpmd.fragment<mesh="m2", origin=["s"]> (%z) (%a: tensor<2x8xf32>) {
    mpmd.return %a : tensor<2x8xf32>
  } : (!b) -> !b
  return %1, %3 : !a, !b
}

// -----

!a = !mpmd.mesh_tensor<"m1", tensor<2x8xf32>>
!a_split = !mpmd.mesh_tensor<"m1", tensor<2x8xf32>, sharding=<@mesh, [{}, {"d"}]>>
!a_host = !mpmd.mesh_tensor<"m1", tensor<2x8xf32>, memory_kind="pinned_host">

// Donated arguments are freed after their last use; a sharded value counts
// its per-device shard; values in host memory and values nothing reads hold
// no device memory.

// CHECK-LABEL: func.func @donated_sharded_host
func.func @donated_sharded_host(%x: !a {jax.buffer_donor = true}, %s: !a_split, %h: !a_host,
                                %y: !a {tf.aliasing_output = 0 : i32}) -> !a
    attributes {topology = #mpmd.topology<<"m1" : <["d"=4]>>>} {
  // %s (64 / 4 = 16 bytes) and %y (donated, read below).
  // CHECK: mpmd.fragment<mesh="m1", origin=["p"]> (%arg0) {reserved_hbm_bytes = 80 : i64}
  %0:2 = mpmd.fragment<mesh="m1", origin=["p"]> (%x) (%a: tensor<2x8xf32>) {
    %n = "stablehlo.negate"(%a) : (tensor<2x8xf32>) -> tensor<2x8xf32>
    mpmd.return %n, %n : tensor<2x8xf32>, tensor<2x8xf32>
  } : (!a) -> (!a, !a)
  // %s and %0#0; %x was donated and is gone; %0#1 is never read.
  // CHECK: mpmd.fragment<mesh="m1", origin=["q"]> (%arg3) {reserved_hbm_bytes = 80 : i64}
  %1 = mpmd.fragment<mesh="m1", origin=["q"]> (%y) (%a: tensor<2x8xf32>) {
    mpmd.return %a : tensor<2x8xf32>
  } : (!a) -> !a
  // %s only: %y was donated and read for the last time above.
  // CHECK: mpmd.fragment<mesh="m1", origin=["r"]> (%{{.*}}, %{{.*}}) {reserved_hbm_bytes = 16 : i64}
  %2 = mpmd.fragment<mesh="m1", origin=["r"]> (%0#0, %1) (%a: tensor<2x8xf32>, %b: tensor<2x8xf32>) {
    %n = "stablehlo.add"(%a, %b) : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
    mpmd.return %n : tensor<2x8xf32>
  } : (!a, !a) -> !a
  return %2 : !a
}

// -----

!a = !mpmd.mesh_tensor<"m1", tensor<2x8xf32>>

// An operand passed twice counts once (as an operand: not at all).

// CHECK-LABEL: func.func @same_operand_twice
func.func @same_operand_twice(%x: !a) -> !a
    attributes {topology = #mpmd.topology<<"m1" : <["d"=2]>>>} {
  // CHECK: mpmd.fragment<mesh="m1", origin=["p"]> (%arg0, %arg0) {reserved_hbm_bytes = 0 : i64}
  %0 = mpmd.fragment<mesh="m1", origin=["p"]> (%x, %x) (%a: tensor<2x8xf32>, %b: tensor<2x8xf32>) {
    %n = "stablehlo.add"(%a, %b) : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
    mpmd.return %n : tensor<2x8xf32>
  } : (!a, !a) -> !a
  return %0 : !a
}

// -----

!a = !mpmd.mesh_tensor<"m1", tensor<2x8xf32>>

// JAX's spelling of host memory counts too: mhlo.memory_kind on a function
// argument, or in the res_attrs of the fragment that makes the value.

// CHECK-LABEL: func.func @host_by_attribute
func.func @host_by_attribute(%h: !a {mhlo.memory_kind = "pinned_host"}, %x: !a) -> (!a, !a)
    attributes {topology = #mpmd.topology<<"m1" : <["d"=2]>>>} {
  // CHECK: mpmd.fragment<mesh="m1", origin=["p"]> (%arg1) {res_attrs = [{mhlo.memory_kind = "pinned_host"}, {}], reserved_hbm_bytes = 0 : i64}
  %0:2 = mpmd.fragment<mesh="m1", origin=["p"]> (%x) {res_attrs = [{mhlo.memory_kind = "pinned_host"}, {}]} (%a: tensor<2x8xf32>) {
    mpmd.return %a, %a : tensor<2x8xf32>, tensor<2x8xf32>
  } : (!a) -> (!a, !a)
  // %x (64 bytes); %0#0 is in host memory, %0#1 is the operand.
  // CHECK: mpmd.fragment<mesh="m1", origin=["q"]> (%{{.*}}) {reserved_hbm_bytes = 64 : i64}
  %1 = mpmd.fragment<mesh="m1", origin=["q"]> (%0#1) (%a: tensor<2x8xf32>) {
    mpmd.return %a : tensor<2x8xf32>
  } : (!a) -> !a
  return %0#0, %1 : !a, !a
}
