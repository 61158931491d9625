// RUN: not mpmd-opt %s -split-input-file -mpmd-set-topology 2>&1 | FileCheck %s --check-prefix=NONE
// RUN: not mpmd-opt %s -split-input-file -mpmd-set-topology='topology=m0' 2>&1 | FileCheck %s --check-prefix=MALFORMED
// RUN: not mpmd-opt %s -split-input-file -mpmd-set-topology='topology=m0:data=x' 2>&1 | FileCheck %s --check-prefix=AXIS
// RUN: not mpmd-opt %s -split-input-file -mpmd-set-topology='topology=m0:data=0' 2>&1 | FileCheck %s --check-prefix=SIZE
// RUN: not mpmd-opt %s -split-input-file -mpmd-set-topology='topology=m0:data=2 func=step' 2>&1 | FileCheck %s --check-prefix=FUNC

// NONE: error: no function has a `topology` attribute, so the mpmd passes have nothing to do: give the meshes with the pipeline option topology="m0:data=4;m1:data=4" (for @main)
// MALFORMED: error: malformed topology entry 'm0': expected 'name:axis=size,...'
// AXIS: error: malformed axis 'data=x' of mesh "m0" in the topology: expected axis=size
// SIZE: error: mesh axis "data" must have a positive size, got 0
// FUNC: error: option topology names no function: the module has no @step

func.func @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {
  return %arg0 : tensor<4xf32>
}

// -----

// An imported module is not imported again.

// RUN: not mpmd-opt %s -split-input-file -mpmd-import-pipeline 2>&1 | FileCheck %s --check-prefix=IMPORTED
// IMPORTED: error: @imported is imported already (it has fragments and no named computations): run the optimize or export passes on it (e.g. -mpmd-export-pipeline), not the import pipeline

!m = !mpmd.mesh_tensor<"m0", tensor<4xf32>>
func.func @imported(%arg0: !m) -> !m attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  %0 = mpmd.fragment<mesh="m0", origin=["f"]> (%arg0) (%a: tensor<4xf32>) {
    mpmd.return %a : tensor<4xf32>
  } : (!m) -> !m
  return %0 : !m
}

// -----

// RUN: not mpmd-opt %s -split-input-file -mpmd-set-topology='topology=m0:x=2 func=other' 2>&1 | FileCheck %s --check-prefix=OTHER
// OTHER: error: @other already has topology #mpmd.topology<<"m0" : <["x"=1]>>>, not the #mpmd.topology<<"m0" : <["x"=2]>>> of the option topology

func.func @other(%arg0: tensor<4xf32>) -> tensor<4xf32> attributes {topology = #mpmd.topology<<"m0" : <["x"=1]>>>} {
  return %arg0 : tensor<4xf32>
}
