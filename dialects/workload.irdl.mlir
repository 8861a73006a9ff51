// The workload dialect: one training step as compute ops and collectives joined by completion tokens.
// Collectives are the comm dialect's own ops (comm.all_reduce, ...), so the comm passes run on them unchanged;
// this dialect adds the compute side (messages are the comm dialect's send and recv). Tokens are !comm.token so
// both dialects' ops can wait on each other.
// A workload module holds one nested builtin.module per rank program (attribute wl.rank); an SPMD capture holds
// one program that stands for every rank (wl.spmd on the outer module), a pipeline-parallel capture one per stage
// (each with wl.stands_for, the ranks that run it).
// Every attribute has its own constraint variable: IRDL unifies uses of one variable, so a shared %int would
// force equal values.
irdl.dialect @wl {
  // Work on the compute stream: `flops` floating-point operations touching `bytes` bytes of memory. It may carry
  // wl.dtype, the dtype it computed in ("bf16", "tf32", ...: network/dtypes.py; absent: "fp32"), and wl.shapes, its
  // tensor arguments' sizes ("64x4096,4096x4096": network/op_classes.py; absent: not known), wl.causal = true on
  // an attention op that masked causally (absent: not), and wl.views (i64), the kernel-less ops the host dispatched
  // before it (absent: 0).
  irdl.operation @compute {
    %flops = irdl.base "#builtin.integer"
    %bytes = irdl.base "#builtin.integer"
    %name = irdl.base "#builtin.string"
    %tok = irdl.base "!comm.token"
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "flops" = %flops, "bytes" = %bytes, "name" = %name }
  }
  // The compute stream blocks until its operands (collectives) are done: torch's wait_tensor / work.wait().
  irdl.operation @wait {
    %name = irdl.base "#builtin.string"
    %tok = irdl.base "!comm.token"
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "name" = %name }
  }
  // Memory: `bytes` moved from memory into the accelerator (load) or back (store). `location` is "local" (its own
  // HBM: latency + bytes / bandwidth) or "remote" (the memory pool, timed by the pool's pipelined transfer model);
  // a remote op may carry wl.in_switch = true: the pool's switches all-gather (reduce-scatter) it on the way.
  irdl.operation @load {
    %bytes = irdl.base "#builtin.integer"
    %location = irdl.base "#builtin.string"
    %name = irdl.base "#builtin.string"
    %tok = irdl.base "!comm.token"
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %bytes, "location" = %location, "name" = %name }
  }
  irdl.operation @store {
    %bytes = irdl.base "#builtin.integer"
    %location = irdl.base "#builtin.string"
    %name = irdl.base "#builtin.string"
    %tok = irdl.base "!comm.token"
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %bytes, "location" = %location, "name" = %name }
  }
}
