// decompose-all-reduce: an all_reduce becomes a reduce_scatter and an all_gather on the same group, each of the
// whole buffer; whoever waited on the all_reduce now waits on the all_gather.
// RUN: astra-compile %s --topology "Ring(4)_Switch(8)" --pass-pipeline decompose-all-reduce,chunk,hierarchical-decompose,select-algorithm --print-ir-after-all --emit mlir 2>&1 | filecheck %s
// RUN: astra-compile %s --topology "Ring(4)_Switch(8)" --all-reduce per-dimension --pass-pipeline decompose-all-reduce,chunk,hierarchical-decompose,select-algorithm --print-ir-after-all --emit mlir 2>&1 | filecheck %s --check-prefix=PERDIM

module {
  %0 = "comm.all_reduce"() {bytes = 1048576 : i64, dims = array<i64: 0, 1>, name = "g"} : () -> !comm.token
  %1 = "comm.all_to_all"(%0) {bytes = 65536 : i64, dims = array<i64: 1>, name = "x"} : (!comm.token) -> !comm.token
}

// CHECK-LABEL: IR Dump After decompose-all-reduce: decompose-all-reduce{all-reduce=hierarchical}
// CHECK-NOT:   comm.all_reduce
// CHECK:       %[[RS:.+]] = "comm.reduce_scatter"() {bytes = 1048576 : i64, dims = array<i64: 0, 1>, name = "g.rs", part_of = "g"}
// CHECK-NEXT:  %[[AG:.+]] = "comm.all_gather"(%[[RS]]) {bytes = 1048576 : i64, dims = array<i64: 0, 1>, name = "g.ag", part_of = "g"}
// CHECK-NEXT:  "comm.all_to_all"(%[[AG]]) {bytes = 65536 : i64, dims = array<i64: 1>, name = "x"}
// CHECK-LABEL: IR Dump After chunk

// --all-reduce per-dimension fills the option: a whole all-reduce on each dimension in turn, ascending, each
// pair on the full buffer
// PERDIM-LABEL: IR Dump After decompose-all-reduce: decompose-all-reduce{all-reduce=per-dimension}
// PERDIM-NOT:   comm.all_reduce
// PERDIM:       %[[RS0:.+]] = "comm.reduce_scatter"() {bytes = 1048576 : i64, dims = array<i64: 0>, name = "g.d0.rs", part_of = "g"}
// PERDIM-NEXT:  %[[AG0:.+]] = "comm.all_gather"(%[[RS0]]) {bytes = 1048576 : i64, dims = array<i64: 0>, name = "g.d0.ag", part_of = "g"}
// PERDIM-NEXT:  %[[RS1:.+]] = "comm.reduce_scatter"(%[[AG0]]) {bytes = 1048576 : i64, dims = array<i64: 1>, name = "g.d1.rs", part_of = "g"}
// PERDIM-NEXT:  %[[AG1:.+]] = "comm.all_gather"(%[[RS1]]) {bytes = 1048576 : i64, dims = array<i64: 1>, name = "g.d1.ag", part_of = "g"}
// PERDIM-NEXT:  "comm.all_to_all"(%[[AG1]])
// PERDIM-LABEL: IR Dump After chunk
