// allocate-trees: MultiTree's (ISCA'21) spanning trees, one per root, by link allocation per time step, recorded
// as one comm.trees op (per tree and node: parent, step and link) whose token every multitree phase takes. On a
// 2x2 torus every tree reaches its three other NPUs in 2 steps; tree 0 is 0 -> {1, 2} at step 1, 2 -> 3 at step 2.
// RUN: astra-compile %s --topology 2x2_torus --algorithm multitree --print-ir-after-all --emit mlir 2>&1 | filecheck %s
// --ports fills select-algorithm's option, which the phases carry to the allocation: one new tree edge per node
// and step takes a step more
// RUN: astra-compile %s --topology 2x2_torus --algorithm multitree --ports 1 --print-ir-after-all --emit mlir 2>&1 | filecheck %s --check-prefix=PORTS

module {
  %0 = "comm.all_reduce"() {bytes = 4096 : i64, dims = array<i64: 0, 1>, name = "g"} : () -> !comm.token
}

// CHECK-LABEL: IR Dump After select-algorithm: select-algorithm{algorithm=multitree}
// CHECK-NOT:   "comm.trees"
// CHECK-LABEL: IR Dump After allocate-trees: allocate-trees
// CHECK:       %[[TREES:.+]] = "comm.trees"() {link = array<i64: -1, 0, 8, 4, {{.*}}>, method = "translated", npus = 4 : i64, parent = array<i64: -1, 0, 0, 2, 1, -1, 3, 1, 2, 0, -1, 2, 1, 3, 3, -1>, step = array<i64: 0, 1, 1, 2, 1, 0, 2, 1, 1, 2, 0, 1, 2, 1, 1, 0>, steps = 2 : i64}
// CHECK-NEXT:  %[[RS:.+]] = "comm.phase"(%[[TREES]]) {algorithm = "multitree", {{.*}}collective = "g.rs", dim = -1 : i64
// CHECK-NEXT:  "comm.phase"(%[[RS]], %[[TREES]]) {algorithm = "multitree", {{.*}}collective = "g.ag", dim = -1 : i64

// PORTS-LABEL: IR Dump After select-algorithm: select-algorithm{algorithm=multitree ports=1}
// PORTS-COUNT-2: "comm.phase"({{.*}}) {algorithm = "multitree", {{.*}}ports = 1 : i64
// PORTS-LABEL: IR Dump After allocate-trees: allocate-trees
// PORTS:       "comm.trees"() {{.*}}steps = 3 : i64}
