module attributes {comm.topology = {dims = [{bandwidth_gbps = 1.000000e+02 : f64, block = "Ring", latency_ns = 5.000000e+02 : f64, links = 1 : i64, size = 4 : i64}, {bandwidth_gbps = 5.000000e+01 : f64, block = "Switch", latency_ns = 5.000000e+02 : f64, links = 1 : i64, size = 8 : i64}], name = "Ring(4)_Switch(8)"}} {
  %0 = "comm.reduce_scatter"() {bytes = 1048576 : i64, dims = array<i64: 0>, name = "g.d0.rs", part_of = "g"} : () -> !comm.token
  %1 = "comm.all_gather"(%0) {bytes = 1048576 : i64, dims = array<i64: 0>, name = "g.d0.ag", part_of = "g"} : (!comm.token) -> !comm.token
  %2 = "comm.reduce_scatter"(%1) {bytes = 1048576 : i64, dims = array<i64: 1>, name = "g.d1.rs", part_of = "g"} : (!comm.token) -> !comm.token
  %3 = "comm.all_gather"(%2) {bytes = 1048576 : i64, dims = array<i64: 1>, name = "g.d1.ag", part_of = "g"} : (!comm.token) -> !comm.token
  %4 = "comm.all_to_all"(%3) {bytes = 65536 : i64, dims = array<i64: 1>, name = "x"} : (!comm.token) -> !comm.token
}
