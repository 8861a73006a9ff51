// place-ranks: HDRM's placement of virtual ranks on a BiGraph's NPUs (halving-doubling over the virtual ranks
// then never puts two messages on one link), recorded as one comm.placement op whose token the hdrm phases take.
// RUN: astra-compile %s --topology 2x4_bigraph --algorithm hdrm --print-ir-after-all --emit mlir 2>&1 | filecheck %s

module {
  %0 = "comm.all_reduce"() {bytes = 4096 : i64, dims = array<i64: 0>, name = "g"} : () -> !comm.token
}

// CHECK-LABEL: IR Dump After select-algorithm: select-algorithm{algorithm=hdrm}
// CHECK-NOT:   "comm.placement"
// CHECK-LABEL: IR Dump After place-ranks: place-ranks
// CHECK:       %[[PLACED:.+]] = "comm.placement"() {ranks = array<i64: 0, 7, 6, 3, 4, 1, 2, 5>} : () -> !comm.token
// CHECK-NEXT:  %[[RS:.+]] = "comm.phase"(%[[PLACED]]) {algorithm = "hdrm", {{.*}}collective = "g.rs", dim = -1 : i64
// CHECK-NEXT:  "comm.phase"(%[[RS]], %[[PLACED]]) {algorithm = "hdrm", {{.*}}collective = "g.ag", dim = -1 : i64
