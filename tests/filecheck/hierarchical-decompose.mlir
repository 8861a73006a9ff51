// hierarchical-decompose: one phase per dimension of each collective, chained by tokens. A reduce-scatter visits
// the dimensions ascending (whatever order `dims` lists), each on what the previous left (2400 B, then 2400 / 6);
// an all-gather descending, back out to the full buffer; a broadcast ascending from its root and a reduce
// descending into it, each phase of the whole buffer.
// RUN: astra-compile %s --topology "Ring(6)_FC(4)" --pass-pipeline chunk,hierarchical-decompose,select-algorithm --print-ir-after-all --emit mlir 2>&1 | filecheck %s

module {
  %0 = "comm.reduce_scatter"() {bytes = 2400 : i64, dims = array<i64: 1, 0>, name = "r"} : () -> !comm.token
  %1 = "comm.all_gather"(%0) {bytes = 2400 : i64, dims = array<i64: 0, 1>, name = "a"} : (!comm.token) -> !comm.token
  %2 = "comm.broadcast"(%1) {bytes = 2400 : i64, dims = array<i64: 0, 1>, name = "b", root = 5 : i64} : (!comm.token) -> !comm.token
  %3 = "comm.reduce"(%2) {bytes = 2400 : i64, dims = array<i64: 0, 1>, name = "d", root = 5 : i64} : (!comm.token) -> !comm.token
}

// CHECK-LABEL: IR Dump After hierarchical-decompose: hierarchical-decompose
// CHECK-NOT:   "comm.reduce_scatter"
// CHECK:       %[[R0:.+]] = "comm.phase"() {bytes = 2400 : i64, chunks = 1 : i64, collective = "r", dim = 0 : i64, group_bytes = 2400 : i64, group_dims = array<i64: 1, 0>, kind = "reduce_scatter", stage = 0 : i64}
// CHECK-NEXT:  %[[R1:.+]] = "comm.phase"(%[[R0]]) {bytes = 400 : i64, {{.*}}collective = "r", dim = 1 : i64, {{.*}}kind = "reduce_scatter", stage = 1 : i64}
// CHECK-NEXT:  %[[A0:.+]] = "comm.phase"(%[[R1]]) {bytes = 400 : i64, {{.*}}collective = "a", dim = 1 : i64, {{.*}}kind = "all_gather", stage = 0 : i64}
// CHECK-NEXT:  %[[A1:.+]] = "comm.phase"(%[[A0]]) {bytes = 2400 : i64, {{.*}}collective = "a", dim = 0 : i64, {{.*}}kind = "all_gather", stage = 1 : i64}
// CHECK-NEXT:  %[[B0:.+]] = "comm.phase"(%[[A1]]) {bytes = 2400 : i64, {{.*}}collective = "b", dim = 0 : i64, {{.*}}kind = "broadcast", root = 5 : i64, stage = 0 : i64}
// CHECK-NEXT:  %[[B1:.+]] = "comm.phase"(%[[B0]]) {bytes = 2400 : i64, {{.*}}collective = "b", dim = 1 : i64, {{.*}}kind = "broadcast", root = 5 : i64, stage = 1 : i64}
// CHECK-NEXT:  %[[D0:.+]] = "comm.phase"(%[[B1]]) {bytes = 2400 : i64, {{.*}}collective = "d", dim = 1 : i64, {{.*}}kind = "reduce", root = 5 : i64, stage = 0 : i64}
// CHECK-NEXT:  "comm.phase"(%[[D0]]) {bytes = 2400 : i64, {{.*}}collective = "d", dim = 0 : i64, {{.*}}kind = "reduce", root = 5 : i64, stage = 1 : i64}
// CHECK-NEXT:  }
// CHECK-LABEL: IR Dump After select-algorithm
