module attributes {comm.topology = {dims = [{bandwidth_gbps = 1.000000e+02 : f64, block = "Ring", latency_ns = 5.000000e+02 : f64, links = 1 : i64, size = 4 : i64}, {bandwidth_gbps = 5.000000e+01 : f64, block = "Switch", latency_ns = 5.000000e+02 : f64, links = 1 : i64, size = 8 : i64}], name = "Ring(4)_Switch(8)"}} {
  %0 = "comm.broadcast"() {bytes = 1048576 : i64, dims = array<i64: 0, 1>, name = "b", root = 13 : i64} : () -> !comm.token
}
