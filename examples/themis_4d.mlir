// The Themis paper's 4D-Ring_FC_Ring_SW network (375/175/150/100 GB/s, 20/700/700/1700 ns, 1024 NPUs): a 1GB gradient
// all-reduce in 16 chunks. Compare the schedulers with:
//   astra-compile examples/themis_4d.mlir --compare
module attributes {
  comm.topology = {name = "Ring(4)_FullyConnected(8)_Ring(4)_Switch(8)", dims = [
    {block = "Ring", size = 4, bandwidth_gbps = 375.0, latency_ns = 20.0, links = 1},
    {block = "FullyConnected", size = 8, bandwidth_gbps = 175.0, latency_ns = 700.0, links = 1},
    {block = "Ring", size = 4, bandwidth_gbps = 150.0, latency_ns = 700.0, links = 1},
    {block = "Switch", size = 8, bandwidth_gbps = 100.0, latency_ns = 1700.0, links = 1}
  ]}
} {
  %0 = "comm.all_reduce"() {bytes = 1073741824 : i64, dims = array<i64: 0, 1, 2, 3>, name = "grads", chunks = 16 : i64} : () -> !comm.token
}
