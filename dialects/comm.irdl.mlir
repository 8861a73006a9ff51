// The comm dialect: collectives on groups of topology dimensions, and the per-dimension phases they lower to.
// Loaded at run time with irdl.load_dialects; IRDL-defined ops print and parse in generic form.
// IRDL checks presence and kind of every required attribute; dialects/comm.py checks values (sizes > 0,
// dimensions in range, known algorithms) because IRDL cannot express them.
irdl.dialect @comm {
  // Completion of an op. An op that takes a token waits for the producer to finish; inside one buffer (the halves
  // and phases of one collective) it waits chunk by chunk: its chunk c starts once the producer's chunk c is done.
  irdl.type @token { }

  irdl.operation @all_reduce {
    %int = irdl.base "#builtin.integer"
    %dims = irdl.base "#builtin.dense_array"
    %str = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %int, "dims" = %dims, "name" = %str }
  }
  irdl.operation @reduce_scatter {
    %int = irdl.base "#builtin.integer"
    %dims = irdl.base "#builtin.dense_array"
    %str = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %int, "dims" = %dims, "name" = %str }
  }
  irdl.operation @all_gather {
    %int = irdl.base "#builtin.integer"
    %dims = irdl.base "#builtin.dense_array"
    %str = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %int, "dims" = %dims, "name" = %str }
  }
  irdl.operation @all_to_all {
    %int = irdl.base "#builtin.integer"
    %dims = irdl.base "#builtin.dense_array"
    %str = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %int, "dims" = %dims, "name" = %str }
  }
  irdl.operation @broadcast {
    %int = irdl.base "#builtin.integer"
    %root = irdl.base "#builtin.integer"
    %dims = irdl.base "#builtin.dense_array"
    %str = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %int, "dims" = %dims, "name" = %str, "root" = %root }
  }
  irdl.operation @reduce {
    %int = irdl.base "#builtin.integer"
    %root = irdl.base "#builtin.integer"
    %dims = irdl.base "#builtin.dense_array"
    %str = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %int, "dims" = %dims, "name" = %str, "root" = %root }
  }
  // Point to point: `src` sends `bytes` to `dst` (absolute ranks); the matching comm.recv names the same pair.
  irdl.operation @send {
    %int = irdl.base "#builtin.integer"
    %src = irdl.base "#builtin.integer"
    %dst = irdl.base "#builtin.integer"
    %str = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %int, "name" = %str, "src" = %src, "dst" = %dst }
  }
  irdl.operation @recv {
    %int = irdl.base "#builtin.integer"
    %src = irdl.base "#builtin.integer"
    %dst = irdl.base "#builtin.integer"
    %str = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %int, "name" = %str, "src" = %src, "dst" = %dst }
  }

  // One step of a hierarchical lowering: `kind` (reduce_scatter, all_gather, all_to_all) of the collective
  // `collective` over topology dimension `dim`, entered with `bytes` per NPU (summed over chunks), pipelined in
  // `chunks` chunks (dim = -1: every dimension of the group at once, for graph algorithms such as multitree).
  // `stage` is its position in the collective's chain. The algorithm attribute is set by the
  // select-algorithm pass.
  irdl.operation @phase {
    %bytes = irdl.base "#builtin.integer"
    %dim = irdl.base "#builtin.integer"
    %stage = irdl.base "#builtin.integer"
    %chunks = irdl.base "#builtin.integer"
    %coll = irdl.base "#builtin.string"
    %kind = irdl.base "#builtin.string"
    %tok = irdl.base @comm::@token
    irdl.operands(deps: variadic %tok)
    irdl.results(done: %tok)
    irdl.attributes { "bytes" = %bytes, "dim" = %dim, "stage" = %stage, "chunks" = %chunks,
                      "collective" = %coll, "kind" = %kind }
  }
}
