module attributes {comm.bandwidth_gbps = array<f64: 100.0, 50.0>, comm.blocks = ["Ring", "Switch"], comm.latency_ns = array<f64: 500.0, 500.0>, comm.links = array<i64: 1, 1>, comm.shape = array<i64: 4, 8>, comm.topology = "Ring(4)_Switch(8)"} {
  %0 = "comm.all_reduce"() {bytes = 1048576 : i64, dims = array<i64: 0, 1>, name = "g"} : () -> !comm.token
  %1 = "comm.all_to_all"(%0) {bytes = 65536 : i64, dims = array<i64: 1>, name = "x"} : (!comm.token) -> !comm.token
}
