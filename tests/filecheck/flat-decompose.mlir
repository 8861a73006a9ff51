// flat-decompose: each half of a collective over every dimension becomes one phase over the whole network
// (dim = -1) carrying its full buffer, for the whole-network algorithms select-algorithm picks next.
// RUN: astra-compile %s --topology 2x2_torus --pass-pipeline "decompose-all-reduce,chunk{chunks=2},flat-decompose,select-algorithm{algorithm=flat_direct}" --print-ir-after-all --emit mlir 2>&1 | filecheck %s
// A collective over some of the dimensions has no whole-network schedule: refused in one line, naming the pass.
// RUN: not astra-compile %s --topology 2x2x2_torus --algorithm flat_direct 2>&1 | filecheck %s --check-prefix=PART

module {
  %0 = "comm.all_reduce"() {bytes = 4096 : i64, dims = array<i64: 0, 1>, name = "g"} : () -> !comm.token
}

// CHECK-LABEL: IR Dump After flat-decompose: flat-decompose
// CHECK-NOT:   "comm.reduce_scatter"
// CHECK:       %[[RS:.+]] = "comm.phase"() {bytes = 4096 : i64, chunks = 2 : i64, collective = "g.rs", dim = -1 : i64, group_bytes = 4096 : i64, group_dims = array<i64: 0, 1>, kind = "reduce_scatter", part_of = "g", stage = 0 : i64}
// CHECK-NEXT:  "comm.phase"(%[[RS]]) {bytes = 4096 : i64, chunks = 2 : i64, collective = "g.ag", dim = -1 : i64, group_bytes = 4096 : i64, group_dims = array<i64: 0, 1>, kind = "all_gather", part_of = "g", stage = 0 : i64}
// CHECK-NEXT:  }
// CHECK-LABEL: IR Dump After select-algorithm: select-algorithm{algorithm=flat_direct}
// CHECK-COUNT-2: "comm.phase"({{.*}}) {algorithm = "direct", {{.*}}dim = -1 : i64

// PART: astra-compile: error: {{.*}}pass flat-decompose failed after decompose-all-reduce, chunk: comm.reduce_scatter 'g.rs': graph algorithms need the whole network (dims 0..2), got [0, 1]
