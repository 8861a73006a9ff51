module attributes {comm.topology = {dims = [{bandwidth_gbps = 2.500000e+01 : f64, block = "Switch", latency_ns = 0.000000e+00 : f64, links = 1 : i64, size = 2 : i64}, {bandwidth_gbps = 1.000000e+02 : f64, block = "Switch", latency_ns = 0.000000e+00 : f64, links = 1 : i64, size = 2 : i64}], name = "Switch(2)_Switch(2)"}} {
  %0 = "comm.all_reduce"() {bytes = 4096 : i64, chunks = 4 : i64, dims = array<i64: 0, 1>, name = "g"} : () -> !comm.token
}
