// RUN: mpmd-opt %s -split-input-file -verify-diagnostics

//===----------------------------------------------------------------------===//
// Custom parser
//===----------------------------------------------------------------------===//

func.func @unknown_keyword(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>> attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{expected `stage`, `in_shardings` or `out_shardings`, got `stage_id`}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"], stage_id=1> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @origin_before_mesh(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>> attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{expected 'mesh'}}
  %0 = mpmd.fragment<origin=["f"], mesh="m1"> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @origin_empty_name(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>> attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{user origin name must not be empty}}
  %0 = mpmd.fragment<mesh="m1", origin=["f", ""]> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @origin_negative_transpose_count(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>> attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{transpose count of "f" must be >= 0, got -2}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"(-2)]> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @bad_in_shardings(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>> attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{expected a dimension priority of the form `p<N>`}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"], in_shardings=[<@mesh, [{"x"}x1]>]> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @unterminated_shardings_list(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>> attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{expected ']'}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"], out_shardings=[<@mesh, [{"x"}]> <@mesh, [{"x"}]>]> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

//===----------------------------------------------------------------------===//
// Mesh lookup
//===----------------------------------------------------------------------===//

func.func @no_topology(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>> {
  // expected-error @+1 {{'mpmd.fragment' op uses mesh "m1" but the enclosing function @no_topology has no `topology` attribute}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

// Outside of any function.
// expected-error @+1 {{'mpmd.fragment' op uses mesh "m1" but the enclosing function has no `topology` attribute}}
mpmd.fragment<mesh="m1", origin=["f"]> () () {
  mpmd.return
} : () -> ()

// -----

func.func @mesh_not_in_topology(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op uses mesh "m3" which is not in the topology (meshes: "m1" "m2")}}
  %0 = mpmd.fragment<mesh="m3", origin=["f"]> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

//===----------------------------------------------------------------------===//
// Operand and result types
//===----------------------------------------------------------------------===//

func.func @operand_not_mesh_tensor(%arg0: tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>> attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op operand #0 must be a !mpmd.mesh_tensor on mesh "m1", got 'tensor<4xf32>'}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @result_not_mesh_tensor(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> tensor<4xf32> attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op result #0 must be a !mpmd.mesh_tensor on mesh "m1", got 'tensor<4xf32>'}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @operand_on_other_mesh(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>, %arg1: !mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op operand #1 lives on mesh "m2" but the op runs on mesh "m1"}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %arg1) (%arg2: tensor<4xf32>, %arg3: tensor<4xf32>) {
    mpmd.return %arg2 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m2", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @result_on_other_mesh(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op result #0 lives on mesh "m2" but the op runs on mesh "m1"}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m2", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m2", tensor<4xf32>>
}

// -----

func.func @operand_sharding_axis_not_in_mesh(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"y"}]>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>, <"m2" : <["y"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op unknown axis name: "y" in the sharding of '!mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"y"}]>>': mesh "m1" has}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"y"}]>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @result_replicated_axis_not_in_mesh(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{}], replicated={"z"}>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op unknown axis name: "z" in the sharding of '!mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{}], replicated={"z"}>>': mesh "m1" has}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{}], replicated={"z"}>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{}], replicated={"z"}>>
}

// -----

func.func @result_unreduced_axis_not_in_mesh(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}], unreduced={"w"}>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op unknown axis name: "w" in the sharding of '!mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}], unreduced={"w"}>>': mesh "m1" has}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}], unreduced={"w"}>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}], unreduced={"w"}>>
}

// -----

func.func @negative_stage(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>> attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op stage id must be >= 0, got -1}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"], stage=-1> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

//===----------------------------------------------------------------------===//
// Body signature
//===----------------------------------------------------------------------===//

