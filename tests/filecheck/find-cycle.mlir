// find-cycle: flat_ring's Hamiltonian cycle of NPU-to-NPU links, found once and recorded as one comm.cycle op
// whose token every flat_ring phase takes; the lowering walks the recorded order. On a 4x4 torus the cycle
// snakes through the rows: 0 1 2 3, back along the next row 7 6 5 4, and so on, each step one link.
// RUN: astra-compile %s --topology 4x4_torus --algorithm flat_ring --print-ir-after-all --emit mlir 2>&1 | filecheck %s

module {
  %0 = "comm.all_reduce"() {bytes = 4096 : i64, dims = array<i64: 0, 1>, name = "g"} : () -> !comm.token
}

// CHECK-LABEL: IR Dump After select-algorithm: select-algorithm{algorithm=ring}
// CHECK-NOT:   "comm.cycle"
// CHECK-LABEL: IR Dump After find-cycle: find-cycle
// CHECK:       %[[CYCLE:.+]] = "comm.cycle"() {order = array<i64: 0, 1, 2, 3, 7, 6, 5, 4, 8, 9, 10, 11, 15, 14, 13, 12>} : () -> !comm.token
// CHECK-NEXT:  %[[RS:.+]] = "comm.phase"(%[[CYCLE]]) {algorithm = "ring", {{.*}}collective = "g.rs", dim = -1 : i64
// CHECK-NEXT:  "comm.phase"(%[[RS]], %[[CYCLE]]) {algorithm = "ring", {{.*}}collective = "g.ag", dim = -1 : i64
// CHECK-NEXT:  }
