module attributes {comm.bandwidth_gbps = array<f64: 1.000000e+02, 5.000000e+01>, comm.blocks = ["Ring", "Switch"], comm.latency_ns = array<f64: 5.000000e+02, 5.000000e+02>, comm.links = array<i64: 1, 1>, comm.shape = array<i64: 4, 8>, comm.topology = "Ring(4)_Switch(8)"} {
  %0 = "comm.reduce_scatter"() {bytes = 1048576 : i64, dims = array<i64: 0, 1>, name = "g.rs", part_of = "g"} : () -> !comm.token
  %1 = "comm.all_gather"(%0) {bytes = 1048576 : i64, dims = array<i64: 0, 1>, name = "g.ag", part_of = "g"} : (!comm.token) -> !comm.token
  %2 = "comm.all_to_all"(%1) {bytes = 65536 : i64, dims = array<i64: 1>, name = "x"} : (!comm.token) -> !comm.token
}