func.func @too_many_block_args(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>> attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op has 1 operands but its body takes 2 arguments}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%arg1: tensor<4xf32>, %arg2: tensor<4xf32>) {
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @block_arg_type_mismatch(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>> attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op body argument #0 has type 'tensor<4xf16>' but operand #0 requires 'tensor<4xf32>'}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%arg1: tensor<4xf16>) {
    %1 = "stablehlo.convert"(%arg1) : (tensor<4xf16>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

// The body takes the global type of a sharded operand, not its per-device shard.
func.func @block_arg_is_local_type(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}]>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op body argument #0 has type 'tensor<2xf32>' but operand #0 requires 'tensor<4xf32>'}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%arg1: tensor<2xf32>) {
    %1 = "stablehlo.concatenate"(%arg1, %arg1) {dimension = 0 : i64} : (tensor<2xf32>, tensor<2xf32>) -> tensor<4xf32>
    mpmd.return %1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>, sharding=<@mesh, [{"x"}]>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

// A block argument of mesh tensor type is not the global type either.
func.func @block_arg_is_mesh_tensor(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>> attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op body argument #0 has type '!mpmd.mesh_tensor<"m1", tensor<4xf32>>' but operand #0 requires 'tensor<4xf32>'}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%arg1: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) {
    mpmd.return %arg1 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @too_few_returned_values(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>> attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op has 1 results but its body returns 0 values}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%arg1: tensor<4xf32>) {
    mpmd.return
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

func.func @returned_type_mismatch(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>, %arg1: !mpmd.mesh_tensor<"m1", tensor<8xf32>>) -> (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<4xf32>>)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op body returns 'tensor<8xf32>' as value #1 but result #1 requires 'tensor<4xf32>'}}
  %0:2 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0, %arg1) (%arg2: tensor<4xf32>, %arg3: tensor<8xf32>) {
    mpmd.return %arg2, %arg3 : tensor<4xf32>, tensor<8xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<8xf32>>) -> (!mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<4xf32>>)
  return %0#0, %0#1 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>, !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

// Fragments are isolated from above.
func.func @uses_value_from_above(%arg0: !mpmd.mesh_tensor<"m1", tensor<4xf32>>, %arg1: tensor<4xf32>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>> attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-note @+1 {{required by region isolation constraints}}
  %0 = mpmd.fragment<mesh="m1", origin=["f"]> (%arg0) (%arg2: tensor<4xf32>) {
    // expected-error @+1 {{using value defined outside the region}}
    mpmd.return %arg1 : tensor<4xf32>
  } : (!mpmd.mesh_tensor<"m1", tensor<4xf32>>) -> !mpmd.mesh_tensor<"m1", tensor<4xf32>>
  return %0 : !mpmd.mesh_tensor<"m1", tensor<4xf32>>
}

// -----

!m = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
func.func @in_shardings_not_sdy(%arg0: !m) -> !m
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{in_shardings must be a #sdy.sharding_per_value<[...]> list, got [1, 2]}}
  %0 = "mpmd.fragment"(%arg0) <{mesh_name = "m1", origin = [], in_shardings = [1, 2]}> ({
  ^bb0(%a: tensor<4xf32>):
    "mpmd.return"(%a) : (tensor<4xf32>) -> ()
  }) : (!m) -> !m
  return %0 : !m
}

// -----

// The body ends with `mpmd.return` (as jaxlib's implicit-terminator trait
// requires); an unregistered op is not a terminator here.
!m = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
func.func @body_not_ending_with_return(%arg0: !m)
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  // expected-error @+1 {{'mpmd.fragment' op expects regions to end with 'mpmd.return', found 'foo.terminator'}}
  "mpmd.fragment"(%arg0) <{mesh_name = "m1", origin = []}> ({
  ^bb0(%a: tensor<4xf32>):
    "foo.terminator"(%a) : (tensor<4xf32>) -> ()
  }) : (!m) -> ()
  return
}

// -----

// A body that ends with a registered non-terminator: the generic block check
// reports it (the fragment's own checks of the returned values run after the
// body's, as in jaxlib).
!m = !mpmd.mesh_tensor<"m1", tensor<4xf32>>
func.func @body_ending_with_non_terminator(%arg0: !m) -> !m
    attributes {topology = #mpmd.topology<<"m1" : <["x"=2]>>>} {
  %0 = "mpmd.fragment"(%arg0) <{mesh_name = "m1", origin = []}> ({
  ^bb0(%a: tensor<4xf32>):
    // expected-error @+1 {{block with no terminator}}
    %1 = "mpmd.broadcast"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  }) : (!m) -> !m
  return %0 : !m
}
